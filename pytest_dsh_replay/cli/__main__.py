"""``python -m pytest_dsh_replay.cli``: the ``dsh-replay`` command."""

from .main import main

main()
