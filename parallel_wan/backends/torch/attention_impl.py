"""attention_impl against the machine, before anything loads: can the kernels a run names run
here — the device, the GPU's generation, the package, the dtype, the model's head_dim? One line
naming the setting, the value and the fix when not (backends/process.py raises it as a
ConfigError, exit 2; the doctor prints it). Derived from the registered kernels' constraints
(kernels/): a setting runs when one of its kernels passes every check; when none does, the line
is the check that the kernel getting furthest in its own `checks` order failed. auto never
fails here: it falls back at run time."""

from __future__ import annotations

from . import attention_choice as choice, kernels as registry
from .attention_choice import Device, capable, device_facts, dtype_name, runs_on
from .kernels import DEVICE_WORDS, Kernel

FIX = "use attention_impl=auto"


def unavailable_reason(impl: str, device, head_dim: int, dtype) -> str | None:
    """Why attention_impl=`impl` cannot run a model of `head_dim` in `dtype` on `device` (torch's
    device and dtype), or None when it can: asked before anything loads (backends/process.py
    check_device), so a run that cannot use the kernel it names stops in one line."""
    return refusal(impl, device_facts(device), dtype_name(dtype), head_dim)


def refusal(setting: str, device: Device, dtype: str, head_dim: int) -> str | None:
    """`unavailable_reason` on a device's facts; None for auto (and anything naming no kernel)."""
    family = registry.of_setting(setting)
    if not family:
        return None
    gen = device.generation
    # A kernel built for other GPU generations (flash-attn 3 off Hopper) does not speak for the
    # setting there; where none of its kernels is for this device, all of them say why not.
    here = sorted((k for k in family if gen in k.priority), key=lambda k: k.priority[gen]) or list(family)
    furthest = None
    for kernel in here:
        failed = _first_failure(kernel, setting, device, dtype, head_dim)
        if failed is None:
            return None
        if furthest is None or failed[0] > furthest[0]:
            furthest = failed
    return furthest[1]


def _first_failure(kernel: Kernel, setting: str, device: Device, dtype: str, head_dim: int):
    """(how far the kernel got, the refusal) for its first failing check, or None."""
    for depth, check in enumerate(kernel.checks):
        line = CHECKS[check](kernel, f"attention_impl={setting}", device, dtype, head_dim)
        if line:
            return depth, line
    return None


def _interpreted_cpu(kernel: Kernel, device: Device) -> bool:
    return device.kind == "cpu" and device.kind not in kernel.devices and kernel.interpreted is not None


def _device(kernel: Kernel, named: str, device: Device, dtype: str, head_dim: int) -> str | None:
    if runs_on(kernel, device):
        return None
    where = " or ".join(DEVICE_WORDS.get(d, d) for d in kernel.devices)
    if _interpreted_cpu(kernel, device):
        return f"{named} runs on {where} (Triton kernels); {FIX} on CPU"
    return f"{named} runs on {where}, not {device.kind}; {FIX}"


def _dtype(kernel: Kernel, named: str, device: Device, dtype: str, head_dim: int) -> str | None:
    if kernel.dtypes is None or dtype in kernel.dtypes or _interpreted_cpu(kernel, device):
        return None
    return f"{named} runs dtype={' or '.join(kernel.dtypes)}, not {dtype}; set dtype={kernel.dtypes[0]} or {FIX}"


def _package(kernel: Kernel, named: str, device: Device, dtype: str, head_dim: int) -> str | None:
    return None if choice.installed(kernel) else f"{named} needs {kernel.install}, or {FIX}"


def _capability(kernel: Kernel, named: str, device: Device, dtype: str, head_dim: int) -> str | None:
    if capable(kernel, device):
        return None
    (major, minor), (need_major, need_minor) = device.capability, kernel.min_capability
    why = f" ({kernel.capability_why})" if kernel.capability_why else ""
    return f"{named} needs an sm_{need_major}{need_minor} or newer GPU{why}, this is sm_{major}{minor}; {FIX}"


def _head_dim(kernel: Kernel, named: str, device: Device, dtype: str, head_dim: int) -> str | None:
    if _interpreted_cpu(kernel, device):
        rule = kernel.interpreted
        if rule.takes(head_dim):
            return None
        needs = f"a power-of-two head_dim ≥ {rule.power_of_two_from}" if rule.power_of_two_from else f"head_dim {rule}"
        return f"{named} under the Triton interpreter needs {needs}, not {head_dim}"
    if kernel.head_dims.takes(head_dim):
        return None
    return f"{named} runs head_dim {kernel.head_dims}, this model has {head_dim}; {FIX}"


CHECKS = {
    "device": _device,
    "dtype": _dtype,
    "package": _package,
    "capability": _capability,
    "head_dim": _head_dim,
}
