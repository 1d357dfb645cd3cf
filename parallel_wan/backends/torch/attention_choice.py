"""Which registered kernels (kernels/) an attention_impl value tries on a device, in order —
derived from their constraints, without torch:

- auto: every exact kernel whose priority names the device's generation, whose packages are
  installed and which takes the dtype and head_dim, lowest priority first. A kernel's own
  checks (sm version, sequence length, alignment) are the final word at run time: the first
  that runs is kept (attention.py `KernelChoice`).
- a named setting (sdpa, flash, …): its kernels that run on this device (its type, the GPU's
  capability, the packages), in the same priority order. The dtype and head_dim were checked
  before the run (attention_impl.py).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass

from . import kernels as registry
from .kernels import Kernel


@dataclass(frozen=True)
class Device:
    """What a kernel choice asks of a device."""

    kind: str  # torch.device.type: "cpu", "cuda", "meta", …
    capability: tuple[int, int] | None = None  # CUDA's compute capability
    interpreted: bool = False  # Triton's interpreter is on (TRITON_INTERPRET=1: Triton kernels on CPU tensors)

    @property
    def generation(self) -> str:
        return registry.generation(self.kind, self.capability)


def triton_interpreted() -> bool:
    """Triton's interpreter is on: Triton kernels run on CPU tensors (tests)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def device_facts(device) -> Device:
    """A torch.device's facts (its capability asked of CUDA)."""
    capability = None
    if device.type == "cuda":
        import torch

        capability = tuple(torch.cuda.get_device_capability(device))
    return Device(device.type, capability, triton_interpreted())


def dtype_name(dtype) -> str:
    """torch.bfloat16 → "bfloat16" (a kernel's dtypes are names: no torch here)."""
    return str(dtype).removeprefix("torch.")


def installed(kernel: Kernel) -> bool:
    """Every package the kernel needs is there: imported when the kernel says a bad wheel shows
    only on import, found without importing otherwise (Triton's import alone takes seconds)."""
    for name in kernel.packages:
        if kernel.import_check:
            try:
                importlib.import_module(name)
            except Exception:  # ImportError, or a wheel built for another torch/CUDA
                return False
        elif sys.modules.get(name) is None and importlib.util.find_spec(name) is None:
            return False
    return True


def runs_on(kernel: Kernel, device: Device) -> bool:
    """The kernel runs on this type of device (CPU tensors count under an interpreter it has)."""
    if device.kind in kernel.devices:
        return True
    return device.kind == "cpu" and device.interpreted and kernel.interpreted is not None


def capable(kernel: Kernel, device: Device) -> bool:
    """The GPU is recent enough for a named setting to run it (not a GPU: nothing to ask)."""
    return device.kind != "cuda" or kernel.min_capability is None or device.capability >= kernel.min_capability


def takes(kernel: Kernel, dtype: str, head_dim: int) -> bool:
    return (kernel.dtypes is None or dtype in kernel.dtypes) and kernel.head_dims.takes(head_dim)


def _by_priority(found: list[Kernel], generation: str) -> list[str]:
    return [k.name for k in sorted(found, key=lambda k: k.priority[generation])]


def auto_order(device: Device, dtype: str, head_dim: int, preferred: str | None = None) -> list[str]:
    """The kernels auto tries for these inputs, fastest first; `preferred` (benchmarks force
    one) goes first on a CPU or a GPU."""
    gen = device.generation
    found = [
        k for k in registry.kernels() if k.exact and gen in k.priority and installed(k) and takes(k, dtype, head_dim)
    ]
    names = _by_priority(found, gen)
    if preferred is not None and gen != "other":
        names = [preferred] + [n for n in names if n != preferred]
    return names


def setting_order(setting: str, device: Device) -> list[str]:
    """attention_impl=`setting`'s kernels this device can run, fastest first."""
    gen = device.generation
    found = [
        k
        for k in registry.of_setting(setting)
        if gen in k.priority and runs_on(k, device) and capable(k, device) and installed(k)
    ]
    return _by_priority(found, gen)


def candidates(setting: str, device: Device, dtype: str, head_dim: int, preferred: str | None = None) -> list[str]:
    """The kernels tried, in order, for attention_impl=`setting` on these inputs."""
    if setting == "auto":
        return auto_order(device, dtype, head_dim, preferred)
    return setting_order(setting, device)
