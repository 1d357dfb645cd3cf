"""Failures during a run that have a one-line reason (run.py prints it and exits with the
error's `exit_code`, 1 unless it says otherwise, no traceback). Bad settings and files found
before the run are `ConfigError` (exit 2)."""


class ConfigError(ValueError):
    """A setting or an input file is wrong, found before the run starts; the message is one
    line a user can act on (setting, value, fix). Exit 2, nothing written.

    `setting`: the setting the message is about (`setting="height"`), or the settings it names
    in the message's order when it is about several (`("height", "width")`); None when it is
    about no one setting. The server says which request field a refusal is about from this
    (serve/words.py), never from the message's text."""

    def __init__(self, message: str = "", setting: str | tuple[str, ...] | None = None):
        super().__init__(message)
        self.setting = setting

    @property
    def settings(self) -> tuple[str, ...]:
        """The settings this error is about, as a tuple (empty: none)."""
        if self.setting is None:
            return ()
        return (self.setting,) if isinstance(self.setting, str) else tuple(self.setting)


class RunError(RuntimeError):
    """The run stopped for a reason the message gives in full; nothing was written."""

    exit_code = 1


class BadWeights(RunError):
    """A weights or LoRA file holds NaN or ±inf (found while loading: weights/finite.py). Bad
    input like a bad setting, found as soon as its bytes are read: exit 2."""

    exit_code = 2


class NonFiniteLatents(RunError):
    """The latents hold NaN or ±inf after some step: every later step and the video would be noise."""


class OutputWriteError(RunError):
    """The outputs could not be written (full disk, I/O error); none was left behind."""
