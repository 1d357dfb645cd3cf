"""Animate's CLIP image encoder on the main rank while it encodes the character image (loaded
beside the text encoder, released with it before the loop): its bytes, counted with the text
encoder's phase."""

from __future__ import annotations

from ..models.registry import architecture


def image_encoder_bytes(spec) -> tuple[int, int]:
    """(weights, activations) of the architecture's CLIP vision tower in the run's dtype (2
    bytes: bf16/fp16; 4: float32) for one image; (0, 0) for a model without one. Activations:
    the widest layer's working set (the MLP's intermediate and the residual) over its tokens."""
    fields = architecture(spec.model.architecture).image_encoder
    if fields is None:
        return 0, 0
    width = 4 if spec.execution.dtype == "float32" else 2
    tokens = (fields["image_size"] // fields["patch_size"]) ** 2 + 1
    return clip_parameters(fields) * width, tokens * (fields["intermediate_size"] + 4 * fields["hidden_size"]) * width


def clip_parameters(f: dict) -> int:
    """transformers' CLIPVisionModel's parameter count from its CLIPVisionConfig fields: the patch
    embedding, class and position embeddings, the two outer norms, and per layer the four
    attention projections with biases, the MLP and two norms (tests/unit/test_plan.py holds it
    to the module's own count)."""
    d, m, p = f["hidden_size"], f["intermediate_size"], f["patch_size"]
    tokens = (f["image_size"] // p) ** 2 + 1
    embeddings = 3 * p * p * d + d + tokens * d
    layer = 4 * (d * d + d) + (d * m + m) + (m * d + d) + 4 * d
    return embeddings + 4 * d + f["num_hidden_layers"] * layer
