"""Failures during a run that have a one-line reason (run.py prints it and exits 1, no
traceback). Bad settings and files found before the run are `ConfigError` (exit 2)."""


class RunError(RuntimeError):
    """The run stopped for a reason the message gives in full; nothing was written."""


class NonFiniteLatents(RunError):
    """The latents hold NaN or ±inf after some step: every later step and the video would be noise."""


class OutputWriteError(RunError):
    """The outputs could not be written (full disk, I/O error); none was left behind."""
