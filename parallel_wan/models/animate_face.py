"""Wan2.2-Animate's face path, written once against `ops` (issue 42):
the face encoder turns the motion encoder's per-frame vectors into a few face tokens per latent
frame, and the face adapter — a residual cross-attention after every `inject_every`-th block —
lets each latent frame's video tokens attend to that frame's face tokens only.

Equal to diffusers' `WanAnimateFaceEncoder` and `WanAnimateFaceBlockCrossAttention`
(tests/unit/test_animate_face.py), parameter names as diffusers stores them (`face_encoder.…`,
`face_adapter.{i}.…`).

Why the adapter is friendly to sequence parallelism: a token attends only to the face tokens of
its own latent frame, so a rank holding any slice of the tokens needs just those frames' face
tokens (they are small and every rank has them all); no exchange between ranks is needed.
"""

from __future__ import annotations

# The face encoder's convolutions are causal in time: padded on the left by kernel − 1 copies of
# the first frame (PyTorch's "replicate" padding), so frame t never sees a later frame.


def causal_conv1d(x, layer: dict, stride: int, ops):
    """(B, T, C_in) → (B, T', C_out): a Conv1d over frames (weight (out, in, k)) after the causal
    replicate padding, as a Conv2d of height 1."""
    k = layer["weight"].shape[-1]
    frames = x.shape[1]
    x = ops.take(x, [0] * (k - 1) + list(range(frames)), axis=1)
    x = ops.expand_dims(ops.transpose(x, (0, 2, 1)), 2)  # (B, C, 1, T + k − 1)
    y = ops.conv2d(x, ops.expand_dims(layer["weight"], 2), layer.get("bias"), stride=(1, stride))
    return ops.transpose(ops.squeeze(y, 2), (0, 2, 1))


def face_encoder(p: dict, motion, heads: int, ops, eps: float = 1e-6):
    """Motion vectors (B, F, motion_dim) of F face frames → face tokens (B, F', heads + 1, dim):
    one causal conv widens each frame into `heads` streams, two stride-2 convs reduce 4k+1 frames
    to the k+1 latent frames' rate, a projection to the transformer's width, and one learned
    padding token per frame appended."""
    b = motion.shape[0]
    x = causal_conv1d(motion, p["conv1_local"], 1, ops)  # (B, F, heads · hidden)
    hidden = x.shape[-1] // heads
    x = ops.reshape(
        ops.transpose(ops.reshape(x, (b, x.shape[1], heads, hidden)), (0, 2, 1, 3)), (b * heads, -1, hidden)
    )
    x = ops.silu(ops.layer_norm(x, eps=eps))
    for conv in ("conv2", "conv3"):
        x = ops.silu(ops.layer_norm(causal_conv1d(x, p[conv], 2, ops), eps=eps))
    if "out_proj" in p:  # Animate's face encoder projects to the transformer's width; S2V's audio encoder is that wide
        x = ops.linear(x, p["out_proj"]["weight"], p["out_proj"]["bias"])  # (B · heads, F', dim)
    frames, dim = x.shape[1], x.shape[2]
    x = ops.transpose(ops.reshape(x, (b, heads, frames, dim)), (0, 2, 1, 3))  # (B, F', heads, dim)
    padding = ops.broadcast_to(ops.cast_like(p["padding_tokens"], x), (b, frames, 1, dim))
    return ops.concat([x, padding], axis=2)


def face_adapter(p: dict, x, face, heads: int, ops, eps: float = 1e-6, runs=None, frames_of=None):
    """The residual of one face block: video tokens x (B, S, dim) and face tokens (B, T, N, dim)
    of the T latent frames. Each token attends to its own frame's N face tokens.

    runs: ((start, stop, frame), …) over x's S tokens, in order — which frame each stretch of
    tokens belongs to (`face_runs`): a rank holding any slice of the sequence (sequence
    parallelism, padding) passes its own. frames_of: the same as a per-token int array (S,) — a
    shard whose slice is not known when the program is traced (JAX's shard_map): each token then
    attends over every frame's face tokens with the other frames' masked out. None of either: S
    is the T frames' tokens, frame by frame."""
    b, s, dim = x.shape
    frames, n = face.shape[1], face.shape[2]
    if frames_of is not None:
        return _masked_face_adapter(p, x, face, heads, ops, eps, frames_of)
    if runs is None:
        if s % frames:
            raise ValueError(f"the face adapter needs whole frames: {s} tokens over {frames} latent frames")
        runs = tuple((f * (s // frames), (f + 1) * (s // frames), f) for f in range(frames))
    q, k, v = _projections(p, x, face, heads, ops, eps)
    out = frame_attention(q, k, v, n, runs, ops)
    return ops.linear(out, p["to_out"]["weight"], p["to_out"]["bias"])


def frame_attention(q, k, v, per_frame: int, runs, ops):
    """Each query token attends to its own frame's keys only: q (B, S, heads, head_dim) over the
    (start, stop, frame) `runs` of its S tokens, k and v (B, T·per_frame, heads, head_dim), frame
    by frame. Returns (B, S, heads · head_dim). (Animate's face adapters, S2V's audio injectors.)"""
    b, _, heads, head_dim = q.shape
    frames = k.shape[1] // per_frame
    k = ops.reshape(k, (b, frames, per_frame, heads, head_dim))
    v = ops.reshape(v, (b, frames, per_frame, heads, head_dim))
    pieces = []
    for start, stop, first, count in _batched(runs):  # equal runs of consecutive frames: one attention call
        length = (stop - start) // count
        qg = ops.reshape(q[:, start:stop], (b * count, length, heads, head_dim))
        kg = ops.reshape(k[:, first : first + count], (b * count, per_frame, heads, head_dim))
        vg = ops.reshape(v[:, first : first + count], (b * count, per_frame, heads, head_dim))
        pieces.append(ops.reshape(ops.attention(qg, kg, vg), (b, stop - start, heads * head_dim)))
    return pieces[0] if len(pieces) == 1 else ops.concat(pieces, axis=1)


def masked_frame_attention(q, k, v, per_frame: int, frames_of, ops):
    """frame_attention with a per-token frame index (S,) — a traced shard's: the scores against
    every frame's keys, those of other frames set to −inf before the softmax (float32), so each
    token's weights are its own frame's — the same attention, ~T·per_frame/dim more work than
    the projections. Returns (B, S, heads · head_dim) float32."""
    b, s, heads, head_dim = q.shape
    frames = k.shape[1] // per_frame
    scores = ops.einsum("bshd,bkhd->bhsk", ops.cast(q, "float32"), ops.cast(k, "float32")) * (head_dim**-0.5)
    key_frame = ops.asarray([f for f in range(frames) for _ in range(per_frame)], "int32", like=frames_of)
    same = ops.expand_dims(frames_of, 1) == ops.expand_dims(key_frame, 0)  # (S, T·per_frame)
    weights = ops.softmax(ops.where(same, scores, float("-inf")), axis=-1)
    out = ops.einsum("bhsk,bkhd->bshd", weights, ops.cast(v, "float32"))
    return ops.reshape(out, (b, s, heads * head_dim))


def _projections(p: dict, x, face, heads: int, ops, eps: float):
    """q (B, S, heads, head_dim) of the video tokens and k, v (B, T·N, heads, head_dim) of every
    frame's face tokens, normed as diffusers' face block does (LayerNorm before, per-head RMS
    norms on q and k)."""
    b, s, dim = x.shape
    keys, head_dim = face.shape[1] * face.shape[2], dim // heads
    q = ops.linear(ops.layer_norm(x, eps=eps), p["to_q"]["weight"], p["to_q"]["bias"])
    kv = ops.reshape(ops.layer_norm(face, eps=eps), (b, keys, dim))
    k = ops.linear(kv, p["to_k"]["weight"], p["to_k"]["bias"])
    v = ops.linear(kv, p["to_v"]["weight"], p["to_v"]["bias"])
    q = ops.rms_norm(ops.reshape(q, (b, s, heads, head_dim)), p["norm_q"]["weight"], eps)
    k = ops.rms_norm(ops.reshape(k, (b, keys, heads, head_dim)), p["norm_k"]["weight"], eps)
    return q, k, ops.reshape(v, (b, keys, heads, head_dim))


def _masked_face_adapter(p: dict, x, face, heads: int, ops, eps: float, frames_of):
    """face_adapter with a per-token frame index (masked_frame_attention: 2 % more work than the
    projections at 720p)."""
    q, k, v = _projections(p, x, face, heads, ops, eps)
    out = ops.cast_like(masked_frame_attention(q, k, v, face.shape[2], frames_of, ops), x)
    return ops.linear(out, p["to_out"]["weight"], p["to_out"]["bias"])


def face_runs(token_index, frame_tokens: int, frames: int) -> tuple:
    """The (start, stop, frame) runs of a slice of the sequence whose tokens sit at global
    positions `token_index` (a host int array), `frame_tokens` tokens a frame; padding tokens
    (past the last frame) count as the last frame's (their outputs are dropped)."""
    frame = [min(int(i) // frame_tokens, frames - 1) for i in token_index]
    runs, start = [], 0
    for i in range(1, len(frame) + 1):
        if i == len(frame) or frame[i] != frame[start]:
            runs.append((start, i, frame[start]))
            start = i
    return tuple(runs)


def _batched(runs):
    """Consecutive runs of one length over consecutive frames, merged: (start, stop, first frame,
    frames). A whole sequence is one batch; a rank's slice is at most three (a partial first
    frame, whole frames, a partial last frame) — more only where padding lengthens the last."""
    merged = []
    for start, stop, frame in runs:
        if merged:
            m_start, m_stop, first, count = merged[-1]
            if frame == first + count and stop - start == (m_stop - m_start) // count and start == m_stop:
                merged[-1] = (m_start, stop, first, count + 1)
                continue
        merged.append((start, stop, frame, 1))
    return merged
