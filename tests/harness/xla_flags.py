"""The XLA flags of every JAX process the suite runs (tests/conftest.py sets them for the workers;
tests that start JAX processes with a device count of their own use `host_flags`)."""

# XLA:CPU compiles the suite's JAX programs at LLVM's -O1: the tiny models' programs run for
# milliseconds and compile for seconds, and LLVM's passes are much of that compile. What the tests
# check is decided above LLVM (XLA's fusion, SPMD partitioning, the collectives), and at -O1 the
# code computes the same bits as at the default -O2: the tiny CLI run's mp4 is byte-identical, and
# the bf16 meshes still equal one device bit for bit. (-O0 saves twice as much but changes the
# bits between meshes: test_bf16_meshes' JAX cases fail there, so it is not used.)
# test_jax_pipeline + test_jax_sequence_parallel on one worker: 69.7 → 61.9 CPU-s (2026-11-28).
SUITE = "--xla_backend_optimization_level=1"


def host_flags(devices: int) -> str:
    """XLA_FLAGS for a JAX process of `devices` virtual CPU devices, compiled as the suite's are."""
    return f"--xla_force_host_platform_device_count={devices} {SUITE}"
