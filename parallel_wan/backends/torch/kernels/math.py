"""The attention formula in at least float32: runs on any device and dtype, slowly — the last
resort of auto everywhere, and attention_impl=sdpa's on CPU."""

from __future__ import annotations

from . import Kernel


def run(q, k, v, scale):
    import torch

    from ..attention import lse_dtype

    dt = lse_dtype(q.dtype)
    scores = torch.einsum("bshd,blhd->bhsl", q.to(dt), k.to(dt)) * scale
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.einsum("bhsl,blhd->bshd", torch.exp(scores - lse[..., None]), v.to(dt))
    return out.to(q.dtype), lse.transpose(1, 2)


KERNEL = Kernel(
    name="math",
    setting="sdpa",
    run=run,
    summary="the formula in float32 (a slow last resort)",
    # auto: last on every device; attention_impl=sdpa runs it on CPU only (`devices`) — on a GPU
    # a setting that names PyTorch's fused kernels fails loudly rather than run the formula.
    priority={"cpu": 90, "ampere": 90, "hopper": 90, "blackwell": 90, "other": 90},
    devices=("cpu",),
    slow="the plain fp32 formula",
    listed=10,
)
