"""The height-split VAE encode (backends/torch/vae_encode.py) against the one-process encode:
tiny random Wan 2.1 (z 16, 8-pixel latent rows) and Wan 2.2 (z 48, 2×2 patchify, AvgDown3D
shortcuts, 16-pixel rows) VAEs on 2, 3 and 4 gloo ranks, with uneven bands (13 latent rows), the
first chunk and two more (9 frames: the time cache and the temporal downsampling), and a video
with fewer latent rows than ranks (the rank without rows sends nothing and still gets the
whole mean). Every rank returns the whole posterior mean.

The whole-pipeline checks (a video-to-video and an I2V run on a mesh give the one-process
frames, the encode now split) are tests/parallel/test_parallel_pipeline.py's.
"""

import numpy as np
import pytest
import torch
from harness.ranks import run_on_ranks
from harness.tiny_vae import TINY_VAE, random_state
from test_vae_decode_parallel import FLOAT_ATOL, FLOAT_RTOL

# (name, VAE, video shape (1, 3, frames, H, W)): 13 latent rows → bands 7/6, 5/4/4, 4/3/3/3;
# 3 rows on 4 ranks: one sits out.
CASES = [
    ("wan2.1", "wan2.1", (1, 3, 9, 13 * 8, 5 * 8)),
    ("wan2.2", "wan2.2", (1, 3, 9, 13 * 16, 3 * 16)),
    ("wan2.2, 3 rows", "wan2.2", (1, 3, 5, 3 * 16, 2 * 16)),
]


def _video(shape, seed):
    # smooth along the height, so a row taken from the wrong place shows; in [-1, 1]
    rng = np.random.default_rng(seed)
    return np.clip(np.cumsum(rng.standard_normal(shape), axis=3) / 8, -1, 1).astype(np.float32)


def _one_process(variant, state, video):
    from parallel_wan.backends.torch import ops
    from parallel_wan.models import vae
    from parallel_wan.weights import tree

    params = tree.unflatten({k: torch.from_numpy(v) for k, v in state.items()})
    with torch.inference_mode():
        return vae.encode(params, torch.from_numpy(video), ops, TINY_VAE[variant]).numpy()


def encode_on_rank(rank, world, cases):
    from parallel_wan.backends.torch.backend import start_torch_backend
    from parallel_wan.config import MeshSpec
    from parallel_wan.launch import Launch
    from parallel_wan.weights import tree

    backend = start_torch_backend(
        "cpu", MeshSpec(name="test", cp=world, ulysses=world), Launch(rank, world, rank, "test")
    )
    out = []
    for variant, state, video in cases:
        params = tree.unflatten({k: torch.from_numpy(v) for k, v in state.items()})
        with torch.inference_mode():
            out.append(backend.vae_encode(params, video, TINY_VAE[variant]).numpy())
    return out


@pytest.fixture(scope="module")
def cases():
    built = {}
    for seed, (name, variant, shape) in enumerate(CASES):
        video, state = _video(shape, seed), random_state(variant, seed)
        built[name] = (variant, state, video, _one_process(variant, state, video))
    return built


@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_height_split_encode_matches_one_process(cases, world):
    ranks = run_on_ranks(encode_on_rank, world, [c[:3] for c in cases.values()], timeout_s=180)
    for i, (name, (_, _, _, ref)) in enumerate(cases.items()):
        for rank, got in enumerate(r[i] for r in ranks):
            assert got.shape == ref.shape, (name, rank, got.shape, ref.shape)
            rel = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
            worst = float(np.abs(got - ref).max())
            where = f"{name} on {world} ranks, rank {rank}"
            assert rel <= FLOAT_RTOL and worst <= FLOAT_ATOL, f"{where}: rel {rel:.1e}, max abs {worst:.1e}"
        print(f"{name} on {world} ranks: every rank's mean within rel {rel:.1e}, max abs {worst:.1e}")
