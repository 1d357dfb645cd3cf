"""sparse=svg (backends/torch/svg_attention.py): each head's choice of order, the attention in
that order against float64 attention with the same mask expanded to tokens, and whole tiny
videos on gloo meshes against the one-device svg video.

The kernel under the placement is sparse=radial's, held to masked float64 attention in Triton's
interpreter by tests/parallel/test_sparse_attention.py; here the CPU runs its torch path, which
that test holds to the same numbers, and tests/gpu/test_fake_gpu_attention_impl.py launches the
kernel on the placed tensors of a fake H100."""

import numpy as np
import pytest
from harness.ranks import run_on_ranks
from harness.sparse_videos import sparse_video

# float32 against float64 (as test_sparse_attention.py): sums of ≤ 384 products and
# exponentials, each rounded at 6e-8 relative, of scores up to ~100 here (the structured heads);
# measured 1.4e-6 on the output, 4.9e-6 on the lse. The bounds leave 3–4×.
OUT_REL, LSE_ABS = 5e-6, 2e-5
FRAMES, PLACES, BLOCK, DENSITY = 8, 48, 16, 0.1  # 384 tokens: a 128-token band, 8 blocks each side


def _structured_heads(length, generator):
    """(B=2, L, H=4, D=16) q = k = v-ish heads with a known best order: a "temporal" head's
    tokens match the same place in every frame (an embedding of the place), a "spatial" head's
    the tokens of their own frame (an embedding of the frame). Row 0: heads T, T, S, S;
    row 1 the other way round — the choice is per (sequence, head)."""
    import torch

    n = FRAMES * PLACES
    place = torch.arange(n) % PLACES
    frame = torch.arange(n) // PLACES
    places = torch.randn(PLACES, 16, generator=generator) * 2
    frames = torch.randn(FRAMES, 16, generator=generator) * 2
    temporal, spatial = places[place], frames[frame]
    rows = []
    for pattern in ([temporal, temporal, spatial, spatial], [spatial, spatial, temporal, temporal]):
        rows.append(torch.stack(pattern, 1))  # (N, H, D)
    x = torch.stack(rows)  # (2, N, 4, 16)
    noise = lambda: torch.randn(2, length, 4, 16, generator=generator) * 0.3  # noqa: E731
    pad = torch.zeros(2, length - n, 4, 16)
    base = torch.cat([x, pad], 1)
    q, k, v = base + noise(), base + noise(), noise() * 3
    k[:, n:], v[:, n:] = 1e4, -1e4  # padding keys: must change nothing
    return q, k, v


def test_each_head_takes_its_order_and_attends_the_band_in_it():
    import torch

    from parallel_wan.backends.torch.svg_attention import SpatioTemporalAttention
    from parallel_wan.parallel.block_visits import BlockMask
    from parallel_wan.parallel.svg_mask import svg_mask, token_major_order

    n, length = FRAMES * PLACES, FRAMES * PLACES + 16  # padded as a Ulysses rank holds it
    mask = svg_mask(n, PLACES, BLOCK, DENSITY)
    assert 0.3 < mask.mean() < 0.8  # sparse in both orders at this shape
    attention = SpatioTemporalAttention(BlockMask(mask, BLOCK, n), (FRAMES, 6, 8))
    q, k, v = _structured_heads(length, torch.Generator().manual_seed(0))
    scale = 16**-0.5
    chosen = attention.choose(q, k, v, attention._tables_for(length, q.device), scale)
    assert chosen.tolist() == [[True, True, False, False], [False, False, True, True]]

    out, lse = attention(q, k, v, 0, 0, n, scale)
    assert out.shape == q.shape and lse.shape == q.shape[:3]
    position = {False: np.arange(n), True: np.argsort(token_major_order(FRAMES, PLACES, n))}
    worst_out = worst_lse = 0.0
    for b in range(2):
        for h in range(4):
            pos = position[bool(chosen[b, h])]
            allowed = torch.from_numpy(mask[pos[:, None] // BLOCK, pos[None, :] // BLOCK])
            scores = (q[b, :n, h].double() @ k[b, :n, h].double().T) * scale
            scores = scores.masked_fill(~allowed, float("-inf"))
            ref_lse = torch.logsumexp(scores, -1)
            ref = torch.softmax(scores, -1) @ v[b, :n, h].double()
            worst_out = max(worst_out, float((out[b, :n, h] - ref).norm() / ref.norm()))
            worst_lse = max(worst_lse, float((lse[b, :n, h] - ref_lse).abs().max()))
    print(f"svg attention vs float64 in each head's order: out {worst_out:.1e}, lse {worst_lse:.1e}")
    assert worst_out <= OUT_REL and worst_lse <= LSE_ABS
    assert attention.layout_counts().tolist() == [4, 8]  # the sidecar's tally: 4 of 8 heads temporal


def test_a_ring_slice_is_refused():
    import torch

    from parallel_wan.backends.torch.svg_attention import SpatioTemporalAttention
    from parallel_wan.parallel.block_visits import BlockMask
    from parallel_wan.parallel.svg_mask import svg_mask

    attention = SpatioTemporalAttention(BlockMask(svg_mask(64, 16, 16, 0.3), 16, 64), (4, 4, 4))
    q = torch.zeros(1, 32, 1, 16)
    with pytest.raises(ValueError, match="whole sequences"):
        attention(q, q, q, 32, 0, 32)


# the tiny model (2 blocks, 8 heads), 680 tokens (5 frames × 136), block 16; 2 steps, the first dense
BASE = ["dtype=float32", "steps=2", "num_frames=17", "height=128", "width=272", "seed=3", "prompt='a dog jumps'"]
SVG = ["sparse=svg", "sparse_dense_steps=1", "sparse_dense_layers=0", "sparse_block=16", "sparse_density=0.2"]
REL_BOUND = 1e-5  # every mesh against one device, fp32 (architecture.md's invariant 1)


@pytest.fixture(scope="module")
def one_device():
    return sparse_video(0, 1, BASE + SVG), sparse_video(0, 1, BASE)


@pytest.mark.slow  # two tiny videos in this process
def test_one_device_svg_video_is_not_the_dense_one(one_device):
    (svg, record), (dense, _) = one_device
    print(record)
    assert record["sparse"] == "svg" and record["sparse_density"] == 0.2 and "sparse_decay_factor" not in record
    assert record["sparse_attention_calls"] == 2  # 1 sparse step × 2 blocks
    assert 0 < record["temporal_head_fraction"] < 1  # both orders chosen: 2 calls × 2 rows × 8 heads
    assert record["block_density"] < 0.8 and record["flops_skipped"] > 0
    err = np.linalg.norm(svg - dense) / np.linalg.norm(dense)
    print(f"svg vs dense latents: {err:.3e}")
    assert err > 100 * REL_BOUND  # so a mesh that ignored the mask or the orders would fail below


@pytest.mark.slow  # gloo ranks, each a tiny video
@pytest.mark.parametrize("mesh", [["mesh=cp2"], ["mesh=dp2"]], ids=["ulysses2", "dp2_cfg"])
def test_svg_video_on_a_mesh_is_the_one_device_svg_video(one_device, mesh):
    """Ulysses: each rank chooses for its own heads over the whole sequence; CFG parallel: for
    its own rows. The same choices, the same video, and the sidecar's tally over the world."""
    latents, record = run_on_ranks(sparse_video, 2, BASE + SVG + mesh, timeout_s=300)[0]
    (ref, ref_record), _ = one_device
    err = np.linalg.norm(latents - ref) / np.linalg.norm(ref)
    print(f"{mesh}: latents rel err {err:.2e}")
    assert err <= REL_BOUND
    assert record["temporal_head_fraction"] == ref_record["temporal_head_fraction"]
    assert record["flops_skipped"] == ref_record["flops_skipped"]
