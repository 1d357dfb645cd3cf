"""sparse=radial: the block-sparse kernel (backends/torch/sparse_kernel.py) in Triton's
interpreter and the torch path (sparse_attention.py) against dense attention with the same
mask expanded to tokens, and whole tiny videos on gloo meshes against the one-device sparse
video.

The kernel runs in a spawned rank process that sets TRITON_INTERPRET=1 before importing it
(as tests/parallel/test_sage_attention.py: this worker never imports a kernel interpreted);
the videos run the torch path (CPU without the interpreter), which the kernel test holds to
the same numbers."""

import numpy as np
import pytest
from harness.ranks import run_on_ranks
from harness.sparse_videos import sparse_video

# float32 against float64: sums of ≤ 112 products and exponentials, each rounded at 6e-8
# relative; measured ≤ 4e-7 on the output, 1e-6 on the lse. The bounds leave 10×.
OUT_REL, LSE_ABS = 5e-6, 1e-5
# 16-bit inputs: fp16's 11-bit mantissas, ~5e-4 relative each, P rounded to fp16 for PV;
# measured 4e-4. (fp16, not bf16: Triton 3.9's interpreter multiplies bf16 tiles wrongly — its
# tl.dot of two bf16 16×16 tiles is off by 1e10 — so bf16 is checked compiled, by the AOT test.)
HALF_REL = 2e-3


def _reference(q, k, v, token_mask, scale):
    """float64 softmax attention with a (S, L) token mask; rows with no key: out 0, lse −inf."""
    import torch

    scores = torch.einsum("bshd,blhd->bhsl", q.double(), k.double()) * scale
    scores = scores.masked_fill(~token_mask, float("-inf"))
    lse = torch.logsumexp(scores, -1)
    probs = torch.exp(scores - torch.where(torch.isneginf(lse), 0.0, lse)[..., None])
    return torch.einsum("bhsl,blhd->bshd", probs, v.double()), lse.transpose(1, 2)


def _kernel_errors(rank, world):
    """Errors of the interpreted kernel and of the torch path against the float64 reference,
    per call: the whole sequence with garbage padding keys, a ring-like slice not on block
    boundaries, a slice where some query blocks see no key, and fp16."""
    import os

    os.environ["TRITON_INTERPRET"] = "1"  # before sparse_kernel is imported here
    import torch

    from parallel_wan.backends.torch.sparse_attention import SparseAttention, sparse_attention_torch
    from parallel_wan.parallel.block_visits import BlockMask

    block, tokens = 16, 100  # 7 blocks, the last one 4 tokens
    rng = np.random.default_rng(0)
    mask = rng.random((7, 7)) < 0.4
    np.fill_diagonal(mask, True)
    mask[3, :] = False  # a query block that sees only its own block …
    mask[3, 3] = True  # … so a key slice without block 3 leaves it no key at all
    bm = BlockMask(mask, block, tokens)
    attention = SparseAttention(bm)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 112, 2, 24, generator=gen) for _ in range(3))  # head_dim 24: padded to 32
    k[:, tokens:], v[:, tokens:] = 1e4, -1e4  # padding keys: must change nothing
    scale = 24**-0.5
    token_mask = torch.from_numpy(np.repeat(np.repeat(mask, block, 0), block, 1))
    errors = {}
    # (q0, queries, k0, keys): global positions; the call gets q[q0:…], k[k0:…] with `keys` valid
    calls = {"whole": (0, 100, 0, 100), "slice": (37, 40, 50, 45), "unseen": (40, 20, 64, 36)}
    for name, (q0, nq, k0, nk) in calls.items():
        ql, kl, vl = q[:, q0 : q0 + nq], k[:, k0 : k0 + nk + 11], v[:, k0 : k0 + nk + 11]
        ref_out, ref_lse = _reference(ql, kl[:, :nk], vl[:, :nk], token_mask[q0 : q0 + nq, k0 : k0 + nk], scale)
        visits = bm.visits(q0, nq, k0, nk)
        for path, (out, lse) in {
            "triton": attention(ql, kl, vl, q0, k0, nk, scale),
            "torch": sparse_attention_torch(ql, kl, vl, visits, block, q0, k0, nk, scale),
        }.items():
            seen = torch.isfinite(ref_lse)
            errors[name, path] = (
                float((out.double() - ref_out).norm() / ref_out.norm()),
                float((lse.double() - ref_lse)[seen].abs().max()),
                bool(torch.equal(torch.isfinite(lse), seen)),  # −inf exactly where no key is seen
                float(out[~seen].abs().max()) if (~seen).any() else 0.0,
                int((~seen).sum()),
            )
    half = [t.half() for t in (q, k.clamp(max=1e3), v.clamp(min=-1e3))]  # 1e4 is past fp16's range
    out, _ = attention(*half, 0, 0, tokens, scale)
    ref_out, _ = _reference(*(t[:, :tokens] for t in half), token_mask[:tokens, :tokens], scale)
    errors["fp16"] = (float((out[:, :tokens].double() - ref_out).norm() / ref_out.norm()), str(out.dtype))
    return errors


def test_the_kernel_in_the_interpreter_and_the_torch_path_equal_masked_attention():
    errors = run_on_ranks(_kernel_errors, 1, timeout_s=300, preloaded=False)[0]
    print(errors)
    for name in ("whole", "slice", "unseen"):
        for path in ("triton", "torch"):
            rel, lse_abs, neg_inf_where_unseen, unseen_out, unseen = errors[name, path]
            assert rel <= OUT_REL and lse_abs <= LSE_ABS, (name, path, rel, lse_abs)
            assert neg_inf_where_unseen and unseen_out == 0.0, (name, path)
    assert errors["unseen", "triton"][4] > 0  # the case does leave queries without a key
    assert errors["fp16"][0] <= HALF_REL and errors["fp16"][1] == "torch.float16"


# 5 latent frames of 8 × 17 tokens = 680 (tpf 136 ≥ 128: neighbours whole, a band 2 frames
# apart), block 16 → 43 blocks, 0.7 of them visited; on 2 ranks 340 tokens each: not a
# multiple of 16, so the ranks' slices cut blocks. 2 steps, the first dense.
BASE = ["dtype=float32", "steps=2", "num_frames=17", "height=128", "width=272", "seed=3", "prompt='a dog jumps'"]
SPARSE = [
    "sparse=radial",
    "sparse_dense_steps=1",
    "sparse_dense_layers=0",
    "sparse_block=16",
    "sparse_decay_factor=0.5",
]
# every mesh against one device, fp32 (architecture.md's invariant 1)
REL_BOUND = 1e-5


@pytest.fixture(scope="module")
def one_device():
    """The sparse video and the dense one on one device, in this process."""
    return sparse_video(0, 1, BASE + SPARSE), sparse_video(0, 1, BASE)


@pytest.mark.slow  # two tiny videos of 680 tokens in this process (5 s)
def test_one_device_sparse_video_is_not_the_dense_one(one_device):
    (sparse, record), (dense, none) = one_device
    print(record)
    assert none is None
    assert record["sparse"] == "radial" and record["sparse_block"] == 16
    assert 0.6 < record["block_density"] < 0.8  # the mask is sparse at this shape …
    assert record["sparse_attention_calls"] == 2  # 1 sparse step × the tiny model's 2 blocks
    assert record["flops_skipped"] > 0
    err = np.linalg.norm(sparse - dense) / np.linalg.norm(dense)
    print(f"sparse vs dense latents: {err:.3e}")
    assert err > 100 * REL_BOUND  # (9e-3) … so a mesh that ignored the mask would fail the mesh tests


MESHES = {
    "ulysses2": ["mesh=cp2"],
    "dp2_cfg": ["mesh=dp2"],  # CFG halves on two groups: the sidecar's counts meet over dp
}
# Ulysses inside a ring (usp2x2) adds nothing the two meshes' own tests do not hold: a ring
# member's queries and key blocks are sliced by global positions either way (checked by hand:
# usp2x2 6.4e-7 at 3 steps, ring2 with memory=sharded / swap 6.4e-7, compile=true equal to eager).


@pytest.mark.slow  # gloo ranks, each a tiny video of 680 tokens
@pytest.mark.parametrize("name", list(MESHES))
def test_sparse_video_on_a_mesh_is_the_one_device_sparse_video(one_device, name):
    latents, record = run_on_ranks(sparse_video, 2, BASE + SPARSE + MESHES[name], timeout_s=300)[0]
    (ref, ref_record), _ = one_device
    err = np.linalg.norm(latents - ref) / np.linalg.norm(ref)
    print(f"{name}: latents rel err {err:.2e}")
    assert err <= REL_BOUND
    assert record["flops_skipped"] == ref_record["flops_skipped"]  # the dp groups' rows add up


@pytest.mark.slow
def test_a_ring_with_a_step_cache_is_the_one_device_run():
    """The ring (each key block by its global positions; 340 tokens a rank, blocks cut) with
    First-Block Cache: a cached step calls no attention, so sparse and a step cache compose."""
    cache = ["cache=fbcache", "cache.threshold=0.95", "steps=4"]
    ref, record = sparse_video(0, 1, BASE + SPARSE + cache)
    # 3 sparse steps × 2 blocks would be 6 calls: the steps the cache reused ran fewer
    assert record["sparse_attention_calls"] < 6, record
    ring = ["mesh=cp2", "mesh.ulysses=1", "mesh.ring=2"]
    latents, _ = run_on_ranks(sparse_video, 2, BASE + SPARSE + cache + ring, timeout_s=300)[0]
    err = np.linalg.norm(latents - ref) / np.linalg.norm(ref)
    print(f"ring2 + fbcache: latents rel err {err:.2e}")
    assert err <= REL_BOUND
