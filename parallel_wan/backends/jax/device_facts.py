"""This process's JAX device speed (backends/device_facts.py says how it is measured)."""

from __future__ import annotations

import time

from ..device_facts import WINDOWS, DeviceSpeed


def accelerator_present() -> bool:
    import jax

    return jax.devices()[0].platform != "cpu"


def accelerator_memory(device: str) -> tuple[float | None, str] | None:
    """The first visible accelerator's memory limit as XLA reports it; None on the CPU."""
    from .backend import visible_devices

    first = visible_devices(device)[0]
    if first.platform == "cpu":
        return None
    limit = (first.memory_stats() or {}).get("bytes_limit")
    return (float(limit) if limit else None), f"{first.platform}:{first.id}"


def cpu_sharers() -> int:
    """JAX's virtual CPU devices all live in this one process's memory."""
    import jax

    return len(jax.local_devices(backend="cpu"))


def measure(device: str, dtype: str, seconds: float) -> DeviceSpeed:
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
