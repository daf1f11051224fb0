"""``python -m pytest_dsh_replay.cli``: the ``dsh-replay`` command.

The package's ``__init__`` imports only :mod:`.process`, so SIGINT's disposition is the command's
(:func:`~.process.become_command`) before the command line's imports begin: they are the start-up's
longest part. Imported as a module (a walk of the package), it does nothing."""

if __name__ == "__main__":  # pragma: no cover (run in subprocesses)
    from .process import become_command

    become_command()

    from . import main

    main()
