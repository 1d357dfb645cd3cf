"""The official Wan2.2-Animate-14B folder (issue 42): its transformer's tensors (the motion
encoder's Sequential indices, 1×C×1×1 activation biases and blur buffers, the face encoder's
wrapped convolutions, the face adapters' fused keys and values) and its open-clip CLIP file map
onto exactly the parameters we hold — checked against the official classes themselves: the 14B
model and ViT-H/14 built on the meta device (every name and shape, and the config we derive from
the shapes equals our preset's), and small official modules with random weights loaded through
our views into diffusers' modules, whose outputs must equal the official ones (fp32, rel 1e-5:
the same arithmetic in another order). The whole tiny model in both layouts renders the same
video bit for bit (tests/references/test_animate.py)."""

from __future__ import annotations

import math
from pathlib import Path

import torch
from harness.official_animate import official_animate

from parallel_wan.weights.safetensors_header import TensorInfo
from parallel_wan.weights.transformer_keymap import official_sources

ITEM = {torch.float32: ("F32", 4), torch.bfloat16: ("BF16", 2)}


def infos_of(state: dict, path: Path | None = None) -> dict:
    """TensorInfo per tensor, as a safetensors file would describe them (written when `path`)."""
    if path is not None:
        from safetensors.torch import save_file

        from parallel_wan.weights.safetensors_header import read_header

        save_file({k: v.contiguous() for k, v in state.items()}, path)
        return read_header(path)
    out, start = {}, 0
    for name, tensor in state.items():
        code, size = ITEM[tensor.dtype]
        end = start + math.prod(tensor.shape) * size
        out[name] = TensorInfo(Path("meta"), code, tuple(tensor.shape), start, end, name)
        start = end
    return out


def loaded(views: dict, path: Path) -> dict:
    from parallel_wan.weights.safetensors_io import map_files

    mapped = map_files([path])[path]
    return {name: mapped.view(info).clone() for name, info in views.items()}


def flash_attn_func(q, k, v):
    """flash-attn's contract (B, S, heads, head_dim) by PyTorch's attention in float32."""
    out = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    return out.transpose(1, 2)


def test_the_14b_official_tensors_are_exactly_the_parameters_we_hold():
    from parallel_wan.models.registry import ARCHITECTURES
    from parallel_wan.models.transformer_config import TransformerConfig
    from parallel_wan.models.transformer_shapes import param_shapes

    model_animate, *_ = official_animate()
    with torch.device("meta"):
        official = model_animate.WanAnimateModel()
    state = official.state_dict()
    assert len(state) == 1441  # 1427 parameters and 14 blur kernels
    shapes = {name: info.shape for name, info in official_sources(infos_of(state)).items()}
    config = TransformerConfig.from_official({**official.config, "_class_name": "WanAnimateModel"}, shapes)
    ours = ARCHITECTURES["wan2.2_animate_14b"].transformer
    assert config == ours
    assert shapes == param_shapes(ours)  # every name and shape, nothing missing, nothing extra


def test_the_official_clip_file_is_a_vit_h_14_transformers_builds():
    from transformers import CLIPVisionConfig, CLIPVisionModel

    from parallel_wan.models.registry import ARCHITECTURES
    from parallel_wan.weights.clip_keymap import to_transformers, vision_config

    *_, clip = official_animate()
    with torch.device("meta"):
        official = clip.XLMRobertaCLIP(
            embed_dim=1024, image_size=224, patch_size=14, vision_dim=1280, vision_mlp_ratio=4, vision_heads=16,
            vision_layers=32, vision_pool="token", activation="gelu", vocab_size=250002, max_text_len=514,
            type_size=1, pad_id=1, text_dim=1024, text_heads=16, text_layers=24, text_post_norm=True,
            text_dropout=0.1, attn_dropout=0.0, proj_dropout=0.0, embedding_dropout=0.0,
        )  # fmt: skip
    state = official.state_dict()
    config = vision_config({k: tuple(v.shape) for k, v in state.items()})
    assert {k: config[k] for k in ARCHITECTURES["wan2.2_animate_14b"].image_encoder} == ARCHITECTURES[
        "wan2.2_animate_14b"
    ].image_encoder
    with torch.device("meta"):
        tower = CLIPVisionModel(CLIPVisionConfig(**config))
    mapped = {k: tuple(v.shape) for k, v in to_transformers(state).items()}
    want = {k: tuple(v.shape) for k, v in tower.state_dict().items() if not k.endswith("position_ids")}
    assert mapped == want


def test_the_official_motion_encoder_face_encoder_and_adapter_load_into_diffusers_equal(tmp_path):
    """Small official modules, random weights, written as a safetensors file and read back
    through our views (split, reshaped, blur buffers skipped) into diffusers' modules: the
    motion vectors, face tokens and adapter outputs equal the official ones."""
    from diffusers.models.transformers.transformer_wan_animate import (
        WanAnimateFaceBlockCrossAttention,
        WanAnimateFaceEncoder,
        WanAnimateMotionEncoder,
    )

    _, motion, face, _ = official_animate()
    torch.manual_seed(0)
    dim, heads = 64, 4
    official = torch.nn.Module()
    official.motion_encoder = motion.Generator(size=16, style_dim=32, motion_dim=8)
    official.face_encoder = face.FaceEncoder(in_dim=32, hidden_dim=dim, num_heads=4)
    official.face_adapter = face.FaceAdapter(hidden_dim=dim, heads_num=heads, num_adapter_layers=2)
    with torch.no_grad():
        for p in official.parameters():  # the official init leaves some at zero: every weight must matter
            p.add_(0.05 * torch.randn_like(p))
    state = official.state_dict()
    views = official_sources(infos_of(state, tmp_path / "official.safetensors"))
    assert not any(".kernel" in info.name and name for name, info in views.items())  # blurs: constants
    weights = loaded(views, tmp_path / "official.safetensors")

    ours = torch.nn.Module()
    channels = {str(s): 512 for s in (4, 8, 16)}  # the official encoder's table at these sizes
    ours.motion_encoder = WanAnimateMotionEncoder(size=16, style_dim=32, motion_dim=8, out_dim=512, channels=channels)
    ours.face_encoder = WanAnimateFaceEncoder(in_dim=32, out_dim=dim, hidden_dim=1024, num_heads=4)
    ours.face_adapter = torch.nn.ModuleList(
        WanAnimateFaceBlockCrossAttention(dim, heads=heads, dim_head=dim // heads) for _ in range(2)
    )
    ours.load_state_dict(weights, strict=True)

    faces = torch.rand(3, 3, 16, 16) * 2 - 1
    with torch.no_grad():
        want, got = official.motion_encoder.get_motion(faces), ours.motion_encoder(faces)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        vectors = torch.randn(1, 5, 32)
        want, got = official.face_encoder(vectors), ours.face_encoder(vectors)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        x, tokens = torch.randn(1, 3 * 6, dim), torch.randn(1, 3, 5, dim)
        face.flash_attn_func = flash_attn_func  # no flash-attn on a CPU
        for i in range(2):
            want = official.face_adapter.fuser_blocks[i](x, tokens)
            got = ours.face_adapter[i](x, tokens)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
