"""Checkpoint reading: name maps against independent oracles, both layouts to the same
weights bit for bit, the fused bf16 cast, and the error messages users see."""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path
from unittest import mock

import pytest
import safetensors.torch
import torch
from harness.official_wan import official_wan_dir
from harness.pth import read_pth

from parallel_wan.builtin.tiny import build_tiny, write_checkpoint
from parallel_wan.models.transformer import keeps_fp32 as transformer_keep_fp32
from parallel_wan.models.transformer_config import TransformerConfig
from parallel_wan.weights import t5_keymap, transformer_keymap, tree
from parallel_wan.weights.layout import CheckpointError, describe_checkpoint
from parallel_wan.weights.loader import load_transformer, load_vae
from parallel_wan.weights.safetensors_io import read_safetensors, tensor_index


def _official_module(name: str):
    """Load one file of the official `wan/modules` without importing the package (which needs
    flash_attn and CUDA): its relative imports are stubbed, CUDA defaults faked at import."""
    package = "wan_official"
    if package not in sys.modules:
        pkg = types.ModuleType(package)
        pkg.__path__ = []
        sys.modules[package] = pkg
        stubs = {"tokenizers": {"HuggingfaceTokenizer": None}, "attention": {"flash_attention": None}}
        for stub, attrs in stubs.items():
            module = types.ModuleType(f"{package}.{stub}")
            module.__dict__.update(attrs)
            sys.modules[module.__name__] = module
    full = f"{package}.{name}"
    if full not in sys.modules:
        spec = importlib.util.spec_from_file_location(full, official_wan_dir() / "modules" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[full] = module
        with mock.patch("torch.cuda.current_device", lambda: "cpu"):
            spec.loader.exec_module(module)
    return sys.modules[full]


@pytest.fixture(scope="module")
def tiny():
    return {kind: build_tiny(kind, seed=3) for kind in ("t2v", "i2v", "ti2v")}


@pytest.fixture(scope="module")
def folders(tiny, tmp_path_factory):
    out = {}
    for kind, model in tiny.items():
        for layout in ("diffusers", "official"):
            out[kind, layout] = write_checkpoint(model, tmp_path_factory.mktemp(f"{kind}_{layout}"), layout)
    return out


# ------------------------------------------------------------------------------ name maps
@pytest.mark.parametrize("kind", ["t2v", "i2v", "ti2v"])
def test_transformer_map_agrees_with_diffusers_converter(tiny, kind):
    from diffusers.loaders.single_file_utils import convert_wan_transformer_to_diffusers

    state = tiny[kind].transformer.state_dict()
    official = transformer_keymap.diffusers_to_official(state)
    back = convert_wan_transformer_to_diffusers(dict(official))
    assert set(back) == set(state)
    assert all(back[name] is state[name] for name in state)
    assert transformer_keymap.official_to_diffusers(official) == state


def test_official_names_load_strictly_into_official_wan_model(tiny):
    model_py = _official_module("model")
    expert = tiny["i2v"].transformer
    config = TransformerConfig.from_diffusers(dict(expert.config)).to_official("i2v")
    config.pop("_class_name")
    official = model_py.WanModel(**config)
    # strict: every name and shape of the official module, no more, no fewer
    official.load_state_dict(transformer_keymap.diffusers_to_official(expert.state_dict()), strict=True)


def test_transformer_map_rejects_unknown_names():
    with pytest.raises(KeyError, match="img_proj"):
        transformer_keymap.official_to_diffusers_name("img_proj.0.weight")
    with pytest.raises(KeyError, match="q_img"):
        transformer_keymap.official_to_diffusers_name("blocks.0.cross_attn.q_img.weight")
    # the image branch's names are Animate-14B's (and Wan 2.1 I2V's, refused by the shape check)
    assert transformer_keymap.official_to_diffusers_name("blocks.0.cross_attn.k_img.weight") == (
        "blocks.0.attn2.add_k_proj.weight"
    )


def test_t5_map_gives_official_encoder_the_same_hidden_states(tiny):
    t5 = _official_module("t5")
    hf = tiny["t2v"].text_encoder
    official_state = t5_keymap.transformers_to_official(hf.state_dict())
    cfg = t5_keymap.umt5_config_from_official({k: tuple(v.shape) for k, v in official_state.items()})
    encoder = t5.T5Encoder(
        cfg["vocab_size"],
        cfg["d_model"],
        cfg["d_kv"] * cfg["num_heads"],
        cfg["d_ff"],
        cfg["num_heads"],
        cfg["num_layers"],
        cfg["relative_attention_num_buckets"],
        shared_pos=False,
        dropout=0.0,
    ).eval()
    encoder.load_state_dict(official_state, strict=True)
    torch.manual_seed(0)
    # 200 tokens reach the logarithmic relative-position buckets (exact below 8, log up to 128)
    ids = torch.randint(3, cfg["vocab_size"], (2, 200))
    mask = torch.ones_like(ids)
    mask[1, 37:] = 0
    with torch.no_grad():
        ours, theirs = hf(ids, mask).last_hidden_state, encoder(ids, mask)
    # fp32, same math in a different op order: relative error ≤ 1e-5
    assert ((ours - theirs).norm() / theirs.norm()).item() <= 1e-5
    assert t5_keymap.official_to_transformers(official_state).keys() == set(hf.state_dict()) - {
        "encoder.embed_tokens.weight"
    }


# ------------------------------------------------------------------------------ both layouts
def _flat(params) -> dict:
    return tree.flatten(params)


def _assert_bitwise(a: dict, b: dict):
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        assert torch.equal(a[name], b[name]), name


@pytest.mark.parametrize("kind", ["t2v", "i2v", "ti2v"])
def test_both_layouts_load_identical_weights(tiny, folders, kind):
    model = tiny[kind]
    diffusers, official = (describe_checkpoint(folders[kind, layout]) for layout in ("diffusers", "official"))
    assert diffusers.experts.keys() == official.experts.keys()
    assert diffusers.transformers == official.transformers
    assert diffusers.vae_config == official.vae_config and diffusers.vae_kind == official.vae_kind
    originals = {"high_noise": model.transformer, "low_noise": model.transformer_2, "single": model.transformer}
    for expert in diffusers.experts:
        a = _flat(load_transformer(diffusers, expert, dtype="float32"))
        b = _flat(load_transformer(official, expert, dtype="float32"))
        _assert_bitwise(a, b)
        _assert_bitwise(a, {k: v for k, v in originals[expert].state_dict().items()})
    (cfg_a, vae_a), (cfg_b, vae_b) = load_vae(diffusers), load_vae(official)
    assert cfg_a == cfg_b
    _assert_bitwise(_flat(vae_a), _flat(vae_b))
    _assert_bitwise(_flat(vae_a), dict(model.vae.state_dict()))


def test_param_tree_indexes_layers_and_ffn_positions(folders):
    params = load_transformer(folders["t2v", "official"], "low_noise", dtype="float32")
    assert len(params["blocks"]) == 2
    block = params["blocks"][1]
    assert block["ffn"]["net"][0]["proj"]["weight"].shape == (256, 128)
    assert block["ffn"]["net"][1] is None  # diffusers' Dropout slot keeps net[2] at index 2
    assert block["attn1"]["to_out"][0]["weight"].shape == (128, 128)
    assert params["scale_shift_table"].shape == (1, 2, 128)


def test_unknown_expert_is_named(folders):
    with pytest.raises(ValueError, match="expert='low_noise'.*single"):
        load_transformer(folders["ti2v", "diffusers"], "low_noise")


# ------------------------------------------------------------------------------ dtype cast
def test_bf16_cast_matches_plain_safetensors_load(folders):
    folder = folders["t2v", "diffusers"] / "transformer"
    ours = _flat(load_transformer(folder.parent, "high_noise", dtype="bfloat16", keep_fp32=transformer_keep_fp32))
    plain = {}
    for file in sorted(folder.glob("*.safetensors")):
        plain.update(safetensors.torch.load_file(file))
    kept = {n for n in plain if transformer_keep_fp32(n)}
    assert "blocks.0.norm2.weight" in kept and "condition_embedder.time_embedder.linear_1.weight" in kept
    assert "scale_shift_table" in kept and "blocks.0.attn1.to_q.weight" not in kept
    expected = {n: (t if n in kept else t.to(torch.bfloat16)) for n, t in plain.items()}
    _assert_bitwise(ours, expected)


def test_bf16_file_is_read_without_widening(tmp_path):
    torch.manual_seed(0)
    stored = {"a": torch.randn(64, 32).to(torch.bfloat16), "b": torch.randn(7).to(torch.bfloat16)}
    safetensors.torch.save_file(stored, tmp_path / "w.safetensors")
    torch.save(stored, tmp_path / "w.pth")
    for read in (
        read_safetensors(tmp_path / "w.safetensors", dtype="bfloat16"),
        read_pth(tmp_path / "w.pth", "bfloat16"),
    ):
        _assert_bitwise(read, stored)
    widened = read_safetensors(tmp_path / "w.safetensors", dtype="float32", keep_fp32=None)
    _assert_bitwise(widened, {k: v.float() for k, v in stored.items()})
    # the result owns its memory: it is not a view of the mapped file
    again = read_safetensors(tmp_path / "w.safetensors")
    again["a"].zero_()
    assert not torch.equal(read_safetensors(tmp_path / "w.safetensors")["a"], again["a"])


def test_tensor_index_reads_headers_of_every_shard(folders):
    folder = folders["t2v", "diffusers"] / "transformer"
    index = tensor_index(folder)
    assert len({info.file for info in index.values()}) >= 2
    assert index["patch_embedding.weight"].shape == (128, 16, 1, 2, 2)
    assert index["patch_embedding.weight"].dtype == "F32"


# ------------------------------------------------------------------------------ errors
def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def _one_line_error(path, *fragments):
    with pytest.raises(CheckpointError) as info:
        describe_checkpoint(path)
    message = str(info.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
    assert isinstance(info.value, ValueError)
    return message


def test_error_no_checkpoint(tmp_path):
    _one_line_error(tmp_path / "nope", "checkpoint_dir=", "no such folder")
    _one_line_error(
        tmp_path,
        f"checkpoint_dir={tmp_path}",
        "neither model_index.json (diffusers layout)",
        "high_noise_model/ (official layout)",
    )


def test_error_component_folder_points_at_parent(folders):
    folder = folders["t2v", "diffusers"] / "transformer"
    _one_line_error(folder, "one component of a diffusers checkpoint", f"checkpoint_dir={folder.parent}")


def test_error_missing_diffusers_parts(folders, tmp_path):
    root = _copy(folders["t2v", "diffusers"], tmp_path / "a")
    import shutil

    shutil.rmtree(root / "vae")
    _one_line_error(root, "lists vae but vae/ is missing")
    root = _copy(folders["t2v", "diffusers"], tmp_path / "b")
    (root / "transformer_2" / "diffusion_pytorch_model-00002-of-00002.safetensors").unlink()
    _one_line_error(root, "diffusion_pytorch_model-00002-of-00002.safetensors", "missing")
    root = _copy(folders["t2v", "diffusers"], tmp_path / "c")
    (root / "tokenizer" / "tokenizer.json").unlink()
    _one_line_error(root, "tokenizer/ has neither tokenizer.json nor spiece.model")
    (root / "model_index.json").unlink()
    _one_line_error(root, "neither model_index.json", "lost its model_index.json")


def test_error_missing_official_parts(folders, tmp_path):
    import shutil

    root = _copy(folders["t2v", "official"], tmp_path / "a")
    shutil.rmtree(root / "low_noise_model")
    _one_line_error(root, "high_noise_model/ found but low_noise_model/ is missing")
    root = _copy(folders["t2v", "official"], tmp_path / "b")
    (root / "models_t5_umt5-xxl-enc-bf16.pth").unlink()
    _one_line_error(root, "models_t5_umt5-xxl-enc-bf16.pth is missing")
    root = _copy(folders["ti2v", "official"], tmp_path / "c")
    (root / "Wan2.2_VAE.pth").unlink()
    _one_line_error(root, "no VAE found", "Wan2.1_VAE.pth or Wan2.2_VAE.pth")


def _edit_json(path: Path, **changes):
    cfg = json.loads(path.read_text())
    cfg.update(changes)
    path.write_text(json.dumps(cfg))


def test_error_shape_mismatch_names_tensor_and_config(folders, tmp_path):
    root = _copy(folders["t2v", "diffusers"], tmp_path / "a")
    _edit_json(root / "transformer" / "config.json", in_channels=36)
    _one_line_error(
        root,
        "transformer/",
        "patch_embedding.weight has shape (128, 16, 1, 2, 2)",
        "config implies (128, 36, 1, 2, 2)",
        "in_channels=36",
    )
    root = _copy(folders["t2v", "official"], tmp_path / "b")
    _edit_json(root / "low_noise_model" / "config.json", ffn_dim=512)
    _one_line_error(root, "low_noise_model/", "blocks.0.ffn.0.weight has shape (256, 128)", "ffn_dim=512")
    root = _copy(folders["ti2v", "official"], tmp_path / "c")
    _edit_json(root / "config.json", num_layers=3)
    _one_line_error(root, "the root folder holds 2 transformer blocks", "num_layers=3")


def test_error_parts_that_do_not_fit_together(folders, tmp_path):
    root = _copy(folders["t2v", "diffusers"], tmp_path / "a")
    _edit_json(root / "text_encoder" / "config.json", d_model=64)
    _one_line_error(root, "64-wide embeddings", "text_dim is 32")
    root = _copy(folders["ti2v", "diffusers"], tmp_path / "b")
    shutil_vae = folders["t2v", "diffusers"] / "vae"
    import shutil

    shutil.rmtree(root / "vae")
    shutil.copytree(shutil_vae, root / "vae")
    _one_line_error(root, "predicts 48 latent channels", "z_dim 16")
