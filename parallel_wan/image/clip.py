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

import logging
from pathlib import Path

import numpy as np

log = logging.getLogger("parallel_wan")


class ClipImageEncoder:
    def __init__(self, encoder_dir: Path, processor_dir: Path, dtype, device):
        import torch
        from transformers import CLIPVisionModel
        from transformers.utils import logging as hf_logging

        self.processor = _processor_class().from_pretrained(processor_dir)
        # one log line for the whole load (pipeline/checkpoint.py), not transformers' progress bar
        bar = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()
        try:
            self.model = CLIPVisionModel.from_pretrained(encoder_dir, dtype=dtype).to(device).eval()
        finally:
            if bar:
                hf_logging.enable_progress_bar()
        self.device, self.torch = device, torch

    def features(self, image) -> np.ndarray:
        """A PIL image → (1, tokens, hidden) float32: the penultimate layer's hidden states."""
        torch = self.torch
        pixels = self.processor(images=image, return_tensors="pt")["pixel_values"]
        with torch.inference_mode():
            out = self.model(pixel_values=pixels.to(self.device, self.model.dtype), output_hidden_states=True)
        return out.hidden_states[-2].float().cpu().numpy()

    def release(self) -> None:
        self.model = None


def _processor_class():
    """transformers' CLIP processor without torchvision: newer transformers name the PIL one
    CLIPImageProcessorPil (and warn when CLIPImageProcessor falls back to it); the same
    arithmetic either way."""
    import transformers

    return getattr(transformers, "CLIPImageProcessorPil", None) or transformers.CLIPImageProcessor
