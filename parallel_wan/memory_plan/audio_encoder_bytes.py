"""S2V's wav2vec2 audio encoder on the main rank while it encodes the speech (loaded beside the
text encoder, released with it before the loop): its bytes, counted with the text encoder's
phase."""

from __future__ import annotations

from ..models.registry import architecture

PLANNED_SECONDS = 60  # the planner reads no audio: a minute of speech, encoded in one pass as the official code does


def audio_encoder_bytes(spec) -> tuple[int, int]:
    """(weights, activations) of the architecture's wav2vec2 in the run's dtype for a minute of
    speech; (0, 0) for a model without one. Activations: the first convolution's output and its
    input (the widest tensors: 3,200 frames a second × conv_dim[0])."""
    fields = architecture(spec.model.architecture).audio_encoder
    if fields is None:
        return 0, 0
    width = 4 if spec.execution.dtype == "float32" else 2
    frames = PLANNED_SECONDS * 16000 // 5
    return wav2vec_parameters(fields) * width, 2 * frames * fields["conv_dim"][0] * width


def wav2vec_parameters(f: dict) -> int:
    """transformers' Wav2Vec2Model's parameter count from its Wav2Vec2Config fields (defaults as
    transformers' for the ones left out): the convolutional feature encoder (a LayerNorm per
    layer when feat_extract_norm is "layer"), the feature projection, the masked-frame vector,
    the weight-normed positional convolution and its norm, and per layer the attention, the
    feed-forward and two norms (tests/unit/test_plan.py holds it to the module's own count)."""
    d, m = f["hidden_size"], f["intermediate_size"]
    dims = list(f.get("conv_dim", (512,) * 7))
    kernels = list(f.get("conv_kernel", (10, 3, 3, 3, 3, 2, 2)))
    bias = f.get("conv_bias", False)
    layer_norms = f.get("feat_extract_norm", "group") == "layer"
    total, c_in = 0, 1
    for i, (c, k) in enumerate(zip(dims, kernels)):
        total += c * c_in * k + (c if bias else 0)
        total += 2 * c if layer_norms or i == 0 else 0  # group norm: the first layer only
        c_in = c
    total += 2 * dims[-1] + dims[-1] * d + d  # feature projection: norm and linear
    total += d  # masked_spec_embed
    kernel, groups = f.get("num_conv_pos_embeddings", 128), f.get("num_conv_pos_embedding_groups", 16)
    total += d * (d // groups) * kernel + kernel + d  # positional conv: weight_v, weight_g, bias
    total += 2 * d  # the encoder's norm
    layer = 4 * (d * d + d) + 2 * d + (d * m + m) + (m * d + d) + 2 * d
    return total + f["num_hidden_layers"] * layer
