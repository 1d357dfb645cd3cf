"""Process-wide test setup shared by every test module."""

import os

# JAX reads XLA_FLAGS once, when it is first imported; the sequence-parallel tests need 8
# virtual CPU devices, so the flag is set here, before any test module can import jax. It
# changes nothing for torch.
_DEVICES_FLAG = "--xla_force_host_platform_device_count=8"
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _DEVICES_FLAG).strip()
