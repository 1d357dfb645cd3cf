"""The character image's CLIP features for Animate-14B: the checkpoint's `image_encoder/`
(transformers' CLIPVisionModel, ViT-H/14; the official layout's open-clip .pth is read into the
same class, weights/clip_keymap.py) fed by its `image_processor/` (transformers'
CLIPImageProcessor: the short side resized bicubically to 224, centre-cropped, CLIP's mean and
std — the same processor for the official layout, which has none; the official code stretches
the image to 224 × 224 instead, the same for a square image), and the hidden states of the
penultimate layer — what diffusers' WanAnimatePipeline `encode_image` and the official code
(`use_31_block`) read. The image goes in as the user gave
it, not letterboxed to the video's size as the VAE sees it (diffusers does the same).

Run once per video on the process that encodes text, then broadcast (257 × 1280 numbers) and
released, as the text encoder is. The tower is transformers' own class: this project adds no
second copy of a network a dependency already carries.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


class ClipImageEncoder:
    def __init__(self, encoder: Path, processor_dir: Path | None, dtype, device):
        """`encoder`: the diffusers layout's image_encoder/ folder, or the official layout's CLIP
        .pth; `processor_dir`: image_processor/, or None (the official layout has none: CLIP's
        own processor at the tower's size — the values diffusers' Animate folder carries)."""
        self.model = load_clip(Path(encoder), dtype, device)
        if processor_dir is not None:
            self.processor = _processor_class().from_pretrained(processor_dir)
        else:
            side = self.model.config.image_size
            self.processor = _processor_class()(size={"shortest_edge": side}, crop_size={"height": side, "width": side})
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

    if folder.is_file():  # the official layout's open-clip .pth (weights/clip_keymap.py)
        config, state = _official(folder, dtype)
    else:
        config, state = CLIPVisionConfig.from_pretrained(folder), read_safetensors(folder, dtype=dtype)
    with torch.device("meta"), _no_init():  # every weight comes from the file: no init ops run
        model = CLIPVisionModel(config)
    # onto the device tensor by tensor before assigning (no module-wide move afterwards), under
    # the names of this transformers' class: a released file (transformers 4) says
    # `vision_model.embeddings…`, transformers 5's CLIPVisionModel holds `embeddings…`
    state = {_as_module_name(name, model): t.to(device) for name, t in state.items()}
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


PREFIX = "vision_model."


def _as_module_name(name: str, model) -> str:
    nested = hasattr(model, "vision_model")  # transformers 4's CLIPVisionModel wraps the tower
    if nested and not name.startswith(PREFIX):
        return PREFIX + name
    return name[len(PREFIX) :] if not nested and name.startswith(PREFIX) else name


def _official(path: Path, dtype):
    """(CLIPVisionConfig, state) of the official CLIP file: its vision tower under transformers'
    names, cast; a NaN/inf in it is refused, as in every weight."""
    from transformers import CLIPVisionConfig

    from ..weights.clip_keymap import to_transformers, vision_config
    from ..weights.finite import non_finite, refuse
    from ..weights.safetensors_io import load_pth_mapped, torch_dtype

    stored = load_pth_mapped(path)
    config = CLIPVisionConfig(**vision_config({k: tuple(v.shape) for k, v in stored.items()}))
    for name, tensor in stored.items():  # by the file's own names, so a message names what it holds
        if name.startswith("visual.") and tensor.is_floating_point() and (bad := non_finite(tensor)):
            raise refuse(str(path), name, bad, tensor.numel())
    target = torch_dtype(dtype)
    return config, {name: t.to(target or t.dtype) for name, t in to_transformers(stored).items()}


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
