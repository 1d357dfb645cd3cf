"""The torch backend's local attention kernels: one registered entry per kernel, a function and
its constraints as data. Everything that decides or explains a kernel choice is derived from
these entries: auto's order per device and a setting's kernels (attention_choice.py), the
refusals before a run (attention_impl.py), the doctor's verdict (parallel_wan/doctor.py), the
values `attention_impl=` accepts (config/attention.py) and README's tables (attention_table.py).

Every module of this package whose name does not start with "_" is one kernel: it defines
`KERNEL = Kernel(...)` and is imported here on first use. Nothing here imports torch — a
kernel's function imports it when it first runs — so config/ lists the settings without torch.
A test registers a kernel of its own with `register` and takes it back with `unregister`.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass

# The GPU generations a kernel's priority names, from the CUDA compute capability (`generation`):
# what each is called where the user reads it (README, the doctor), and its GPUs.
GENERATIONS = {"ampere": "Ampere and older", "hopper": "Hopper", "blackwell": "Blackwell"}
GENERATION_GPUS = {"ampere": "sm_89 and below", "hopper": "sm_90", "blackwell": "sm_100 and newer"}
DEVICE_WORDS = {"cuda": "CUDA GPUs", "cpu": "CPUs"}


def generation(kind: str, capability: tuple[int, int] | None) -> str:
    """The row of the priority tables a device reads: "cpu", a GPU generation (GENERATIONS) for
    CUDA, or "other" (any other device type, e.g. meta)."""
    if kind == "cuda":
        major = capability[0]
        return "hopper" if major == 9 else "blackwell" if major >= 10 else "ampere"
    return kind if kind == "cpu" else "other"


@dataclass(frozen=True)
class HeadDims:
    """The head sizes a kernel takes: multiples of `multiple_of` up to `at_most`, or exactly
    `one_of`, or powers of two from `power_of_two_from`."""

    multiple_of: int = 1
    at_most: int | None = None
    one_of: tuple[int, ...] | None = None
    power_of_two_from: int | None = None

    def takes(self, head_dim: int) -> bool:
        if self.one_of is not None:
            return head_dim in self.one_of
        if self.power_of_two_from is not None:
            return head_dim >= self.power_of_two_from and head_dim & (head_dim - 1) == 0
        return head_dim % self.multiple_of == 0 and (self.at_most is None or head_dim <= self.at_most)

    def __str__(self) -> str:  # as the refusals and README say it, after "head_dim"
        if self.one_of is not None:
            return " or ".join(map(str, self.one_of))
        if self.power_of_two_from is not None:
            return f"a power of two ≥ {self.power_of_two_from}"
        if self.at_most is not None:
            return f"≤ {self.at_most} in multiples of {self.multiple_of}"
        return "any" if self.multiple_of == 1 else f"multiples of {self.multiple_of}"


ANY_HEAD_DIM = HeadDims()
# The order a named setting's checks run in: the first that fails is the line the user reads.
CHECKS = ("device", "dtype", "package", "capability", "head_dim")


@dataclass(frozen=True)
class Kernel:
    """One local attention kernel: `run(q, k, v, scale) -> (out, lse)` with q (B, S, H, D),
    k/v (B, L, H, D), out in q's dtype and the log-sum-exp (B, S, H) in at least float32."""

    name: str
    setting: str  # the attention_impl value whose kernels it is one of
    run: Callable
    summary: str  # what it is, in a few words (README's table)
    # generation (see `generation`) → its place in the order kernels are tried there, lower
    # first. auto tries an exact kernel on every generation named here (a kernel that cannot run
    # some input refuses it and the next is tried); a named setting orders its kernels by it
    # and runs none on a generation not named.
    priority: Mapping[str, int]
    exact: bool = True  # False: it changes the numbers (quantized), so auto never picks it
    returns_lse: bool = True  # sequence parallelism merges key blocks by their lse
    devices: tuple[str, ...] = ("cuda",)  # the device types a named setting runs it on
    min_capability: tuple[int, int] | None = None  # CUDA: the oldest GPU a named setting runs it on
    capability_why: str = ""  # what that GPU has that older ones lack (the refusal says it)
    dtypes: tuple[str, ...] | None = None  # None: any; the first is the one a refusal suggests
    head_dims: HeadDims = ANY_HEAD_DIM
    packages: tuple[str, ...] = ()  # import names; the kernel is tried only where all are installed
    import_check: bool = False  # import the packages to check them (a wheel built for another torch fails there)
    install: str = ""  # what a refusal says to install: "NAME: pip install …"
    package_label: str = ""  # the package as people name it (the doctor's advice)
    # On CPU tensors too, under Triton's interpreter (TRITON_INTERPRET=1: tests only), with
    # these head sizes and no other check. None: not interpreted.
    interpreted: HeadDims | None = None
    checks: tuple[str, ...] = CHECKS  # the order of this kernel's refusals (see CHECKS)
    slow: str | None = None  # a slow fallback (the doctor warns when auto ended on it): what it is
    suggested_on: tuple[str, ...] = ()  # generations where the doctor says it may be faster when not chosen
    op: str | None = None  # the torch op it launches (the fake-GPU tests tell kernels apart by it)
    listed: int = 100  # its setting's place in the list of attention_impl values, lower first


_REGISTRY: dict[str, Kernel] = {}
_loaded: list[bool] = []


def register(kernel: Kernel) -> Kernel:
    """Add `kernel` (a kernel module's KERNEL, or a test's own: after the modules' kernels)."""
    _load()
    if not kernel.returns_lse:
        raise ValueError(
            f"attention kernel {kernel.name!r} returns no log-sum-exp; a ring merges its blocks by it, so every "
            "kernel must return one"
        )
    if kernel.name in _REGISTRY and _REGISTRY[kernel.name] is not kernel:
        raise ValueError(f"attention kernel {kernel.name!r} is registered twice")
    _REGISTRY[kernel.name] = kernel
    return kernel


def unregister(name: str) -> None:
    """Take a kernel a test registered back out."""
    _REGISTRY.pop(name, None)


def _load() -> None:
    if _loaded:
        return
    _loaded.append(True)
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            register(importlib.import_module(f"{__name__}.{info.name}").KERNEL)


def kernels() -> tuple[Kernel, ...]:
    """Every registered kernel."""
    _load()
    return tuple(_REGISTRY.values())


def names() -> tuple[str, ...]:
    return tuple(k.name for k in kernels())


def kernel(name: str) -> Kernel:
    _load()
    if name not in _REGISTRY:
        raise ValueError(f"attention kernel {name!r} is unknown; choose from {', '.join(names())}")
    return _REGISTRY[name]


def settings() -> tuple[str, ...]:
    """The attention_impl values that name kernels, in their listed order (auto is not one:
    it is every exact kernel)."""
    first: dict[str, tuple[int, int]] = {}
    for i, k in enumerate(kernels()):
        first.setdefault(k.setting, (k.listed, i))
    return tuple(sorted(first, key=first.__getitem__))


def of_setting(setting: str) -> tuple[Kernel, ...]:
    return tuple(k for k in kernels() if k.setting == setting)
