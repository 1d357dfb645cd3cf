"""The parameters S2V-14B adds to the Wan DiT (transformer_shapes.py) and their shapes, under the
official `WanModel_S2V` names (there is no diffusers S2V model): the pose condition's patch
embedding, the causal audio encoder, the audio injectors (a cross-attention and an AdaIN per
injected block), the token-kind embedding and the frame packer's three patch embeddings
(tests/unit/test_s2v_model.py holds them equal to the official model's)."""

from __future__ import annotations

from .s2v_config import COND_MASK_ROWS, WAV2VEC_LAYERS
from .transformer_config import TransformerConfig

# the frame packer's patch embeddings, nearest motion frames first: (name, kernel = stride)
FRAME_PACKER = (("proj", (1, 2, 2)), ("proj_2x", (2, 4, 4)), ("proj_4x", (4, 8, 8)))


def s2v_shapes(cfg: TransformerConfig) -> dict[str, tuple[int, ...]]:
    s, dim = cfg.s2v, cfg.dim
    latent = cfg.out_channels
    shapes: dict[str, tuple[int, ...]] = {
        "cond_encoder.weight": (dim, s.cond_dim, *cfg.patch_size),
        "cond_encoder.bias": (dim,),
        "trainable_cond_mask.weight": (COND_MASK_ROWS, dim),
        "casual_audio_encoder.weights": (1, WAV2VEC_LAYERS, 1, 1),
    }
    e = "casual_audio_encoder.encoder."
    convs = {
        "conv1_local": (dim // 4 * s.num_audio_token, s.audio_dim),
        "conv1_global": (dim // 4, s.audio_dim),
        "conv2": (dim // 2, dim // 4),
        "conv3": (dim, dim // 2),
    }
    for name, (c_out, c_in) in convs.items():
        shapes[f"{e}{name}.conv.weight"], shapes[f"{e}{name}.conv.bias"] = (c_out, c_in, 3), (c_out,)
    shapes[e + "final_linear.weight"], shapes[e + "final_linear.bias"] = (dim, dim), (dim,)
    shapes[e + "padding_tokens"] = (1, 1, 1, dim)
    for i in range(len(s.audio_inject_layers)):
        a = f"audio_injector.injector.{i}."
        for proj in ("q", "k", "v", "o"):
            shapes[f"{a}{proj}.weight"], shapes[f"{a}{proj}.bias"] = (dim, dim), (dim,)
        shapes[a + "norm_q.weight"] = shapes[a + "norm_k.weight"] = (dim,)
        n = f"audio_injector.injector_adain_layers.{i}.linear."
        shapes[n + "weight"], shapes[n + "bias"] = (2 * dim, dim), (2 * dim,)
    for name, kernel in FRAME_PACKER:
        shapes[f"frame_packer.{name}.weight"] = (dim, latent, *kernel)
        shapes[f"frame_packer.{name}.bias"] = (dim,)
    return shapes
