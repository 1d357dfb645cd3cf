"""backend=jax's VAE encode split by height (backend.vae_encode: the video sharded over the
devices that divide its latent rows, XLA's partitioner running the encode on the bands) equals
the one-device encode: tiny random Wan 2.1 and Wan 2.2 VAEs, 12 latent rows (on 6 of the 8
devices: the largest count dividing 12) and 16 rows (all 8). (Where no count divides but 1, the
encode runs on one device: height_split, shared with the decode.)"""

from __future__ import annotations

import numpy as np
import pytest
from harness.jax_devices import rel_err, require_eight_devices
from harness.tiny_vae import TINY_VAE, random_state

require_eight_devices()

CASES = [("wan2.1", 12, 6), ("wan2.2", 16, 8)]


def _backend(devices: int):
    from parallel_wan.backends.jax.backend import JaxBackend
    from parallel_wan.config import MeshSpec

    return JaxBackend(MeshSpec(name="test", cp=devices, ulysses=devices))


@pytest.mark.parametrize("variant, rows, split", CASES)
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_split_encode_equals_one_device(variant, rows, split):
    import jax

    from parallel_wan.backends.jax import placement
    from parallel_wan.weights import tree

    cfg = TINY_VAE[variant]
    stride = cfg.spatial_stride
    rng = np.random.default_rng(rows)
    video = np.clip(np.cumsum(rng.standard_normal((1, 3, 5, rows * stride, 2 * stride)), axis=3) / 8, -1, 1)
    state = tree.unflatten(random_state(variant, 0))
    means, compiled = [], []
    for devices in (1, 8):
        backend = _backend(devices)
        params = placement.place(state, backend.mesh, "float32")
        means.append(np.asarray(jax.device_get(backend.vae_encode(params, video.astype(np.float32), cfg))))
        compiled.append([k[1] for k in backend._encoders])
    assert compiled == [[1], [split]]  # the split the encode ran on
    assert rel_err(means[1], means[0]) <= 1e-5, rel_err(means[1], means[0])
