"""This process's torch device speed (backends/device_facts.py says how it is measured)."""

from __future__ import annotations

import os
import time

from ..device_facts import WINDOWS, DeviceSpeed


def accelerator_present() -> bool:
    import torch

    return torch.cuda.is_available()


def accelerator_memory(device: str) -> tuple[float | None, str] | None:
    """A GPU's total memory (nothing of this run is on it yet); None on the CPU."""
    import torch

    if device != "cpu" and torch.cuda.is_available():
        index = torch.device(device).index if device.startswith("cuda:") else 0
        return float(torch.cuda.get_device_properties(index).total_memory), f"cuda:{index}"
    return None


def cpu_sharers() -> int:
    """torchrun's processes on this node share its memory."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)


def measure(device: str, dtype: str, seconds: float) -> DeviceSpeed:
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
