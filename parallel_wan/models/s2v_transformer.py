"""Wan2.2-S2V-14B's DiT forward, written once against `ops` (issue 42; run clip by clip by
pipeline/s2v.py): the Wan DiT's blocks (models/transformer.py) over a longer sequence —

- the video's noisy tokens, plus the pose condition's embedding (its own patch embedding of the
  pose video's latents; all zeros when no pose video is given, which leaves its bias);
- then the reference image's latent tokens (at RoPE frame 30) and, after the first clip, the
  motion tokens: the previous clip's last 19 latent frames packed 1 / 2 / 16 frames to full /
  half / quarter token resolution (the frame packer). Neither is denoised: they are modulated
  at t = 0 (the blocks' TokenParts) and dropped before the head;
- a learned embedding per token kind (video 0, reference 1, motion 2) added to all of them;
- the audio: wav2vec2's 25 hidden states weighed into one feature per video frame, a causal
  convolution encoder down to the latent frame rate (4 audio tokens and a padding token per
  latent frame, and a global vector per frame), and after each of `audio_inject_layers` blocks
  every video token attends to its own frame's audio tokens after an AdaIN by the frame's
  global vector.

None of the extra tokens or audio tokens depends on the timestep: `segment_inputs` makes them
once per clip and `forward` (every step) only joins and attends to them.

Equal to the official `WanModel_S2V` (tests/unit/test_s2v_model.py). Parameter names are the
official ones for what S2V adds (s2v_shapes.py), diffusers' for the DiT they share.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .animate_face import _batched, causal_conv1d, face_encoder, frame_attention, masked_frame_attention
from .animate_transformer import _index, _stack
from .s2v_config import ZIP_FRAME_BUCKETS
from .s2v_shapes import FRAME_PACKER
from .transformer import TokenParts, condition, embed_patches, output_head, patchify, transformer_block
from .transformer_config import TransformerConfig

ADAIN_EPS = 1e-5  # the injectors' AdaLayerNorm keeps diffusers' default eps


class SegmentInputs(NamedTuple):
    """What a clip's every step joins or attends to but no step changes (per CFG half)."""

    pose: object  # the pose condition's embedding of each video token (B, Lv, dim)
    extra: object  # the reference and motion tokens, embedded, kinds added (B, Le, dim)
    audio: object  # each latent frame's audio tokens (B, T, heads + 1, dim)
    audio_global: object  # each latent frame's global audio vector (B, T, dim)


class SegmentArrays(NamedTuple):
    """A clip's raw inputs, one row each, before the weights touch them: what the pipeline hands
    the noise predictor, which makes the (cond, uncond) SegmentInputs with the expert's weights
    as it holds them (`cond_and_uncond`)."""

    pose_tokens: object  # the pose latents' patch tokens (1, Lv, patch volume × 16); zeros without a pose video
    reference_tokens: object  # the reference latent's patch tokens (1, h·w, patch volume × 16)
    motion_latents: object  # the previous clip's last latent frames (1, 16, Tm, lh, lw); None: dropped (clip 1)
    audio: object  # the clip's audio features (1, 25, audio_dim, frames), one per video frame


def cond_and_uncond(params, arrays: SegmentArrays, cfg: TransformerConfig, ops, guided: bool):
    """(cond, uncond) SegmentInputs: the same pose, reference and motion; the unconditional half
    hears silence — features × 0, as the official code — (None when no step guides)."""
    cond = segment_inputs(params, arrays, cfg, ops)
    if not guided:
        return cond, None
    audio, glob = audio_tokens(params, arrays.audio * 0.0, cfg, ops)
    return cond, cond._replace(audio=audio, audio_global=glob)


def segment_inputs(params, arrays: SegmentArrays, cfg: TransformerConfig, ops) -> SegmentInputs:
    kinds = params["trainable_cond_mask"]["weight"]  # (3, dim)
    pose = embed_patches({"patch_embedding": params["cond_encoder"]}, arrays.pose_tokens, cfg, ops)
    reference = embed_patches(params, arrays.reference_tokens, cfg, ops)
    extra = reference + ops.cast_like(kinds[1], reference)
    if arrays.motion_latents is not None:
        motion = frame_packer(params["frame_packer"], arrays.motion_latents, ops)
        extra = ops.concat([extra, motion + ops.cast_like(kinds[2], motion)], axis=1)
    audio, glob = audio_tokens(params, arrays.audio, cfg, ops)
    return SegmentInputs(pose, extra, audio, glob)


def frame_packer(p, motion_latents, ops):
    """The previous clip's latent frames (B, 16, Tm, lh, lw) → motion tokens (B, N, dim): the last
    19 frames (zeros before the first when fewer), the nearest by the (1, 2, 2) patch embedding,
    the 2 before by (2, 4, 4), the 16 before those by (4, 8, 8); nearest group first."""
    b, c, frames, lh, lw = motion_latents.shape
    total = sum(ZIP_FRAME_BUCKETS)
    kept = motion_latents[:, :, max(0, frames - total) :]
    if kept.shape[2] < total:
        pad = ops.zeros((b, c, total - kept.shape[2], lh, lw), ops.dtype_name(kept), like=kept)
        kept = ops.concat([pad, kept], axis=2)
    near, mid, _ = ZIP_FRAME_BUCKETS
    groups = {  # the frames each projection sees, nearest first
        "proj": kept[:, :, total - near :],
        "proj_2x": kept[:, :, total - near - mid : total - near],
        "proj_4x": kept[:, :, : total - near - mid],
    }
    out = []
    for name, kernel in FRAME_PACKER:
        w = p[name]["weight"]  # (dim, 16, kt, kh, kw): a Conv3d with stride = kernel, as a matmul
        dim = w.shape[0]
        flat = ops.reshape(ops.transpose(w, (0, 2, 3, 4, 1)), (dim, math.prod(kernel) * w.shape[1]))
        tokens = patchify(ops.cast_like(groups[name], w), kernel, ops)
        out.append(ops.linear(tokens, flat, p[name]["bias"]))
    return ops.concat(out, axis=1)


def audio_tokens(params, features, cfg: TransformerConfig, ops):
    """A clip's audio features (B, 25, audio_dim, F) of its F video frames → the audio tokens
    (B, T, heads + 1, dim) and global vectors (B, T, dim) of its T latent frames.

    As the official forward: the first feature repeated for the motion frames before the clip,
    the 25 layers weighed by softmax-free positive weights (SiLU, normalised by their sum), the
    causal encoder (two stride-2 convolutions: 4 frames a latent frame), and the motion frames'
    latent frames dropped again. Float32 throughout (the official code disables autocast here)."""
    s = cfg.s2v
    p = params["casual_audio_encoder"]
    x = ops.cast(features, "float32")
    x = ops.concat([ops.repeat(x[..., :1], s.motion_frames, axis=-1), x], axis=-1)
    weights = ops.silu(ops.cast(p["weights"], "float32"))  # (1, 25, 1, 1)
    x = ops.sum((x * weights) / ops.sum(weights, axis=1, keepdims=True), axis=1)  # (B, audio_dim, frames)
    x = ops.transpose(x, (0, 2, 1))  # (B, frames, audio_dim)
    e = _float32({k: v["conv"] if isinstance(v, dict) and "conv" in v else v for k, v in p["encoder"].items()}, ops)
    local = face_encoder(e, x, s.num_audio_token, ops)
    g = x
    for name, stride in (("conv1_global", 1), ("conv2", 2), ("conv3", 2)):
        g = ops.silu(ops.layer_norm(causal_conv1d(g, e[name], stride, ops), eps=cfg.eps))
    g = ops.linear(g, ops.cast(e["final_linear"]["weight"], "float32"), ops.cast(e["final_linear"]["bias"], "float32"))
    skip = s.motion_latent_frames
    return local[:, skip:], g[:, skip:]


def _float32(tree, ops):
    if isinstance(tree, dict):
        return {k: _float32(v, ops) for k, v in tree.items()}
    return ops.cast(tree, "float32")


def audio_injection(inj, adain, x, audio, audio_global, heads: int, ops, eps: float, runs):
    """The residual of one audio injector on the video tokens x (B, S, dim): each token AdaIN'd
    by its frame's global vector, then attending to its frame's audio tokens (a Wan
    cross-attention: q/k RMS-normed across heads). `runs`: the (start, stop, frame) runs of x's
    tokens (animate_face.face_runs)."""
    b, s, dim = x.shape
    n = audio.shape[2]
    head_dim = dim // heads
    # the audio tokens are made in float32; the injector runs in the hidden states' dtype
    audio, audio_global = ops.cast_like(audio, x), ops.cast_like(audio_global, x)
    emb = ops.linear(ops.silu(audio_global), adain["linear"]["weight"], adain["linear"]["bias"])  # (B, T, 2·dim)
    shift, scale = emb[..., :dim], emb[..., dim:]
    normed = ops.layer_norm(ops.cast(x, "float32"), eps=ADAIN_EPS)
    parts = []
    for start, stop, first, count in _batched(runs):  # each run's tokens by their frames' AdaIN vectors
        part = ops.reshape(normed[:, start:stop], (b, count, (stop - start) // count, dim))
        sc = ops.expand_dims(ops.cast(scale[:, first : first + count], "float32"), 2)
        sh = ops.expand_dims(ops.cast(shift[:, first : first + count], "float32"), 2)
        parts.append(ops.reshape(part * (1 + sc) + sh, (b, stop - start, dim)))
    h = ops.cast_like(parts[0] if len(parts) == 1 else ops.concat(parts, axis=1), x)
    q = ops.reshape(ops.rms_norm(ops.dense(h, inj["q"]), inj["norm_q"]["weight"], eps), (b, s, heads, head_dim))
    kv = ops.reshape(audio, (b, audio.shape[1] * n, dim))
    k = ops.rms_norm(ops.dense(kv, inj["k"]), inj["norm_k"]["weight"], eps)
    v = ops.dense(kv, inj["v"])
    keys = (b, audio.shape[1] * n, heads, head_dim)
    out = frame_attention(q, ops.reshape(k, keys), ops.reshape(v, keys), n, runs, ops)
    return ops.dense(ops.cast_like(out, x), inj["o"])


def forward(params, tokens, timestep, context, inputs: SegmentInputs, rope, cfg, ops, attention, run_blocks, runs):
    """Noise prediction for one clip's slice of the sequence — the video's tokens, then the
    reference and motion tokens, then padding (sequence parallelism shards the whole sequence,
    padded at its end, as every model's): tokens (B, Lc, patch volume × 16), of which the first
    `inputs.pose.shape[1]` are video tokens whose latents these are (the rest are placeholders);
    `inputs`: the clip's segment_inputs cut to this slice (pose: its video tokens', extra: its
    reference and motion tokens'); rope: (cos, sin) for the slice's tokens; `runs`: its video
    tokens' (start, stop, latent frame) runs. run_blocks: a torch block runner with the pass
    protocol (backends/torch/runners/block_pass.py), so the audio injectors run between the
    blocks however the runner holds their weights.
    Returns (B, Lc, patch volume × out_channels): the video tokens' predictions, zeros after."""
    kinds = params["trainable_cond_mask"]["weight"]
    video = inputs.pose.shape[1]
    x = embed_patches(params, tokens[:, :video], cfg, ops) + inputs.pose
    x = x + ops.cast_like(kinds[0], x)
    b, local, dim = x.shape[0], tokens.shape[1], x.shape[2]
    pad = local - video - inputs.extra.shape[1]
    parts = [x, ops.cast_like(inputs.extra, x)] + ([ops.zeros((b, pad, dim), ops.dtype_name(x), like=x)] if pad else [])
    x = ops.concat(parts, axis=1)
    # the time embedding of t and of 0 (the reference and motion tokens' modulation)
    both = ops.concat([ops.reshape(ops.cast(timestep, "float32"), (1,)), ops.zeros((1,), "float32", like=timestep)], 0)
    temb, proj, text = condition(params, both, context, cfg, ops)
    mod = TokenParts(proj, video)

    def block(h, p):
        return transformer_block(p, h, text, mod, rope, cfg, ops, attention)

    heads = cfg.num_attention_heads
    injectors = params["audio_injector"]
    with run_blocks.open(params["blocks"]) as blocks:
        for i, layer in enumerate(cfg.s2v.audio_inject_layers):
            x = blocks.run(block, x, stop=layer + 1)
            if video:  # a slice of only reference, motion and padding tokens hears nothing
                residual = audio_injection(
                    injectors["injector"][i],
                    injectors["injector_adain_layers"][i],
                    x[:, :video],
                    inputs.audio,
                    inputs.audio_global,
                    heads,
                    ops,
                    cfg.eps,
                    runs,
                )
                x = ops.concat([x[:, :video] + residual, x[:, video:]], axis=1)
        x = blocks.run(block, x)
    out = output_head(params, x[:, :video], temb[0:1], cfg, ops)
    if video == local:
        return out
    rest = ops.zeros((b, local - video, out.shape[-1]), ops.dtype_name(out), like=out)
    return ops.concat([out, rest], axis=1)


def local_inputs(inputs: SegmentInputs, token_index, video_tokens: int) -> SegmentInputs:
    """The clip's inputs cut to a slice of the sequence at global positions `token_index` (a
    contiguous host range, padding past the end): its video tokens' pose, its extra tokens'."""
    start, stop = int(token_index[0]), int(token_index[-1]) + 1
    total = video_tokens + inputs.extra.shape[1]
    v_stop = min(stop, video_tokens)
    e_start, e_stop = max(start, video_tokens) - video_tokens, max(min(stop, total), video_tokens) - video_tokens
    pose = inputs.pose[:, start:v_stop] if start < video_tokens else inputs.pose[:, :0]
    return inputs._replace(pose=pose, extra=inputs.extra[:, e_start:e_stop])


class MaskedInputs(NamedTuple):
    """A clip's inputs for a shard whose slice of the sequence is known only when it runs (JAX's
    traced shards): every array spans the shard's tokens, and masks say what each token is."""

    pose: object  # the pose embedding of each token (B, Lc, dim); zero off the video
    extra: object  # the reference and motion embedding of each token (B, Lc, dim); zero on the video
    audio: object  # (B, T, heads + 1, dim), every frame's
    audio_global: object  # (B, T, dim)
    video: object  # (Lc,) bool: a video token
    frames_of: object  # (Lc,) int32: a video token's latent frame (0 elsewhere)


def aligned(inputs: SegmentInputs, video_tokens: int, padded: int, ops) -> tuple:
    """(pose, extra) of the whole padded sequence (B, padded, dim): the pose embedding on the
    video's tokens, the reference and motion embedding after them, zeros elsewhere — one array
    each, to be sharded as the tokens are."""
    b, _, dim = inputs.pose.shape
    extra = inputs.extra.shape[1]
    zeros = lambda n, like: ops.zeros((b, n, dim), ops.dtype_name(like), like=like)  # noqa: E731
    pose = ops.concat([inputs.pose, zeros(padded - video_tokens, inputs.pose)], axis=1)
    rest = [zeros(video_tokens, inputs.extra), inputs.extra] + (
        [zeros(padded - video_tokens - extra, inputs.extra)] if padded > video_tokens + extra else []
    )
    return pose, ops.concat(rest, axis=1)


def _masked_injection(inj, adain, x, inputs: MaskedInputs, heads: int, ops, eps: float):
    """audio_injection for every token of a traced shard: each token's AdaIN vectors by a one-hot
    of its frame, its attention over every frame's audio tokens with the other frames' set to
    −inf (float32) — the same attention; the caller keeps the result on video tokens only."""
    b, s, dim = x.shape
    frames, n = inputs.audio.shape[1], inputs.audio.shape[2]
    head_dim = dim // heads
    audio, glob = ops.cast_like(inputs.audio, x), ops.cast_like(inputs.audio_global, x)
    emb = ops.cast(ops.linear(ops.silu(glob), adain["linear"]["weight"], adain["linear"]["bias"]), "float32")
    one_hot = ops.cast(
        ops.expand_dims(inputs.frames_of, 1) == ops.asarray(list(range(frames)), "int32", like=inputs.frames_of),
        "float32",
    )  # (S, T): exact selection, one term of each sum is not zero
    per_token = ops.einsum("st,btc->bsc", one_hot, emb)
    shift, scale = per_token[..., :dim], per_token[..., dim:]
    h = ops.cast_like(ops.layer_norm(ops.cast(x, "float32"), eps=ADAIN_EPS) * (1 + scale) + shift, x)
    q = ops.rms_norm(ops.dense(h, inj["q"]), inj["norm_q"]["weight"], eps)
    kv = ops.reshape(audio, (b, frames * n, dim))
    k = ops.rms_norm(ops.dense(kv, inj["k"]), inj["norm_k"]["weight"], eps)
    v = ops.dense(kv, inj["v"])
    keys = (b, frames * n, heads, head_dim)
    q = ops.reshape(q, (b, s, heads, head_dim))
    out = masked_frame_attention(q, ops.reshape(k, keys), ops.reshape(v, keys), n, inputs.frames_of, ops)
    return ops.dense(ops.cast_like(out, x), inj["o"])


def forward_masked(params, tokens, timestep, context, inputs: MaskedInputs, rope, cfg, ops, attention, run_layers=None):
    """`forward` for a shard whose split between video, extra and padding tokens is traced (JAX):
    every choice by a per-token mask, the blocks in one layer scan with each layer's injector
    picked by one-hot and kept where the layer injects (animate_transformer's way: the stacked
    layers are never sliced). run_layers: `run(block, carry, layers)` (ops.scan_layers, JAX's
    with the FSDP gather bound); None: ops.scan_layers. Returns (B, Lc, patch volume × 16),
    zeros off the video."""
    kinds = params["trainable_cond_mask"]["weight"]
    video = ops.expand_dims(ops.expand_dims(inputs.video, 0), -1)  # (1, Lc, 1)
    x = embed_patches(params, tokens, cfg, ops) + inputs.pose
    x = x + ops.cast_like(kinds[0], x)
    x = ops.where(video, x, ops.cast_like(inputs.extra, x))
    both = ops.concat([ops.reshape(ops.cast(timestep, "float32"), (1,)), ops.zeros((1,), "float32", like=timestep)], 0)
    temb, proj, text = condition(params, both, context, cfg, ops)
    mod = TokenParts(proj, inputs.video)
    heads, layers = cfg.num_attention_heads, cfg.num_layers
    injected = list(cfg.s2v.audio_inject_layers)
    injectors = _stack(params["audio_injector"]["injector"], ops)
    adains = _stack(params["audio_injector"]["injector_adain_layers"], ops)
    slot = [injected.index(i) if i in injected else 0 for i in range(layers)]  # each layer's injector
    flags = [int(i in injected) for i in range(layers)]  # whether the layer injects

    def at(values, i):
        """values[i] for a traced layer index i (a sum of one non-zero term: exact)."""
        table = ops.asarray(values, "int32", like=inputs.frames_of)
        return ops.sum(ops.where(ops.asarray(list(range(layers)), "int32", like=table) == i, table, 0))

    def block_then_injection(carry, p):
        h, i = carry
        h = transformer_block(p, h, text, mod, rope, cfg, ops, attention)
        j = at(slot, i)
        residual = _masked_injection(_index(injectors, j, ops), _index(adains, j, ops), h, inputs, heads, ops, cfg.eps)
        return ops.where(at(flags, i) > 0, h + ops.where(video, residual, ops.zeros_like(residual)), h), i + 1

    x, _ = (run_layers or ops.scan_layers)(block_then_injection, (x, ops.zeros((), "int32", like=x)), params["blocks"])
    out = output_head(params, x, temb[0:1], cfg, ops)
    return ops.where(video, out, ops.zeros_like(out))
