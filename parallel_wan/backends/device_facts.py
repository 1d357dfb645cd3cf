"""What the planner and the fit check ask of the device before a backend exists, answered by
each backend with its own library (backends/torch/device_facts.py, backends/jax/device_facts.py):
whether there is an accelerator, how much memory one device holds, and the dense matrix-multiply
speed of the device this process runs on, measured (a few tenths of a second, only for a long
job): the rate the job-time estimate divides the FLOPs by (memory_plan/compute_time.py).

Square matrices of the run's dtype, large enough to be compute bound (2048 on a GPU/TPU, 512 on
a CPU, where the run's threads are the ones measured and a bf16 product without AVX-512 BF16 is
slow), one warm-up, then as many products as fit in `seconds`, the best of WINDOWS windows.
Asked only when a job looks long, never in a normal start. Each backend measures with its own
library (backends/torch/device_facts.py, backends/jax/device_facts.py).
"""

from __future__ import annotations

import importlib
from typing import NamedTuple

from .capabilities import capabilities

# The best of this many equal windows: another process taking the cores for a moment (a shared
# machine, a warm-up) lowers one window, not the figure.
WINDOWS = 6


class DeviceSpeed(NamedTuple):
    flops: float  # FLOP/s of one dense matrix-multiply stream
    name: str  # the device, for messages
    cpu: bool  # a CPU (the job-time estimate takes another share of this speed there)


def _probe(backend: str):
    return importlib.import_module(f"{capabilities(backend).package}.device_facts")


def accelerator_present(backend: str) -> bool:
    """Whether the backend's default device is a GPU/TPU (without starting anything heavy)."""
    return _probe(backend).accelerator_present()


def accelerator_memory(backend: str, device: str) -> tuple[float | None, str] | None:
    """(bytes one accelerator holds or None when it does not say, its name) for the run's
    `device` setting, or None when the run computes on the CPU (the host's memory decides)."""
    return _probe(backend).accelerator_memory(device)


def cpu_sharers(backend: str) -> int:
    """How many of the run's devices share this host's memory when they are CPUs: torchrun's
    processes of this node, or JAX's virtual CPU devices in this one process."""
    return _probe(backend).cpu_sharers()


def measure_device(backend: str, device: str = "auto", dtype: str = "bfloat16", seconds: float = 0.6) -> DeviceSpeed:
    """The speed of the device a process of this run computes on."""
    return _probe(backend).measure(device, dtype, seconds)
