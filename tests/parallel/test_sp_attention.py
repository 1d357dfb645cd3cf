"""Sequence-parallel self-attention (Ulysses, ring, their hybrid) equals one-device attention.

Multi-process cases run on CPU with gloo (tests/distributed.py); one spawn per world size runs
all of its cases, since starting the processes costs more than the cases do.
"""

import math

import pytest
import torch
from harness.ranks import run_on_ranks

from parallel_wan.backends.torch import ops
from parallel_wan.backends.torch.attention import attention_with_lse
from parallel_wan.backends.torch.collectives import NullCollectives
from parallel_wan.backends.torch.ring import RingPeers, merge_partials, ring_attention
from parallel_wan.backends.torch.sequence_parallel import make_self_attention
from parallel_wan.backends.torch.ulysses import check_heads, sequence_to_heads
from parallel_wan.config import MeshSpec

# fp32 on CPU. Sharded and one-device attention differ only in summation order: the merge
# reweights each block's partial softmax by exp(lse_block − lse) instead of one normalisation,
# so each output picks up a few ulps (measured ≤ ~3e-7 relative). A leaked padded key (the
# padding here is 50× larger than real values), a missing or doubled block, or a head/token
# permutation gives errors ≥ 1e-2, so 1e-5 separates right from wrong by three decades.
RTOL = 1e-5
B, H, D = 2, 8, 16


def rel_err(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


def inputs(seed, valid, total, b=B, h=H, d=D):
    """q, k, v (b, total, h, d); positions ≥ valid hold large garbage, as padding may."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, total, h, d, generator=g) for _ in range(3))
    for x in (q, k, v):
        x[:, valid:] = 50 * torch.randn(b, total - valid, h, d, generator=g)
    return q, k, v


def reference(q, k, v, valid):
    """One device: plain attention over the valid tokens only."""
    return ops.attention(q[:, :valid], k[:, :valid], v[:, :valid])


def reference_lse(q, k):
    return torch.logsumexp(
        torch.einsum("bshd,blhd->bhsl", q.double(), k.double()) / math.sqrt(q.shape[-1]), -1
    ).transpose(1, 2)


# ---------------------------------------------------------------- the local kernel
@pytest.mark.parametrize("kernel", ["cpu_flash", "math"])
def test_local_kernel_returns_attention_and_lse(kernel):
    q, k, v = inputs(0, 11, 11)
    out, lse = attention_with_lse(q, k, v, kernel=kernel)
    assert out.dtype == q.dtype and out.shape == q.shape and lse.shape == (B, 11, H) and lse.dtype == torch.float32
    assert rel_err(out, reference(q, k, v, 11)) <= RTOL
    assert rel_err(lse, reference_lse(q, k)) <= RTOL


def test_local_kernel_drops_padded_keys_exactly():
    q, k, v = inputs(1, 7, 11)
    out, lse = attention_with_lse(q, k, v, valid_keys=7)
    assert rel_err(out, ops.attention(q, k[:, :7], v[:, :7])) <= RTOL
    assert rel_err(lse, reference_lse(q, k[:, :7])) <= RTOL


def test_block_without_keys_contributes_nothing():
    q, k, v = inputs(2, 5, 5)
    out, lse = attention_with_lse(q, k, v, valid_keys=0)
    assert torch.equal(out, torch.zeros_like(q)) and bool(torch.isneginf(lse).all())


# ---------------------------------------------------------------- merging partials
def test_merge_partials_equals_full_attention_with_an_empty_block():
    q, k, v = inputs(3, 13, 13)
    q = q * 4  # peaked softmaxes: block lses differ by tens, stressing the reweighting
    outs, lses = [], []
    for lo, hi in ((0, 4), (4, 4), (4, 9), (9, 13)):  # (4, 4): a rank whose shard is all padding
        o, l = attention_with_lse(q, k[:, lo:hi], v[:, lo:hi])
        outs.append(o)
        lses.append(l)
    out, lse = merge_partials(outs, lses)
    assert out.dtype == torch.float32 and not out.isnan().any()
    assert rel_err(out, reference(q, k, v, 13)) <= RTOL
    assert rel_err(lse, reference_lse(q, k)) <= RTOL
    # The merge is a softmax over a union of key sets: block order must not matter.
    out_rev, _ = merge_partials(outs[::-1], lses[::-1])
    assert rel_err(out_rev, out) <= RTOL


def test_merge_of_empty_blocks_only_stays_empty_without_nan():
    q, k, v = inputs(4, 3, 3)
    o, l = attention_with_lse(q, k, v, valid_keys=0)
    out, lse = merge_partials([o, o], [l, l])
    assert torch.equal(out, torch.zeros_like(out)) and bool(torch.isneginf(lse).all())


# ---------------------------------------------------------------- the ring loop, in one process
class _FakeWork:
    def __init__(self, events):
        self.events = events

    def wait(self):
        self.events.append("wait")


class _RingOf4(NullCollectives):
    """Collectives of member `index` of a ring of 4 simulated in one process: each hop delivers
    the block the real previous neighbour would send."""

    def __init__(self, blocks, index, events):
        super().__init__(index, 4)
        self.blocks, self.events, self.hops = blocks, events, 0

    def exchange(self, sends, recvs, group=None):
        self.hops += 1
        ((recv, source),) = recvs
        assert source == (self.rank - 1) % 4 and sends[0][1] == (self.rank + 1) % 4
        recv.copy_(self.blocks[(self.rank - self.hops) % 4])
        self.events.append("post")
        return [_FakeWork(self.events)]


def test_ring_posts_the_next_transfer_before_computing_and_masks_padding():
    """A ring of 4 simulated in one process (`_RingOf4`); the kernel is wrapped to record when
    it runs."""
    size, index, length, valid = 4, 1, 3, 7  # blocks [0,3) [3,6) [6,9) [9,12): 3, 3, 1, 0 real keys
    q, k, v = inputs(5, valid, size * length)
    blocks = [
        torch.stack((k[:, i * length : (i + 1) * length], v[:, i * length : (i + 1) * length])) for i in range(size)
    ]
    events = []

    def recording_kernel(q_, k_, v_, valid_keys=None, scale=None):
        events.append(f"compute{valid_keys}")
        return attention_with_lse(q_, k_, v_, valid_keys=valid_keys, scale=scale)

    mine = slice(index * length, (index + 1) * length)
    peers = RingPeers.from_ranks([0, 1, 2, 3], index, _RingOf4(blocks, index, events))
    out = ring_attention(q[:, mine], k[:, mine], v[:, mine], peers, valid, kernel=recording_kernel)

    # Own block (3 keys), then blocks 0 (3), 3 (padding only: no kernel), 2 (1 key). Each hop
    # is posted before the compute of the block in hand and waited on after it.
    assert events == ["post", "compute3", "wait", "post", "compute3", "wait", "post", "wait", "compute1"]
    assert rel_err(out, reference(q, k, v, valid)[:, mine]) <= RTOL


@pytest.mark.parametrize("scale", [1, 2, 4])  # 4: peaked softmaxes, block lses tens apart
def test_a_bf16_ring_is_within_a_rounding_of_one_device(scale):
    """bfloat16: the kernel returns each key block's output rounded to bf16 and the ring merges
    them in float32 — one rounding more than one device's kernel over all keys, never bf16 lses.
    Measured against exact (float64) attention, over seeds 0–3 and these scales: ring of 4
    1.13–1.34× one device's error, ring of 2 1.19–1.36×; merged with lses in bf16 the ring is
    5–29× (a weight exp(lse_block − lse) off by bf16's 2^-9 × |lse|). The one-device bf16
    video's own distance to fp32 and every mesh's: tests/parallel/test_bf16_meshes.py."""
    size, length = 4, 24
    g = torch.Generator().manual_seed(0)
    q, k, v = ((torch.randn(B, size * length, H, D, generator=g) * s).bfloat16() for s in (scale, scale, 1))
    exact = reference(q.double(), k.double(), v.double(), size * length)
    blocks = [
        torch.stack((k[:, i * length : (i + 1) * length], v[:, i * length : (i + 1) * length])) for i in range(size)
    ]
    rows = []
    for index in range(size):
        mine = slice(index * length, (index + 1) * length)
        peers = RingPeers.from_ranks([0, 1, 2, 3], index, _RingOf4(blocks, index, []))
        rows.append(ring_attention(q[:, mine], k[:, mine], v[:, mine], peers, size * length))
    ring, one = torch.cat(rows, dim=1), ops.attention(q, k, v)
    assert ring.dtype == torch.bfloat16
    assert rel_err(ring, exact) <= 1.5 * rel_err(one, exact)


# ---------------------------------------------------------------- the factory, one process
def _one_process_mesh():
    from parallel_wan.backends.torch.mesh import TorchMesh

    return TorchMesh.build(MeshSpec())


def test_single_rank_uses_plain_attention_and_masks_padding():
    mesh = _one_process_mesh()
    # unpadded, attention_impl=auto, on CPU: torch's SDPA exactly (on CUDA: attention.py's table)
    q, k, v = inputs(6, 9, 9)
    assert torch.equal(make_self_attention(mesh, valid_tokens=9, local_tokens=9)(q, k, v), ops.attention(q, k, v))
    q, k, v = inputs(6, 9, 12)
    out = make_self_attention(mesh, valid_tokens=9, local_tokens=12)(q, k, v)
    assert rel_err(out[:, :9], reference(q, k, v, 9)) <= RTOL and bool(out.isfinite().all())


def test_bad_layouts_are_refused_with_the_fix():
    mesh = _one_process_mesh()
    with pytest.raises(ValueError, match=r"valid_tokens=13 does not fit cp×local_tokens=1×12"):
        make_self_attention(mesh, valid_tokens=13, local_tokens=12)
    attention = make_self_attention(mesh, valid_tokens=9, local_tokens=12)
    q, k, v = inputs(7, 9, 10)
    with pytest.raises(ValueError, match="got 10 tokens on this rank but was made for local_tokens=12"):
        attention(q, k, v)
    with pytest.raises(ValueError, match=r"ulysses=4 does not divide the 6 attention heads.*e\.g\. 3"):
        check_heads(6, 4)
    with pytest.raises(ValueError, match="ulysses=4 does not divide"):  # before any collective
        sequence_to_heads(inputs(8, 4, 4, h=6), group=None, size=4, comm=NullCollectives())


# ---------------------------------------------------------------- many processes
def _sharded_cases(rank, world_size, cases):
    """Runs on every rank: for each mesh and token count, this rank's output rows against
    one-device attention. Returns one report per case."""
    from parallel_wan.backends.torch.mesh import TorchMesh

    reports = []
    for dp, ulysses, ring_size, valid in cases:
        cp = ulysses * ring_size
        spec = MeshSpec(name=f"dp{dp}_u{ulysses}_r{ring_size}", dp=dp, cp=cp, ulysses=ulysses, ring=ring_size)
        mesh = TorchMesh.build(spec)
        local = -(-valid // cp)
        c = mesh.index("cp")
        # Each dp replica gets its own inputs, so a group that crossed replicas would show.
        q, k, v = inputs(1000 * mesh.index("dp") + valid, valid, cp * local)
        mine = slice(c * local, (c + 1) * local)
        out = make_self_attention(mesh, valid, local)(q[:, mine], k[:, mine], v[:, mine])
        lo, hi = c * local, min(valid, (c + 1) * local)
        err = rel_err(out[:, : hi - lo], reference(q, k, v, valid)[:, lo:hi]) if hi > lo else 0.0
        reports.append(
            dict(
                case=f"{spec.name} N={valid} Lc={local}",
                rank=rank,
                rows=max(0, hi - lo),
                err=err,
                finite=bool(out.isfinite().all()),
                shape_ok=out.shape == (B, local, H, D),
            )
        )
    return reports


def _check(world_size, cases):
    reports = [r for rank_reports in run_on_ranks(_sharded_cases, world_size, cases) for r in rank_reports]
    for r in reports:
        assert r["shape_ok"] and r["finite"], r
        assert r["err"] <= RTOL, r
    return max(r["err"] for r in reports)


# (dp, ulysses, ring, valid tokens). Valid counts: divisible by cp; needing padding; and so
# small that the last rank's whole shard is padding (N=5, cp=4 → Lc=2, rank 3 holds 6..7).
WORLD2 = [(1, 2, 1, 8), (1, 2, 1, 7), (1, 1, 2, 8), (1, 1, 2, 7), (1, 1, 2, 1), (1, 2, 1, 1)]
WORLD4 = [
    (1, 4, 1, 16),
    (1, 4, 1, 13),
    (1, 4, 1, 5),
    (1, 1, 4, 16),
    (1, 1, 4, 13),
    (1, 1, 4, 5),
    (1, 2, 2, 16),
    (1, 2, 2, 13),
    (1, 2, 2, 5),
    (2, 2, 1, 6),
    (2, 1, 2, 6),
    (2, 1, 2, 3),
]
WORLD8 = [(1, 8, 1, 13), (1, 1, 8, 13), (1, 2, 4, 13), (1, 4, 2, 9), (2, 2, 2, 5)]


@pytest.mark.parametrize(
    "world_size,cases", [(2, WORLD2), (4, WORLD4), (8, WORLD8)], ids=["world2", "world4", "world8"]
)
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_sequence_parallel_attention_equals_one_device(world_size, cases):
    _check(world_size, cases)
