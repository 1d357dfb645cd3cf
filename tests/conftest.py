"""Process-wide test setup shared by every test module."""

import os

# JAX reads XLA_FLAGS once, when it is first imported; the sequence-parallel tests need 8
# virtual CPU devices, so the flag is set here, before any test module can import jax. It
# changes nothing for torch.
_DEVICES_FLAG = "--xla_force_host_platform_device_count=8"
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _DEVICES_FLAG).strip()

# libtpu (installed for the TPU ahead-of-time tests) makes every JAX process try to open a TPU
# first: a second of start-up, errors on stderr, and /tmp/libtpu_lockfile, which a second JAX
# process then fails on. The tests run JAX on CPU devices; the AOT tests ask libtpu for a
# topology directly (backends/jax/aot.py), which works with CPU as the default platform.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
