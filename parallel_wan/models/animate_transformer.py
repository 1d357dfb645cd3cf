"""Wan2.2-Animate-14B's DiT forward, written once against `ops` (issue 42; not yet wired into a
preset or the loop): the Wan DiT's blocks (models/transformer.py) with

- the pose: the pose video's latents embedded by their own patch embedding and added to the
  tokens of every latent frame but the first (the reference image's frame);
- the character image's CLIP features (Wan 2.1-style image context), attended in every
  block's cross-attention beside the text (`add_k_proj`/`add_v_proj`);
- the face: the face crops through the motion encoder (models/animate_motion.py) and the face
  encoder, a zero frame prepended for the reference frame, attended frame by frame by a face
  adapter after every `INJECT_EVERY`-th block (models/animate_face.py).

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

INJECT_EVERY = 5  # a face adapter after blocks 0, 5, 10, … (diffusers' inject_face_latents_blocks)
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


def face_tokens(params, faces, face_heads: int, ops):
    """Face crops (B, 3, F, size, size) of 4k+1 frames → face tokens (B, k + 2, heads + 1, dim):
    the k + 1 latent frames' tokens after a zero frame for the reference frame."""
    b, c, f, h, w = faces.shape
    crops = ops.reshape(ops.transpose(faces, (0, 2, 1, 3, 4)), (b * f, c, h, w))
    motion = motion_encoder(params["motion_encoder"], crops, ops)
    face = face_encoder(params["face_encoder"], ops.reshape(motion, (b, f, motion.shape[-1])), face_heads, ops)
    return ops.concat([ops.zeros_like(face[:, :1]), face], axis=1)


class SegmentInputs(NamedTuple):
    """What a segment's every step attends to but no step changes: made once per segment by
    `segment_inputs`, not per forward (diffusers re-runs the motion and face encoders and the
    image and pose embeddings at every step)."""

    pose: object  # the pose latents' embedded tokens (B, L − frame_tokens, dim)
    image: object  # the image context (B, 257, dim)
    face: object  # the face tokens (B, k + 2, heads + 1, dim)


def segment_inputs(params, pose_tokens, image_features, faces, cfg: TransformerConfig, ops, face_heads: int = 4):
    """pose_tokens: the pose latents' patch tokens (B, L − frame_tokens, patch volume × 16);
    image_features: CLIP's (B, 257, image_dim); faces: (B, 3, 4k+1, size, size)."""
    return SegmentInputs(
        embed_patches({"patch_embedding": params["pose_patch_embedding"]}, pose_tokens, cfg, ops),
        image_context(params, image_features, ops),
        face_tokens(params, faces, face_heads, ops),
    )


def forward(params, tokens, timestep, context, inputs: SegmentInputs, rope, frame_tokens: int, cfg, ops, attention):
    """Noise prediction for one segment's patch tokens (B, L, patch volume × 36: noise ‖ mask ‖
    reference latents, as the I2V join), frame by frame with `frame_tokens` tokens a frame;
    context: the text (B, 512, text_dim); `inputs`: the segment's `segment_inputs`.
    Returns (B, L, patch volume × out_channels)."""
    x = embed_patches(params, tokens, cfg, ops)
    x = ops.concat([x[:, :frame_tokens], x[:, frame_tokens:] + inputs.pose], axis=1)
    temb, proj, text = condition(params, timestep, context, cfg, ops)
    for i, block in enumerate(params["blocks"]):
        x = transformer_block(block, x, (inputs.image, text), proj, rope, cfg, ops, attention)
        if i % INJECT_EVERY == 0:
            x = x + face_adapter(
                params["face_adapter"][i // INJECT_EVERY], x, inputs.face, cfg.num_attention_heads, ops, cfg.eps
            )
    return output_head(params, x, temb, cfg, ops)
