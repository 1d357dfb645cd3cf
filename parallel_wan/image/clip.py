"""The character image's CLIP features for Animate-14B: the checkpoint's `image_encoder/`
(transformers' CLIPVisionModel, ViT-H/14) fed by its `image_processor/` (transformers'
CLIPImageProcessor: the short side resized bicubically to 224, centre-cropped, CLIP's mean and
std), and the hidden states of the penultimate layer — what diffusers' WanAnimatePipeline
`encode_image` and the official code (`use_31_block`) read. The image goes in as the user gave
it, not letterboxed to the video's size as the VAE sees it (diffusers does the same).

Run once per video on the process that encodes text, then broadcast (257 × 1280 numbers) and
released, as the text encoder is. The tower is transformers' own class: this project adds no
second copy of a network a dependency already carries.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


class ClipImageEncoder:
    def __init__(self, encoder_dir: Path, processor_dir: Path, dtype, device):
        self.processor = _processor_class().from_pretrained(processor_dir)
        self.model = load_clip(Path(encoder_dir), dtype, device)
        self.device = device

    def features(self, image) -> np.ndarray:
        """A PIL image → (1, tokens, hidden) float32: the penultimate layer's hidden states."""
        import torch

        pixels = self.processor(images=image, return_tensors="pt")["pixel_values"]
        with torch.inference_mode():
            out = self.model(pixel_values=pixels.to(self.device, self.model.dtype), output_hidden_states=True)
        return out.hidden_states[-2].float().cpu().numpy()

    def release(self) -> None:
        self.model = None


def load_clip(folder: Path, dtype, device="cpu"):
    """transformers' CLIPVisionModel with the folder's weights, as the text encoder is loaded
    (text/umt5.py): built on the meta device and assigned the tensors our reader gives (cast in
    their one copy, checked for NaN/inf: checkpoints are untrusted), not `from_pretrained`
    (which would read the file a second way and cannot run on the fake-GPU harness's devices)."""
    import torch
    from transformers import CLIPVisionConfig, CLIPVisionModel

    from ..weights.safetensors_io import read_safetensors

    config = CLIPVisionConfig.from_pretrained(folder)
    with torch.device("meta"), _no_init():  # every weight comes from the file: no init ops run
        model = CLIPVisionModel(config)
    # onto the device tensor by tensor before assigning (no module-wide move afterwards)
    state = {name: t.to(device) for name, t in read_safetensors(folder, dtype=dtype).items()}
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    if missing or unexpected:
        raise ValueError(
            f"image encoder at {folder}: weights do not fit CLIPVisionModel (missing {missing[:3]}, unexpected "
            f"{unexpected[:3]}); expected a CLIP vision tower (Animate: ViT-H/14)"
        )
    # the one buffer the file has no copy of (transformers registers it non-persistent; where its
    # module sits moved between transformers versions)
    for name, buffer in list(model.named_buffers()):
        if name.endswith("position_ids") and buffer.is_meta:
            owner = model.get_submodule(name.rpartition(".")[0])
            owner.position_ids = torch.arange(buffer.shape[-1], device=device).expand((1, -1))
    left = [name for name, b in model.named_buffers() if b.is_meta]
    if left:
        raise ValueError(f"image encoder at {folder}: buffers {left} have no values (another transformers version?)")
    return model.eval().requires_grad_(False)


def _no_init():
    """transformers' context that skips its weight initialisers (they would run in-place ops
    on meta tensors for nothing, which a fake-tensor harness refuses); a null context on a
    transformers without one."""
    import contextlib

    try:
        from transformers.initialization import no_init_weights
    except ImportError:
        return contextlib.nullcontext()
    return no_init_weights()


def _processor_class():
    """transformers' CLIP processor without torchvision: newer transformers name the PIL one
    CLIPImageProcessorPil (and warn when CLIPImageProcessor falls back to it); the same
    arithmetic either way."""
    import transformers

    return getattr(transformers, "CLIPImageProcessorPil", None) or transformers.CLIPImageProcessor
