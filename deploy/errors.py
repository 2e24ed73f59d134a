"""Errors the command line turns into a message and an exit code, without a traceback."""


class JobFailed(RuntimeError):
    """The job ran and cannot go on; the message says why and what to do (its final checkpoint is written)."""
