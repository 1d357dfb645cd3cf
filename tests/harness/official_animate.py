"""The official Wan 2.2 Animate model code (`wan22`'s `wan/modules/animate/`) imported on a CPU
machine: only its files load (a bare `wan` package over the installed sources, as
official_s2v.py does); `torchvision`, which its CLIP file imports for transforms the tests never
call, is stubbed for the import only. The face adapter's attention calls flash-attn, which has no
CPU build (and its "torch" mode forgets the layout): the tests give it PyTorch's attention under
flash-attn's contract."""

from __future__ import annotations

import sys
import types
from unittest import mock

from .official_wan import official_wan_dir

_MODULES: dict = {}


def official_animate():
    """(model_animate module, motion_encoder module, face_blocks module, clip module)."""
    if not _MODULES:
        import diffusers.loaders  # noqa: F401 (decided before the stubs exist)
        import diffusers.models.modeling_utils  # noqa: F401
        import transformers  # noqa: F401

        package = types.ModuleType("wan")
        package.__path__ = [str(official_wan_dir())]
        stubs = {"wan": package, "torchvision": types.ModuleType("torchvision")}
        stubs["torchvision.transforms"] = stubs["torchvision"].transforms = types.ModuleType("torchvision.transforms")
        with mock.patch.dict(sys.modules, stubs), mock.patch("torch.cuda.current_device", lambda: "cpu"):
            import wan.modules.animate.clip as clip
            import wan.modules.animate.face_blocks as face_blocks
            import wan.modules.animate.model_animate as model
            import wan.modules.animate.motion_encoder as motion
        _MODULES.update(model=model, motion=motion, face=face_blocks, clip=clip)
    return _MODULES["model"], _MODULES["motion"], _MODULES["face"], _MODULES["clip"]
