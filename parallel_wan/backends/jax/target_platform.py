"""The platform the programs being traced will run on.

Kernel choices (splash attention on TPU, cuDNN on GPU, plain jnp on CPU; Pallas interpret mode
off TPU; `shard_map`'s varying-axes check) are made while tracing. They normally follow the
process's own devices (`jax.default_backend()`), but an ahead-of-time compile for a TPU slice
this process does not drive (aot.py, a TPU topology's compile-only devices on a CPU host)
must trace what that TPU would run, so it names the target here for the duration.
"""

from __future__ import annotations

import contextlib

import jax

_target: str | None = None


def current() -> str:
    """ "tpu", "gpu", "cpu", …: the compile target when one is set, else JAX's default backend."""
    return _target or jax.default_backend()


@contextlib.contextmanager
def compiling_for(platform: str):
    """Trace (and lower) for `platform` inside this context. Trace-time only, like
    `ops.layer_transform`: programs traced here keep the choices made here."""
    global _target
    previous, _target = _target, platform
    try:
        yield
    finally:
        _target = previous
