"""Wan2.2-Animate-14B's DiT forward, written once against `ops` (issue 42; run segment by segment
by pipeline/animate.py): the Wan DiT's blocks (models/transformer.py) with

- the pose: the pose video's latents embedded by their own patch embedding and added to the
  tokens of every latent frame but the first (the reference image's frame);
- the character image's CLIP features (Wan 2.1-style image context), attended in every
  block's cross-attention beside the text (`add_k_proj`/`add_v_proj`);
- the face: the face crops through the motion encoder (models/animate_motion.py) and the face
  encoder, a zero frame prepended for the reference frame, attended frame by frame by a face
  adapter after every `inject_face_latents_blocks`-th block (models/animate_face.py).

None of the three depends on the timestep: `segment_inputs` makes them once per segment and
`forward` (every step) only adds and attends to them.

Equal to diffusers' `WanAnimateTransformer3DModel` (tests/unit/test_animate_face.py).
"""

from __future__ import annotations

from typing import NamedTuple

from .animate_face import face_adapter, face_encoder
from .animate_motion import motion_encoder
from .transformer import condition, embed_patches, output_head, transformer_block
from .transformer_config import TransformerConfig

IMAGE_NORM_EPS = 1e-5  # the image embedder's FP32LayerNorms keep torch's default eps


def image_context(params, features, ops):
    """CLIP features (B, 257, image_dim) → image tokens (B, 257, dim): LayerNorm, a GELU MLP,
    LayerNorm, the norms in float32 (diffusers' WanImageEmbedding)."""
    p = params["condition_embedder"]["image_embedder"]

    def norm(x, n):
        w, b = ops.cast(n["weight"], "float32"), ops.cast(n["bias"], "float32")
        return ops.cast_like(ops.layer_norm(ops.cast(x, "float32"), w, b, IMAGE_NORM_EPS), x)

    ff = p["ff"]["net"]
    h = norm(features, p["norm1"])
    h = ops.gelu(ops.linear(h, ff[0]["proj"]["weight"], ff[0]["proj"]["bias"]), approximate=False)
    h = ops.linear(h, ff[2]["weight"], ff[2]["bias"])
    return norm(h, p["norm2"])


def face_tokens(params, faces, face_heads: int, ops, basis=None):
    """Face crops (B, 3, F, size, size) of 4k+1 frames → face tokens (B, k + 2, heads + 1, dim):
    the k + 1 latent frames' tokens after a zero frame for the reference frame."""
    b, c, f, h, w = faces.shape
    crops = ops.reshape(ops.transpose(faces, (0, 2, 1, 3, 4)), (b * f, c, h, w))
    motion = motion_encoder(params["motion_encoder"], crops, ops, basis)
    face = face_encoder(params["face_encoder"], ops.reshape(motion, (b, f, motion.shape[-1])), face_heads, ops)
    return ops.concat([ops.zeros_like(face[:, :1]), face], axis=1)


class SegmentInputs(NamedTuple):
    """What a segment's every step attends to but no step changes: made once per segment by
    `segment_inputs`, not per forward (diffusers re-runs the motion and face encoders and the
    image and pose embeddings at every step)."""

    pose: object  # the pose embedding of each token (B, L, dim): zero on the reference frame's
    image: object  # the image context (B, 257, dim)
    face: object  # the face tokens (B, k + 2, heads + 1, dim)


class SegmentArrays(NamedTuple):
    """A segment's raw inputs, one row each, before the weights touch them: what the pipeline
    hands a backend's noise predictor, which makes the (cond, uncond) SegmentInputs from them
    with the expert's weights as it holds them (`cond_and_uncond`)."""

    pose_tokens: object  # (1, L − frame_tokens, patch volume × 16)
    image_features: object  # (1, 257, image_dim)
    faces: object  # (1, 3, 4k+1, size, size)
    blank_faces: object  # the same shape, all −1: the unconditional half's (None when nothing guides)
    frame_tokens: int


def cond_and_uncond(params, arrays: SegmentArrays, cfg: TransformerConfig, ops, guided: bool, basis=None):
    """(cond, uncond) SegmentInputs: the same pose and image, the face from the crops or from
    blank crops (None when no step guides: no unconditional half runs). `basis`: the motion
    basis made beforehand (animate_motion.motion_basis), for a compiled caller."""
    a = arrays
    cond = segment_inputs(params, a.pose_tokens, a.image_features, a.faces, a.frame_tokens, cfg, ops, basis)
    if not guided:
        return cond, None
    blank = face_tokens(params, a.blank_faces, cfg.animate.face_encoder_num_heads, ops, basis)
    return cond, cond._replace(face=blank)


def segment_inputs(
    params, pose_tokens, image_features, faces, frame_tokens: int, cfg: TransformerConfig, ops, basis=None
):
    """pose_tokens: the pose latents' patch tokens (B, L − frame_tokens, patch volume × 16), the
    frames after the reference frame; image_features: CLIP's (B, 257, image_dim); faces:
    (B, 3, 4k+1, size, size). The pose comes back aligned to all L tokens, zero on the reference
    frame's `frame_tokens` (diffusers adds it to latent frames 1…), so a rank holding any slice
    of the tokens takes the same slice of it."""
    pose = embed_patches({"patch_embedding": params["pose_patch_embedding"]}, pose_tokens, cfg, ops)
    first = ops.zeros((pose.shape[0], frame_tokens, pose.shape[2]), ops.dtype_name(pose), like=pose)
    return SegmentInputs(
        ops.concat([first, pose], axis=1),
        image_context(params, image_features, ops),
        face_tokens(params, faces, cfg.animate.face_encoder_num_heads, ops, basis),
    )


def forward(
    params,
    tokens,
    timestep,
    context,
    inputs: SegmentInputs,
    rope,
    cfg,
    ops,
    attention,
    run_blocks=None,
    face_runs=None,
    face_frames=None,
):
    """Noise prediction for one segment's patch tokens (B, L, patch volume × 36: noise ‖ mask ‖
    reference latents, as the I2V join), frame by frame; context: the text (B, 512, text_dim);
    `inputs`: the segment's `segment_inputs` for these rows and tokens.

    run_blocks: a block runner with the pass protocol (backends/torch/runners/block_pass.py:
    `open(blocks)` → a pass whose `run(block, h, stop=i)` runs blocks up to i), so the face
    adapters run between the blocks however the runner has the blocks' weights; or a layer
    runner `run(block, h, layers)` (ops.scan_layers, JAX's with the FSDP gather bound), which
    runs every block in one scan with the adapters chosen by layer; None: `ops.scan_layers`.
    Which latent frame each token is in, for the face adapters: `face_runs` (host (start, stop,
    frame) runs, animate_face.face_runs) or `face_frames` (a per-token int array, e.g. a traced
    shard's); neither: the whole sequence, frame by frame. Returns (B, L, patch volume × out_channels)."""
    x = embed_patches(params, tokens, cfg, ops) + inputs.pose
    temb, proj, text = condition(params, timestep, context, cfg, ops)

    def block(h, p):
        return transformer_block(p, h, (inputs.image, text), proj, rope, cfg, ops, attention)

    every = cfg.animate.inject_face_latents_blocks
    heads = cfg.num_attention_heads

    def adapt(adapter, h):
        return face_adapter(adapter, h, inputs.face, heads, ops, cfg.eps, face_runs, face_frames)

    if hasattr(run_blocks, "open"):  # a torch block runner (duck-typed: models/ knows no backend)
        with run_blocks.open(params["blocks"]) as blocks:
            for i, adapter in enumerate(params["face_adapter"]):
                x = blocks.run(block, x, stop=i * every + 1)  # … up to block i·k, then its face adapter
                x = x + adapt(adapter, x)
            x = blocks.run(block, x)
        return output_head(params, x, temb, cfg, ops)

    # A layer runner (ops.scan_layers; JAX's with the FSDP gather bound) runs every block in one
    # scan, adding after block i its group's adapter where i % k == 0. Scanning slices of the
    # stacked layers between the adapters would copy every layer's weights each step (31 GB of
    # temporaries a v5p chip at A14B 720p, the AOT compile showed); here each layer computes the
    # adapter of its group and keeps it or not: ~5 % more FLOPs at 720p.
    adapters = _stack(params["face_adapter"], ops)

    def block_then_adapter(carry, p):
        h, i = carry
        h = block(h, p)
        added = h + adapt(_index(adapters, i // every, ops), h)
        return ops.where(i % every == 0, added, h), i + 1

    x, _ = (run_blocks or ops.scan_layers)(block_then_adapter, (x, ops.zeros((), "int32", like=x)), params["blocks"])
    return output_head(params, x, temb, cfg, ops)


def _stack(trees: list, ops):
    """A list of equal trees → one tree of leaves stacked on a leading axis."""
    first = trees[0]
    if isinstance(first, dict):
        return {k: _stack([t[k] for t in trees], ops) for k in first}
    if isinstance(first, (list, tuple)):
        return type(first)(_stack([t[i] for t in trees], ops) for i in range(len(first)))
    return None if first is None else ops.stack(trees, axis=0)


def _index(tree, i, ops):
    """Entry i (a traced integer) of every leaf of a stacked tree: a one-hot row times the leaf
    (exact — one term is not zero —; `ops.take` wants host indices)."""
    if isinstance(tree, dict):
        return {k: _index(v, i, ops) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_index(v, i, ops) for v in tree)
    if tree is None:
        return None
    count, shape = tree.shape[0], tuple(tree.shape[1:])
    one_hot = ops.cast(ops.asarray(list(range(count)), "int32", like=tree) == i, ops.dtype_name(tree))
    flat = ops.reshape(tree, (count, -1))
    return ops.reshape(ops.matmul(ops.expand_dims(one_hot, 0), flat), shape)
