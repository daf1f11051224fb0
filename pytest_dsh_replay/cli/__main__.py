"""``python -m pytest_dsh_replay.cli``: the ``dsh-replay`` command.

The package's ``__init__`` imports only :mod:`.process`, so SIGINT's disposition is the command's
(:func:`~.process.become_command`) before the command line's imports begin."""

from .process import become_command

become_command()

from . import main  # noqa: E402 (after SIGINT's disposition: the imports are the start-up's longest part)

main()
