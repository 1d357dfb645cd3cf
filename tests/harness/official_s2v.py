"""The official Wan 2.2 speech-to-video code (`wan22`'s `wan/speech2video.py` and
`wan/modules/s2v/`) imported on a CPU machine, as the S2V reference tests run it.

The package's `__init__` imports every task and their third-party packages; here only the S2V
files load (a bare `wan` package over the installed sources). What they import but never use on
the paths the tests run is stubbed for the import only and removed again: `decord` (reading a
pose video: `_VideoReader`, the same calls over imageio), `librosa` (its `load` is given per test: the audio
file read at 16 kHz), `torchvision` (the reference image's resize and crop, which our tests make
no-ops by giving the image at the output size; `identity_transforms` checks that they are).
flash-attn has no CPU build: `cpu_flash_attention` is PyTorch's attention in float32 with the
same arguments, and refuses key lengths it would have to mask (the tests' never are)."""

from __future__ import annotations

import importlib.util
import sys
import types
from unittest import mock

import numpy as np
import torch

from .official_wan import official_wan_dir

_MODULES: dict = {}


def cpu_flash_attention(
    q,
    k,
    v,
    q_lens=None,
    k_lens=None,
    dropout_p=0.0,
    softmax_scale=None,
    q_scale=None,
    causal=False,
    window_size=(-1, -1),
    deterministic=False,
    dtype=None,
    version=None,
):
    """flash_attention's contract (q, k, v: (B, L, heads, head_dim)) in float32 on the CPU."""
    assert not causal and tuple(window_size) == (-1, -1) and dropout_p == 0.0
    if k_lens is not None:
        assert bool((k_lens == k.shape[1]).all()), "a masked key length: not what the reference tests run"
    out = torch.nn.functional.scaled_dot_product_attention(
        q.float().transpose(1, 2), k.float().transpose(1, 2), v.float().transpose(1, 2), scale=softmax_scale
    )
    return out.transpose(1, 2).to(q.dtype)


class _Identity:
    """A torchvision transform that must not change the image (size checked)."""

    def __init__(self, size):
        self.size = size

    def __call__(self, image):
        h, w = tuple(image.shape[-2:]) if isinstance(image, torch.Tensor) else image.size[::-1]
        want = (self.size, self.size) if isinstance(self.size, int) else tuple(self.size)
        ok = min(w, h) == want[0] if isinstance(self.size, int) else (h, w) == want
        assert ok, f"the reference test's image must already be the output size, got {w}x{h} for {self.size}"
        return image


class _VideoReader:
    """decord.VideoReader's calls the official code makes (average fps, length, a batch of
    frames as numpy), over imageio's ffmpeg reader: an adapter, no logic of its own."""

    def __init__(self, path):
        import imageio.v3 as iio

        self.fps = float(iio.immeta(path, plugin="FFMPEG")["fps"])
        self.frames = np.stack([np.asarray(f)[..., :3] for f in iio.imiter(path, plugin="FFMPEG")])

    def get_avg_fps(self):
        return self.fps

    def __len__(self):
        return len(self.frames)

    def get_batch(self, indices):
        import types

        return types.SimpleNamespace(asnumpy=lambda: self.frames[list(indices)])


def _to_tensor(image):
    return torch.from_numpy(np.asarray(image, np.float32).transpose(2, 0, 1) / 255.0)


def official_s2v():
    """(speech2video module, model_s2v module, audio_encoder module) of the installed `wan22`."""
    if _MODULES:
        return _MODULES["s2v"], _MODULES["model"], _MODULES["audio"]
    # import what the official files import before the stubs exist, so transformers and diffusers
    # decide which optional packages they have without seeing the stubs
    import diffusers.loaders  # noqa: F401
    import diffusers.models.attention  # noqa: F401
    import diffusers.models.modeling_utils  # noqa: F401
    import transformers  # noqa: F401
    from transformers import Wav2Vec2ForCTC, Wav2Vec2Processor  # noqa: F401

    root = official_wan_dir()
    package = types.ModuleType("wan")
    package.__path__ = [str(root)]
    stubs = {"wan": package}
    for name in ("decord", "librosa", "torchvision", "torchvision.transforms", "torchvision.transforms.functional"):
        stubs[name] = types.ModuleType(name)
    stubs["decord"].VideoReader = _VideoReader
    transforms = stubs["torchvision.transforms"]
    transforms.Resize, transforms.CenterCrop, transforms.ToTensor = _Identity, _Identity, lambda: _to_tensor
    stubs["torchvision"].transforms = transforms
    transforms.functional = stubs["torchvision.transforms.functional"]
    assert importlib.util.find_spec("einops") is not None, "the official S2V model imports einops (the test extra)"
    with mock.patch.dict(sys.modules, stubs), mock.patch("torch.cuda.current_device", lambda: "cpu"):
        import wan.modules.s2v.audio_encoder as audio
        import wan.modules.s2v.model_s2v as model
        import wan.speech2video as s2v

        model.flash_attention = cpu_flash_attention
        sys.modules["wan.modules.model"].flash_attention = cpu_flash_attention
    _MODULES.update(s2v=s2v, model=model, audio=audio)
    return s2v, model, audio
