"""The dense matrix-multiply speed of the device this process runs on, measured (a few tenths
of a second, only for a long job): the rate the job-time estimate divides the FLOPs by (memory_plan/compute_time.py).

Square matrices of the run's dtype, large enough to be compute bound (2048 on a GPU/TPU, 512 on
a CPU, where the run's threads are the ones measured and a bf16 product without AVX-512 BF16 is
slow), one warm-up, then as many products as fit in `seconds`, the best of WINDOWS windows. Asked only when a job
looks long, never in a normal start.
"""

from __future__ import annotations

import os
import time
from typing import NamedTuple

# The best of this many equal windows: another process taking the cores for a moment (a shared
# machine, a warm-up) lowers one window, not the figure.
WINDOWS = 6


class DeviceSpeed(NamedTuple):
    flops: float  # FLOP/s of one dense matrix-multiply stream
    name: str  # the device, for messages
    cpu: bool  # a CPU (the job-time estimate takes another share of this speed there)


def accelerator_present(backend: str) -> bool:
    """Whether the backend's default device is a GPU/TPU (without starting anything heavy)."""
    if backend == "torch":
        import torch

        return torch.cuda.is_available()
    import jax

    return jax.devices()[0].platform != "cpu"


def measure_device(backend: str, device: str = "auto", dtype: str = "bfloat16", seconds: float = 0.6) -> DeviceSpeed:
    """The speed of the device a process of this run computes on."""
    if backend == "torch":
        return _torch(device, dtype, seconds)
    return _jax(dtype, seconds)


def _torch(device: str, dtype: str, seconds: float) -> DeviceSpeed:
    import torch

    # a GPU when the run asks for one (or auto) and there is one; else this CPU — the planner and
    # the doctor may run where device=cuda names a GPU the machine lacks (the doctor says so)
    if device != "cpu" and torch.cuda.is_available():
        index = int(device.split(":")[1]) if device.startswith("cuda:") else int(os.environ.get("LOCAL_RANK", "0") or 0)
        where = torch.device("cuda", index)
        name = f"cuda:{index} ({torch.cuda.get_device_name(index)})"
        n, batch = 2048, 16

        def sync():
            torch.cuda.synchronize(where)
    else:
        where, n, batch = torch.device("cpu"), 512, 1
        name = f"this CPU ({torch.get_num_threads()} threads)"

        def sync():
            pass

    kind = torch.bfloat16 if dtype == "bfloat16" else torch.float32
    a = torch.randn(n, n, device=where, dtype=kind)
    b = torch.randn(n, n, device=where, dtype=kind)

    def window() -> float:
        count, start = 0, time.perf_counter()
        while True:
            torch.mm(a, b)
            count += 1
            if count % batch == 0:
                sync()
                if time.perf_counter() - start >= seconds / WINDOWS:
                    return 2 * n**3 * count / (time.perf_counter() - start)

    with torch.inference_mode():
        torch.mm(a, b)
        sync()
        return DeviceSpeed(max(window() for _ in range(WINDOWS)), name, where.type == "cpu")


def _jax(dtype: str, seconds: float) -> DeviceSpeed:
    import jax
    import jax.numpy as jnp

    device = jax.devices()[0]
    n = 512 if device.platform == "cpu" else 2048
    kind = jnp.bfloat16 if dtype == "bfloat16" else jnp.float32
    a = jax.device_put(jnp.ones((n, n), kind), device)
    mm = jax.jit(lambda x, y: x @ y)
    mm(a, a).block_until_ready()

    def window() -> float:
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds / WINDOWS:
            mm(a, a).block_until_ready()
            count += 1
        return 2 * n**3 * count / (time.perf_counter() - start)

    return DeviceSpeed(
        max(window() for _ in range(WINDOWS)),
        f"{device.platform}:{device.id} ({device.device_kind})",
        device.platform == "cpu",
    )
