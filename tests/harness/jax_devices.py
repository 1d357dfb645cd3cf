"""The JAX tests' common ground: 8 virtual devices (tests/conftest.py sets the XLA flag before
anything imports jax) and the relative error they report."""

import jax
import numpy as np
import pytest


def require_eight_devices() -> None:
    """Fail, not skip: these are the JAX backend's only multi-device checks."""
    if jax.device_count() < 8:
        pytest.fail(
            "needs 8 JAX devices; tests/conftest.py sets XLA_FLAGS=--xla_force_host_platform_device_count=8 "
            "before jax is imported — something imported jax earlier",
            pytrace=False,
        )


def rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))
