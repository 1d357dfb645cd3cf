"""sparse=radial's local attention: a block mask over the global sequence (parallel/
radial_mask.py, parallel/block_visits.py) run by our block-sparse Triton kernel on CUDA
(sparse_kernel.py), and on CPU by a plain torch path that expands the same visits to tokens —
the same (out, lse), for the tiny model and the tests (the CPU under TRITON_INTERPRET=1 runs the
Triton kernel itself, interpreted: the tests' way to check it without a GPU).

`SparseAttention` is one run's: the mask, whether this step is sparse (`start_step`, per step by
the predictor: the first sparse_dense_steps run dense) and which of its blocks (`takes_layer`:
the first sparse_dense_layers run dense), the visits of each (query slice, key
slice) a call has asked for, uploaded once, and what the sidecar records.
"""

from __future__ import annotations

import os

import torch

from ...parallel.block_visits import BlockMask, Visits

QUERY_CHUNK = 1024  # the torch path's queries per score matrix: 1024 × L float32 at a time


class SparseAttention:
    def __init__(self, mask: BlockMask, dense_layers: int = 0):
        self.mask = mask
        self.dense_layers = dense_layers  # every step's first blocks stay dense (Radial's dense_layers)
        self.active = False  # dense until the predictor says the step is sparse
        self._layer = 0  # the self-attention calls of this step so far: the block each one is
        self.calls = 0  # sparse self-attention calls, and the sequences (rows) they ran for
        self.rows = 0
        self._host: dict[tuple, Visits] = {}
        self._device: dict[tuple, tuple] = {}
        self._stand_in = None  # the planner's kernel: makes the outputs only (`counted_by`)

    def counted_by(self, kernel) -> SparseAttention:
        """The planner's: `kernel` (attention_with_lse's signature, making only its outputs on
        the meta device) in place of the block-sparse kernel, so what is counted is what the
        GPU kernel leaves — and svg's profile and gathers around it run as they would."""
        self._stand_in = kernel
        return self

    def start_step(self, sparse: bool) -> None:
        """The predictor, before each step: whether the step is one of the sparse ones."""
        self.active, self._layer = sparse, 0

    def takes_layer(self) -> bool:
        """Whether this self-attention call runs sparse: a sparse step's blocks from
        dense_layers on. A forward calls self-attention once per block in order (both CFG halves
        in its rows; a step cache stops early or skips the forward, never reorders), so the
        calls of a step count its blocks."""
        layer, self._layer = self._layer, self._layer + 1
        return self.active and layer >= self.dense_layers

    def count(self, rows: int) -> None:
        """One sparse self-attention layer ran for `rows` sequences (the sidecar's FLOPs)."""
        self.calls += 1
        self.rows += rows

    def __call__(self, q, k, v, q_start: int, k_start: int, valid_keys: int, scale: float | None = None):
        """Attention of q (the queries at global positions q_start …) over the first
        `valid_keys` keys of k/v (global positions k_start …) that the mask lets them see.
        Returns (out (B, S, H, D) in q's dtype, lse (B, S, H) in at least float32)."""
        scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
        if self._stand_in is not None:
            return self._stand_in(q, k, v, valid_keys=valid_keys, scale=scale)
        visits, on_device = self._visits_for(q, q_start, k_start, valid_keys)
        if visits.empty or valid_keys == 0:
            b, s, h, _ = q.shape
            lse = torch.full(
                (b, s, h), float("-inf"), dtype=torch.promote_types(q.dtype, torch.float32), device=q.device
            )
            return q.new_zeros((b, s, h, v.shape[-1])), lse
        if on_device is not None:
            from .sparse_kernel import launch

            table, counts = on_device
            q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
            return launch(
                q, k, v, table, counts, visits.first_q_block, q_start, k_start, valid_keys, self.mask.block, scale
            )
        return sparse_attention_torch(q, k, v, visits, self.mask.block, q_start, k_start, valid_keys, scale)

    def skips(self, q_start: int, q_len: int, k_start: int, valid_keys: int) -> bool:
        """No query of this slice sees any of those keys (a ring step to pass over)."""
        return valid_keys == 0 or self._host_visits(q_start, q_len, k_start, valid_keys).empty

    def _host_visits(self, q_start: int, q_len: int, k_start: int, valid_keys: int) -> Visits:
        # the same few slices every layer and step: cut once (a host loop over query blocks)
        key = (q_start, q_len, k_start, valid_keys)
        if key not in self._host:
            self._host[key] = self.mask.visits(q_start, q_len, k_start, valid_keys)
        return self._host[key]

    def _visits_for(self, q, q_start, k_start, valid_keys):
        """The visits and, for the Triton kernel, their table and counts on q's device (uploaded once)."""
        visits = self._host_visits(q_start, q.shape[1], k_start, valid_keys)
        if not uses_triton(q):
            return visits, None
        key = (q_start, q.shape[1], k_start, valid_keys, q.device)
        if key not in self._device:
            self._device[key] = tuple(_upload(a, q.device) for a in (visits.table, visits.counts))
        return visits, self._device[key]


def _upload(array, device: torch.device) -> torch.Tensor:
    """A visit table onto the device. Its first use is mid-loop (the first sparse step), so on a
    GPU it goes from pinned memory without blocking: the step's kernels queue behind it, the host
    does not wait (a pageable copy would stall the loop once per slice)."""
    host = torch.from_numpy(array)
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def uses_triton(q: torch.Tensor) -> bool:
    """The Triton kernel on CUDA, and on CPU in Triton's interpreter (tests); torch otherwise."""
    return q.is_cuda or os.environ.get("TRITON_INTERPRET") == "1"


def sparse_attention_torch(q, k, v, visits: Visits, block: int, q_start: int, k_start: int, valid_keys: int, scale):
    """The kernel's result in plain torch: the visits expanded to a token mask, scores in at
    least float32, chunks of QUERY_CHUNK queries. Rows that see no key: out 0, lse −inf."""
    dt = torch.promote_types(q.dtype, torch.float32)
    k, v = k[:, :valid_keys].to(dt), v[:, :valid_keys].to(dt)
    n_q = visits.table.shape[0]
    key_blocks = (k_start + torch.arange(valid_keys, device=q.device)) // block
    # (query block, key) → visited: each query block's key-block list against each key's block
    table = torch.from_numpy(visits.table).to(q.device)
    listed = torch.arange(table.shape[1], device=q.device) < torch.from_numpy(visits.counts).to(q.device)[:, None]
    seen = ((table[:, :, None] == key_blocks[None, None, :]) & listed[:, :, None]).any(1)  # (n_q, L)
    query_blocks = (q_start + torch.arange(q.shape[1], device=q.device)) // block - visits.first_q_block
    outs, lses = [], []
    for first in range(0, q.shape[1], QUERY_CHUNK):
        chunk = q[:, first : first + QUERY_CHUNK].to(dt)
        allowed = seen[query_blocks[first : first + QUERY_CHUNK].clamp(max=n_q - 1)]  # (S, L)
        scores = torch.einsum("bshd,blhd->bhsl", chunk, k) * scale
        scores = scores.masked_fill(~allowed, float("-inf"))
        lse = torch.logsumexp(scores, dim=-1)  # −inf where a row sees nothing
        probs = torch.exp(scores - torch.where(torch.isneginf(lse), 0.0, lse)[..., None])
        outs.append(torch.einsum("bhsl,blhd->bshd", probs, v))
        lses.append(lse.transpose(1, 2))
    return torch.cat(outs, 1).to(q.dtype), torch.cat(lses, 1)
