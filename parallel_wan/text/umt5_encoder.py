"""The UMT5 encoder stack as a plain torch module: the network of transformers'
`UMT5EncoderModel` (the references' text encoder), under its parameter names, computed with the
same ops in the same order, so its embeddings are bit for bit transformers' (tests/unit/test_text.py
compares them in float32, bfloat16 and float16).

Why not transformers' class: importing `transformers.models.umt5.modeling_umt5` pulls in
transformers' modeling machinery (torch._dynamo, DTensor, sympy, scipy) — about 3.7 CPU seconds
in every process that encodes a prompt, more than a small run's whole denoising loop, paid again
by each CLI run, server start and preempted job's restart. The encoder itself is 24 identical
blocks: an RMS norm, self-attention with a per-block relative-position bias and no score
scaling, an RMS norm and a gated tanh-GELU feed-forward (the official `wan/modules/t5.py` carries
its own copy of the same network, too). The tokenizer: text/tokenizer.py.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from .encoder_shape import EncoderShape  # noqa: F401 (its shape, torch-free; callers import it from here too)


class Linear(nn.Module):
    """nn.Linear without a bias and without an initialisation: the encoder is built on the meta
    device and assigned the checkpoint's tensors, and initialising on meta runs torch's Python
    reference kernels, whose first use imports torch._dynamo (2 CPU seconds)."""

    def __init__(self, inputs: int, outputs: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(outputs, inputs))

    def forward(self, x):
        return F.linear(x, self.weight)


class Embedding(nn.Module):
    """nn.Embedding's lookup, uninitialised (see Linear)."""

    def __init__(self, rows: int, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(rows, dim))

    def forward(self, ids):
        return F.embedding(ids, self.weight)


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    # transformers' "gelu_new" (NewGELUActivation), written out with the same ops
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)  # accumulated in fp32
        x = x * torch.rsqrt(variance + self.eps)
        if self.weight.dtype in (torch.float16, torch.bfloat16):
            x = x.to(self.weight.dtype)
        return self.weight * x


class SelfAttention(nn.Module):
    def __init__(self, s: EncoderShape):
        super().__init__()
        inner = s.num_heads * s.d_kv
        self.heads, self.head_dim = s.num_heads, s.d_kv
        self.buckets, self.max_distance = s.relative_attention_num_buckets, s.relative_attention_max_distance
        self.q = Linear(s.d_model, inner)
        self.k = Linear(s.d_model, inner)
        self.v = Linear(s.d_model, inner)
        self.o = Linear(inner, s.d_model)
        self.relative_attention_bias = Embedding(s.relative_attention_num_buckets, s.num_heads)

    def bucket(self, relative: torch.Tensor) -> torch.Tensor:
        """T5's bidirectional buckets: half for keys after the query; within each half, exact
        distances below a quarter of the buckets, log-spaced ones up to max_distance."""
        half = self.buckets // 2
        out = (relative > 0).to(torch.long) * half
        distance = torch.abs(relative)
        exact = half // 2
        log_ratio = torch.log(distance.float() / exact) / math.log(self.max_distance / exact) * (half - exact)
        far = torch.min(exact + log_ratio.to(torch.long), torch.full_like(distance, half - 1))
        return out + torch.where(distance < exact, distance, far)

    def pair_buckets(self, length: int, device) -> torch.Tensor:
        """The (length, length) bucket of every query-key pair."""
        positions = torch.arange(length, dtype=torch.long, device=device)
        return self.bucket(positions[None, :] - positions[:, None])  # key - query

    def forward(self, x, keep, buckets=None):
        """keep: (B, 1, 1, T) bool of the real tokens, or None when every token is real.
        buckets: `pair_buckets(T)`, made once by the caller for every block (the same in each)."""
        b, t = x.shape[:2]
        q, k, v = (proj(x).view(b, -1, self.heads, self.head_dim).transpose(1, 2) for proj in (self.q, self.k, self.v))
        if buckets is None:
            buckets = self.pair_buckets(t, q.device)
        bias = self.relative_attention_bias(buckets).permute([2, 0, 1]).unsqueeze(0)
        if keep is not None:
            bias = torch.where(keep, bias, torch.finfo(k.dtype).min)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.contiguous(), scale=1.0)  # T5: no scaling
        return self.o(out.transpose(1, 2).contiguous().reshape(b, t, -1))


class GatedFeedForward(nn.Module):
    def __init__(self, s: EncoderShape):
        super().__init__()
        self.wi_0 = Linear(s.d_model, s.d_ff)
        self.wi_1 = Linear(s.d_model, s.d_ff)
        self.wo = Linear(s.d_ff, s.d_model)

    def forward(self, x):
        x = _gelu_tanh(self.wi_0(x)) * self.wi_1(x)
        if x.dtype != self.wo.weight.dtype:  # fp16 runs keep `wo` in fp32 (it overflows in fp16)
            x = x.to(self.wo.weight.dtype)
        return self.wo(x)


class _AttentionLayer(nn.Module):
    def __init__(self, s: EncoderShape):
        super().__init__()
        self.SelfAttention = SelfAttention(s)
        self.layer_norm = RMSNorm(s.d_model, s.layer_norm_epsilon)


class _FeedForwardLayer(nn.Module):
    def __init__(self, s: EncoderShape):
        super().__init__()
        self.DenseReluDense = GatedFeedForward(s)
        self.layer_norm = RMSNorm(s.d_model, s.layer_norm_epsilon)


def _clamp_fp16(x):
    # as transformers does after each residual in fp16: keep inf out of the next layer
    if x.dtype != torch.float16:
        return x
    top = torch.finfo(x.dtype).max
    bound = torch.where(torch.isinf(x).any(), top - 1000, top)
    return torch.clamp(x, min=-bound, max=bound)


class Block(nn.Module):
    def __init__(self, s: EncoderShape):
        super().__init__()
        self.layer = nn.ModuleList([_AttentionLayer(s), _FeedForwardLayer(s)])

    def forward(self, x, keep, buckets=None):
        attention, ff = self.layer
        x = _clamp_fp16(x + attention.SelfAttention(attention.layer_norm(x), keep, buckets))
        return _clamp_fp16(x + ff.DenseReluDense(ff.layer_norm(x)))


class _Stack(nn.Module):
    def __init__(self, s: EncoderShape):
        super().__init__()
        self.embed_tokens = Embedding(s.vocab_size, s.d_model)
        self.block = nn.ModuleList([Block(s) for _ in range(s.num_layers)])
        self.final_layer_norm = RMSNorm(s.d_model, s.layer_norm_epsilon)


class UMT5Encoder(nn.Module):
    """input ids (B, T) and attention mask (B, T) → last hidden state (B, T, d_model).
    `shared` and `encoder.embed_tokens` are one table, as transformers ties them."""

    def __init__(self, shape: EncoderShape):
        super().__init__()
        self.shape = shape
        self.shared = Embedding(shape.vocab_size, shape.d_model)
        self.encoder = _Stack(shape)
        self.encoder.embed_tokens = self.shared

    @property
    def d_model(self) -> int:
        return self.shape.d_model

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.encoder.embed_tokens(ids)
        real = mask.bool()
        # transformers' SDPA path passes no mask when no token is padding (the bias alone)
        keep = None if bool(real.all()) else real[:, None, None, :]
        # every block has its own bias table but the same query-key buckets: computed once, not
        # 24 times (the log-spaced distances of 512² pairs)
        buckets = self.encoder.block[0].layer[0].SelfAttention.pair_buckets(ids.shape[1], x.device)
        for block in self.encoder.block:
            x = block(x, keep, buckets)
        return self.encoder.final_layer_norm(x)
