"""attention_impl= and sequence_parallel=: the local attention kernels (README "Attention
kernels"), and whose sequence parallelism runs them — ours (backends/torch/sequence_parallel.py)
or xDiT's (`xfuser`, its own kernels). The values attention_impl takes are the registered
kernels' settings (backends/torch/kernels/, read without torch) plus auto and two old names."""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from ..backends.capabilities import capabilities
from ..backends.torch import kernels
from ..errors import ConfigError
from .schema import _choice, _setting

log = logging.getLogger(__name__)

SEQUENCE_PARALLEL = ("ours", "xfuser")
# attention_impl's old names: ours was auto's (before issue 27); xfuser was the setting of xDiT's
# attention before it got its own (issue 39): sequence_parallel=xfuser.
OLD_NAMES = ("xfuser", "ours")


def attention_impls() -> tuple[str, ...]:
    """Every value attention_impl= accepts: auto, each registered kernel setting, the old names."""
    return ("auto", *kernels.settings(), *OLD_NAMES)


@dataclass(frozen=True)
class AttentionSettings:
    attention_impl: str  # auto | a registered kernel setting
    sequence_parallel: str  # ours | xfuser
    sequence_parallel_set_by: str  # the setting that chose it, as its refusals name it


def attention_settings(cfg: Mapping, backend: str) -> AttentionSettings:
    impl = _choice("attention_impl", str(_setting(cfg, "attention_impl")), attention_impls())
    impl = "auto" if impl == "ours" else impl  # ours: auto's old name
    if impl != "auto" and not capabilities(backend).attention_kernels:
        raise ConfigError(
            f"attention_impl={impl} is a PyTorch (CUDA) kernel but backend={backend}; "
            "use attention_impl=auto (JAX picks its own attention)",
            setting=("attention_impl", "backend"),
        )
    sequence_parallel = _choice("sequence_parallel", str(_setting(cfg, "sequence_parallel")), SEQUENCE_PARALLEL)
    if impl == "xfuser":
        _note_old_name()
        return AttentionSettings("auto", "xfuser", "attention_impl")
    if sequence_parallel == "xfuser":
        if not capabilities(backend).attention_kernels:
            raise ConfigError(
                f"sequence_parallel=xfuser is xDiT's attention for PyTorch but backend={backend}; "
                "use sequence_parallel=ours",
                setting=("sequence_parallel", "backend"),
            )
        if impl != "auto":
            raise ConfigError(
                f"attention_impl={impl} picks a kernel of our attention, but sequence_parallel=xfuser runs xDiT's "
                "with its own kernels; drop attention_impl or use sequence_parallel=ours",
                setting=("attention_impl", "sequence_parallel"),
            )
    return AttentionSettings(impl, sequence_parallel, "sequence_parallel")


@functools.cache
def _note_old_name() -> None:
    # once per process: every entry of a prompts file, every request of a server resolves it again
    log.info("attention_impl=xfuser is now sequence_parallel=xfuser (attention_impl=auto); set that instead")
