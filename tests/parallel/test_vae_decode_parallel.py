"""The height-split VAE decode (backends/torch/vae_decode.py) against the one-process decode:
tiny random Wan 2.1 (z 16) and Wan 2.2 (z 48, residual, DupUp3D, 2×2 unpatchify) VAEs on 2, 3
and 4 gloo ranks, with uneven bands (13 latent rows), two videos in one call, and a job with
more ranks than latent rows (the rank without rows sits out and returns []).

The whole-pipeline check (a cp2 / dp2 / ulysses4 generation gives the one-process frames, the
decode now split over the ranks) is tests/parallel/test_parallel_pipeline.py::test_mesh_matches_one_device.
"""

import numpy as np
import pytest
import torch
from harness.ranks import run_on_ranks
from harness.tiny_vae import TINY_VAE, random_state

TINY = TINY_VAE  # tests/tiny_vae.py
# (name, VAE, latent shape). 13 latent rows: bands 7/6 on 2 ranks, 5/4/4 on 3, 4/3/3/3 on 4 (a
# row is 8 or 16 pixels); 2 latent frames: the first chunk, then one with the time cache and the
# temporal upsampling. Two videos in one call for Wan 2.1. 3 rows: on 4 ranks one sits out.
CASES = [
    ("wan2.1", "wan2.1", (2, 16, 2, 13, 5)),
    ("wan2.2", "wan2.2", (1, 48, 2, 13, 3)),
    ("wan2.2, 3 rows", "wan2.2", (1, 48, 2, 3, 3)),
]

# fp32: every rank runs the one-device operations on its rows; only the shapes the kernels see
# differ, and at these tiny sizes that changes their rounding by about an ulp: ATen's CPU conv
# picks oneDNN or im2col + GEMM by N·C·T·H (20,480), and the CPU attention kernel blocks the
# queries by their count. ~30 layers of a random net amplify it to ≤ 1e-5 abs on videos in
# [-1, 1] (measured: see the report line). Checked op by op: a conv on a band with halo rows
# equals the whole-frame conv's rows to the bit when both take the same kernel path.
FLOAT_RTOL = 1e-5  # the project's fp32 budget, ‖split − one‖ / ‖one‖
FLOAT_ATOL = 5e-5
# A float difference ≤ 5e-5 moves (x + 1)·127.5 by ≤ 6.4e-3, so a uint8 value changes only if it
# sits that close to a .5 rounding boundary, and then by 1 level: a few values per video.
MAX_LEVELS = 1
MAX_MOVED = 1e-4  # fraction of values that may move that 1 level


def _one_process(variant, state, z):
    from parallel_wan.backends.torch import ops
    from parallel_wan.models import vae
    from parallel_wan.report.frames import to_uint8_frames
    from parallel_wan.weights import tree

    cfg, params = TINY[variant], tree.unflatten({k: torch.from_numpy(v) for k, v in state.items()})
    with torch.inference_mode():
        floats = [
            vae.decode(params, vae.denormalize_latents(torch.from_numpy(z[i : i + 1]), cfg, ops), ops, cfg)
            for i in range(z.shape[0])
        ]
        return [f.numpy() for f in floats], [to_uint8_frames(f, ops).numpy() for f in floats]


def decode_on_rank(rank, world, cases):
    """Per case: this rank's float band decoded with HeightBandOps (None when some rank has no
    rows) and the decoder's uint8 videos (whole on rank 0, [] elsewhere)."""
    from parallel_wan.backends.torch import ops
    from parallel_wan.backends.torch.backend import start_torch_backend
    from parallel_wan.backends.torch.vae_bands import HeightBandOps, height_bands
    from parallel_wan.config import MeshSpec
    from parallel_wan.launch import Launch
    from parallel_wan.models import vae
    from parallel_wan.weights import tree

    backend = start_torch_backend(
        "cpu", MeshSpec(name="test", cp=world, ulysses=world), Launch(rank, world, rank, "test")
    )
    out = []
    for variant, state, z in cases:
        cfg, params = TINY[variant], tree.unflatten({k: torch.from_numpy(v) for k, v in state.items()})
        latents = torch.from_numpy(z)
        bands, band = height_bands(z.shape[3], world), None
        with torch.inference_mode():
            videos = backend.video_decoder(params, cfg)(latents)
            if len(bands) == world:  # the whole job is the group
                a, b = bands[rank]
                band_ops = HeightBandOps([stop - start for start, stop in bands], rank, backend.mesh.comm)
                band = vae.decode(params, vae.denormalize_latents(latents[:1, :, :, a:b], cfg, ops), band_ops, cfg)
        out.append({"videos": videos, "band": None if band is None else band.numpy(), "bands": bands})
    return out


@pytest.fixture(scope="module")
def cases():
    rng = np.random.default_rng(0)
    built = {}
    for seed, (name, variant, shape) in enumerate(CASES):
        z = rng.standard_normal(shape).astype(np.float32)
        state = random_state(variant, seed)
        built[name] = (variant, state, z, *_one_process(variant, state, z))
    return built


def _check(name, world, ranks, reference):
    variant, _, z, ref_floats, ref_frames = reference
    bands = ranks[0]["bands"]
    report = f"{name} on {world} ranks, bands {[b - a for a, b in bands]}:"
    if len(bands) == world:
        video = np.concatenate([r["band"] for r in ranks], axis=3)
        rel = float(np.linalg.norm(video - ref_floats[0]) / np.linalg.norm(ref_floats[0]))
        worst = float(np.abs(video - ref_floats[0]).max())
        assert rel <= FLOAT_RTOL and worst <= FLOAT_ATOL, f"{report} float video rel err {rel:.1e}, max abs {worst:.1e}"
        report += f" float rel err {rel:.1e}, max abs diff {worst:.1e},"
    videos = ranks[0]["videos"]
    assert len(videos) == z.shape[0] and all(r["videos"] == [] for r in ranks[1:])
    levels, moved, total = 0, 0, 0
    for got, ref in zip(videos, ref_frames):
        assert got.shape == ref.shape and got.dtype == np.uint8
        diff = np.abs(got.astype(np.int16) - ref.astype(np.int16))
        levels, moved, total = max(levels, int(diff.max())), moved + int((diff > 0).sum()), total + diff.size
    assert levels <= MAX_LEVELS and moved <= MAX_MOVED * total
    print(f"{report} uint8 max diff {levels} on {moved} of {total} values")


@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_height_split_decode_matches_one_process(cases, world):
    ranks = run_on_ranks(decode_on_rank, world, [c[:3] for c in cases.values()], timeout_s=180)
    for i, name in enumerate(cases):
        _check(name, world, [r[i] for r in ranks], cases[name])


def test_bands():
    from parallel_wan.backends.torch.vae_bands import height_bands

    assert [b - a for a, b in height_bands(90, 8)] == [12, 12, 11, 11, 11, 11, 11, 11]
    assert height_bands(13, 3) == [(0, 5), (5, 9), (9, 13)]
    assert height_bands(3, 4) == [(0, 1), (1, 2), (2, 3)]
    assert height_bands(7, 1) == [(0, 7)]
