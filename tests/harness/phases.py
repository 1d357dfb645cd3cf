"""Trivial phases for benchmarks/gpu_acceptance's runner: a phase that measures something and
then hangs (as a stuck CUDA call would), and one that just finishes. A spawned child imports
them by name, so they live here, not in a test module."""

import time


def hangs(phase) -> None:
    phase.record("measured_before_hanging", 42)
    while True:
        time.sleep(60)


def finishes(phase) -> None:
    phase.record("ran", True)
