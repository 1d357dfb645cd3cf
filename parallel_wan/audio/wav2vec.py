"""Speech → wav2vec2 features for S2V-14B: the checkpoint's `wav2vec2-large-xlsr-53-english/`
(transformers' Wav2Vec2Model and its feature extractor, which normalises the samples), all 25
hidden states (the input embedding and the 24 layers' outputs — the official
`extract_audio_feat(return_all_layers=True)`), resampled from the model's 50 per second to 30 per
second by linear interpolation with aligned corners, as the official `linear_interpolation`.

The tower is transformers' own class, loaded with `from_pretrained` from the local folder (its
weight-norm convolution's stored names differ between transformers versions; transformers maps
them) and then checked for NaN/inf, as every checkpoint we read is untrusted. Run once per video
on the process that encodes text, then broadcast (25 × frames × 1024 numbers) and released."""

from __future__ import annotations

from pathlib import Path

import numpy as np

MODEL_RATE = 50  # wav2vec2's frames per second of 16 kHz audio (a 320-sample stride)
VIDEO_RATE = 30  # the official audio encoder's frames per second before the clips are sampled


class Wav2VecEncoder:
    def __init__(self, folder: Path, dtype, device="cpu"):
        from transformers import Wav2Vec2FeatureExtractor

        self.extractor = Wav2Vec2FeatureExtractor.from_pretrained(folder)
        self.model = load_wav2vec(Path(folder), dtype, device)
        self.device = device

    def features(self, samples: np.ndarray) -> np.ndarray:
        """16 kHz mono samples → (25, frames at 30 per second, width) float32."""
        import torch

        values = self.extractor(samples, sampling_rate=16000, return_tensors="pt").input_values
        with torch.inference_mode():
            out = self.model(values.to(self.device, self.model.dtype), output_hidden_states=True)
            feat = torch.cat(out.hidden_states).float()  # (25, T, width)
            frames = int(feat.shape[1] / float(MODEL_RATE) * VIDEO_RATE)
            feat = torch.nn.functional.interpolate(feat.transpose(1, 2), size=frames, mode="linear", align_corners=True)
        return feat.transpose(1, 2).cpu().numpy()

    def release(self) -> None:
        self.model = None


def load_wav2vec(folder: Path, dtype, device="cpu"):
    """transformers' Wav2Vec2Model with the folder's weights (a Wav2Vec2ForCTC checkpoint's
    `wav2vec2.` tower; its CTC head is not read), every floating weight checked finite."""
    from transformers import Wav2Vec2Model

    from ..weights.finite import non_finite, refuse

    if not (folder / "config.json").is_file():
        raise ValueError(f"audio encoder at {folder}: no config.json (expected the wav2vec2 folder S2V-14B ships)")
    try:
        with _quiet():  # its CTC head is left out on purpose: no load report, no progress bar
            model = Wav2Vec2Model.from_pretrained(folder, torch_dtype=dtype, local_files_only=True)
    except (OSError, ValueError) as e:
        raise ValueError(f"audio encoder at {folder} cannot be read: {str(e).splitlines()[0]}") from None
    for name, tensor in model.state_dict().items():
        bad = non_finite(tensor)
        if bad:
            raise refuse(f"audio encoder at {folder}", name, bad, tensor.numel())
    return model.to(device).eval().requires_grad_(False)


def _quiet():
    """transformers' logging at errors only and its progress bars off, for one load."""
    import contextlib

    from transformers.utils import logging as hf_logging

    @contextlib.contextmanager
    def quiet():
        level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        try:
            yield
        finally:
            hf_logging.set_verbosity(level)
            if bars:
                hf_logging.enable_progress_bar()

    return quiet()
