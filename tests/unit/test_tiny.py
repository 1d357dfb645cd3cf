"""The built-in tiny model: deterministic, complete in both layouts, and a checkpoint that
diffusers itself loads offline."""

from __future__ import annotations

import contextlib
import importlib.util
import json
from unittest import mock

import pytest
import torch

from parallel_wan.builtin.tiny import KINDS, build_tiny, write_checkpoint
from parallel_wan.weights import tree
from parallel_wan.weights.layout import describe_checkpoint
from parallel_wan.weights.loader import load_transformer


def _loadable_without_accelerate():
    """diffusers loads WanTransformer3DModel (it keeps some modules fp32) only through
    `accelerate`; without it, drop that dtype-only feature so diffusers still reads our
    config, index and shards."""
    from diffusers import WanTransformer3DModel

    if importlib.util.find_spec("accelerate") is not None:
        return contextlib.nullcontext()
    return mock.patch.object(WanTransformer3DModel, "_keep_in_fp32_modules", None)


def _states(model) -> dict:
    modules = {
        "transformer": model.transformer,
        "transformer_2": model.transformer_2,
        "vae": model.vae,
        "text_encoder": model.text_encoder,
    }
    return {f"{c}.{k}": v for c, m in modules.items() if m is not None for k, v in m.state_dict().items()}


def test_same_seed_same_model_other_seed_other_model():
    torch.manual_seed(0)
    a = build_tiny("t2v", seed=5)
    after_build = torch.randn(4)
    torch.manual_seed(0)
    assert torch.equal(torch.randn(4), after_build)  # the caller's RNG stream is untouched
    b, c = build_tiny("t2v", seed=5), build_tiny("t2v", seed=6)
    sa, sb, sc = _states(a), _states(b), _states(c)
    assert sa.keys() == sb.keys() == sc.keys()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not any(torch.equal(sa[k], sc[k]) for k in sa if sa[k].numel() > 1)
    assert a.tokenizer("a cat").input_ids == b.tokenizer("a cat").input_ids
    # the two experts are different networks
    assert not torch.equal(a.transformer.proj_out.weight, a.transformer_2.proj_out.weight)


@pytest.mark.parametrize("kind", KINDS)
def test_shapes_per_kind(kind):
    model = build_tiny(kind)
    in_channels = {"t2v": 16, "i2v": 36, "ti2v": 48}[kind]
    assert model.transformer.config.in_channels == in_channels
    assert (model.transformer_2 is None) == (kind == "ti2v")
    z = model.vae.config.z_dim
    assert z == (48 if kind == "ti2v" else 16) and len(model.vae.config.latents_mean) == z
    assert model.transformer.config.out_channels == z
    assert model.transformer.config.text_dim == model.text_encoder.config.d_model
    heads, head_dim = model.transformer.config.num_attention_heads, model.transformer.config.attention_head_dim
    assert (heads, heads * head_dim) == (8, 128)
    assert model.scheduler_config["use_flow_sigmas"] and model.scheduler_config["prediction_type"] == "flow_prediction"


def test_tokenizer_is_t5_like():
    tokenizer = build_tiny("t2v").tokenizer
    assert (tokenizer.pad_token_id, tokenizer.eos_token_id) == (0, 1)
    out = tokenizer(["a cat on the beach", "Zebra-42!"], padding="max_length", max_length=16, truncation=True)
    for ids, mask in zip(out.input_ids, out.attention_mask):
        length = sum(mask)
        assert ids[length - 1] == 1 and all(i == 0 for i in ids[length:]) and 2 not in ids[:length]
    assert tokenizer("a cat").input_ids == [
        tokenizer.convert_tokens_to_ids("▁a"),
        tokenizer.convert_tokens_to_ids("▁cat"),
        1,
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_both_layouts_round_trip(kind, tmp_path):
    model = build_tiny(kind, seed=2)
    diffusers = describe_checkpoint(write_checkpoint(model, tmp_path / "d", "diffusers"))
    official = describe_checkpoint(write_checkpoint(model, tmp_path / "o", "official"))
    assert diffusers.transformers == official.transformers
    assert diffusers.vae_config == official.vae_config
    expected = {"t2v": {"high_noise", "low_noise"}, "i2v": {"high_noise", "low_noise"}, "ti2v": {"single"}}[kind]
    assert set(diffusers.experts) == set(official.experts) == expected
    for expert in expected:
        module = model.transformer_2 if expert == "low_noise" else model.transformer
        for ckpt in (diffusers, official):
            files = list(ckpt.experts[expert].glob("*.safetensors"))
            assert len(files) >= 2  # sharding is exercised
            loaded = tree.flatten(load_transformer(ckpt, expert, dtype="float32"))
            assert all(torch.equal(loaded[k], v) for k, v in module.state_dict().items())
    index = json.loads((tmp_path / "d" / "model_index.json").read_text())
    assert index["boundary_ratio"] == model.boundary_ratio
    assert index["expand_timesteps"] == (kind == "ti2v")


@pytest.mark.parametrize("kind", KINDS)
def test_diffusers_loads_the_folder_offline(kind, tmp_path, monkeypatch):
    from diffusers import WanImageToVideoPipeline, WanPipeline, WanTransformer3DModel

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = build_tiny(kind, seed=4)
    folder = write_checkpoint(model, tmp_path, "diffusers")
    pipeline_class = WanImageToVideoPipeline if kind == "i2v" else WanPipeline
    with _loadable_without_accelerate():
        pipe = pipeline_class.from_pretrained(folder)
        expert = WanTransformer3DModel.from_pretrained(folder, subfolder="transformer")
    ours, theirs = _states(model), _states(pipe)
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert all(torch.equal(v, expert.state_dict()[k]) for k, v in model.transformer.state_dict().items())
    assert pipe.config.boundary_ratio == model.boundary_ratio
    assert pipe.scheduler.config.flow_shift == model.scheduler_config["flow_shift"]
    assert pipe.tokenizer("a cat").input_ids == model.tokenizer("a cat").input_ids


@pytest.mark.parametrize("kind,size", [("t2v", 16), ("ti2v", 32)])
def test_wan_pipeline_runs_on_the_tiny_folder(kind, size, tmp_path):
    # (diffusers' I2V pipeline needs `ftfy` to clean prompts, so it is loaded above but not run)
    from diffusers import WanPipeline

    folder = write_checkpoint(build_tiny(kind), tmp_path, "diffusers")
    with _loadable_without_accelerate():
        pipe = WanPipeline.from_pretrained(folder)
    pipe.set_progress_bar_config(disable=True)
    frames = pipe(
        prompt="a cat",
        num_frames=5,
        height=size,
        width=size,
        num_inference_steps=2,
        output_type="np",
        generator=torch.Generator().manual_seed(0),
    ).frames
    assert frames.shape == (1, 5, size, size, 3) and bool((frames >= 0).all() and (frames <= 1).all())
