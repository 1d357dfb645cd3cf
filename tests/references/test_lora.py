"""LoRA per expert: the frames equal diffusers' pipelines after `load_lora_weights` into each
transformer with the same per-expert scales; the three key formats give the same weights; the
merge equals an fp32 reference merge; a sharded load merges only its rows; JAX equals torch;
every bad file stops the run before anything loads."""

import json
import logging

import numpy as np
import pytest
import torch
from harness.cli import NEGATIVE, PROMPT, SEED, common, run_in_process
from harness.frames import assert_frames_close, to_uint8
from harness.lora_files import bad_file, lora_pairs, write_lora
from harness.paths import REPO
from harness.settings import assert_refused, spec_for
from safetensors.torch import save_file

from parallel_wan.builtin.tiny import build_tiny, transformer_config, write_checkpoint
from parallel_wan.config import ConfigError
from parallel_wan.weights.loader import load_transformer

# A LoRA must move the frames far more than the comparison's tolerance, or agreeing with
# diffusers would prove nothing (measured: ~90 levels at these strengths).
LORA_MATTERS = 20


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    model = build_tiny("t2v", seed=0)
    root = tmp_path_factory.mktemp("lora")
    cfg = transformer_config("t2v")
    files = {
        # The high-noise file in ComfyUI form (alpha 2 on rank 4), the low-noise one PEFT with
        # its adapter config in the header (alpha 4 on rank 8): alpha ≠ rank in both.
        "high": write_lora(root / "high.safetensors", lora_pairs(cfg, rank=4, seed=1), "comfyui", alpha=2.0),
        "low": write_lora(root / "low.safetensors", lora_pairs(cfg, rank=8, seed=2), "peft", alpha=4.0),
    }
    return model, str(write_checkpoint(model, root / "ckpt", "diffusers")), files, root


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_t2v_frames_equal_diffusers_with_a_lora_per_expert(tiny, tmp_path):
    from diffusers import UniPCMultistepScheduler, WanPipeline

    model, ckpt, files, _ = tiny
    run_in_process(
        tmp_path / "ours",
        *common(ckpt),
        f"lora_high={files['high']}",
        "lora_high_scale=1.5",
        f"lora_low={files['low']}",
        "lora_low_scale=0.5",
    )
    ours = np.load(tmp_path / "ours" / "frames.npy")
    run_in_process(tmp_path / "dense", *common(ckpt))
    dense = np.load(tmp_path / "dense" / "frames.npy")

    pipe = WanPipeline(
        tokenizer=model.tokenizer,
        text_encoder=model.text_encoder,
        vae=model.vae,
        scheduler=UniPCMultistepScheduler.from_config(model.scheduler_config),
        transformer=model.transformer,
        transformer_2=model.transformer_2,
        boundary_ratio=model.boundary_ratio,
    )
    pipe.load_lora_weights(files["high"], adapter_name="high")
    pipe.load_lora_weights(files["low"], adapter_name="low", load_into_transformer_2=True)
    pipe.transformer.set_adapters(["high"], [1.5])
    pipe.transformer_2.set_adapters(["low"], [0.5])
    try:
        with torch.no_grad():
            ref = pipe(
                prompt=PROMPT,
                negative_prompt=NEGATIVE,
                height=64,
                width=64,
                num_frames=9,
                num_inference_steps=4,
                guidance_scale=4.0,
                guidance_scale_2=3.0,
                max_sequence_length=512,
                generator=torch.Generator("cpu").manual_seed(SEED),
                output_type="np",
            ).frames[0]
    finally:  # the model object is the module's fixture: leave it without adapters
        pipe.transformer.delete_adapters(["high"])
        pipe.transformer_2.delete_adapters(["low"])
    assert_frames_close(ours, to_uint8(ref))
    assert np.abs(ours.astype(int) - dense).max() > LORA_MATTERS
    sidecar = json.loads((tmp_path / "ours" / "video.json").read_text())
    assert sidecar["lora"]["high_noise"]["files"][0]["format"] == "comfyui"
    assert sidecar["lora"]["low_noise"]["files"][0]["scale"] == 0.5


def merged(ckpt, expert, path, scale=1.0, dtype="float32", shard=None, setting="lora"):
    from parallel_wan.lora.merge import expert_lora
    from parallel_wan.models.transformer_shapes import param_shapes

    lora = expert_lora(expert, [(path, scale, setting)], param_shapes(transformer_config("t2v")))
    return load_transformer(ckpt, expert, dtype, None, shard, lora), lora


def flat(tree):
    from parallel_wan.weights.tree import iter_leaves

    return dict(iter_leaves(tree))


def test_the_three_formats_give_the_same_weights(tiny):
    _, ckpt, _, root = tiny
    pairs = lora_pairs(transformer_config("t2v"), rank=4, seed=3)
    trees = [
        flat(merged(ckpt, "high_noise", write_lora(root / f"{fmt}.safetensors", pairs, fmt, alpha=3.0), 0.8)[0])
        for fmt in ("peft", "comfyui", "musubi")
    ]
    for other in trees[1:]:
        assert all(torch.equal(trees[0][k], other[k]) for k in trees[0])
    base = flat(load_transformer(ckpt, "high_noise", "float32"))
    assert not torch.equal(base["blocks.0.attn1.to_q.weight"], trees[0]["blocks.0.attn1.to_q.weight"])


def test_merge_equals_an_fp32_reference_within_one_bf16_rounding(tiny):
    _, ckpt, files, _ = tiny
    got = flat(merged(ckpt, "low_noise", files["low"], 0.5, "bfloat16")[0])
    base = flat(load_transformer(ckpt, "low_noise", "float32"))
    pairs = lora_pairs(transformer_config("t2v"), rank=8, seed=2)
    for module, (down, up) in pairs.items():
        ref = base[module + ".weight"] + 0.5 * (4.0 / 8) * (up @ down)  # fp32: W + s·(α/r)·up·down
        w = got[module + ".weight"]
        assert w.dtype == torch.bfloat16
        ulp = torch.finfo(torch.bfloat16).eps * ref.abs().clamp_min(torch.finfo(torch.bfloat16).tiny)
        assert ((w.float() - ref).abs() <= ulp).all(), module
    untouched = "condition_embedder.time_proj.weight"
    assert torch.equal(got[untouched], base[untouched].to(torch.bfloat16))


def test_a_sharded_load_merges_only_its_rows(tiny):
    _, ckpt, files, _ = tiny
    whole, whole_lora = merged(ckpt, "high_noise", files["high"], 1.5)
    whole = flat(whole)
    for index in range(3):
        part, lora = merged(ckpt, "high_noise", files["high"], 1.5, shard=(index, 3))
        part = flat(part)
        for name, tensor in part.items():
            rows = tensor.shape[0] if tensor.ndim else 0
            start = -(-whole[name].shape[0] // 3) * index if whole[name].ndim else 0
            assert torch.equal(tensor, whole[name][start : start + rows] if whole[name].ndim else whole[name]), name
        # Each pair's up rows for this shard, and every down: less than the whole file.
        assert 0 < lora.bytes_read < whole_lora.bytes_read


def test_lora_changes_the_cache_key(tiny, tmp_path):
    from parallel_wan.weights.loader import load_transformer

    _, ckpt, files, _ = tiny
    _, lora = merged(ckpt, "high_noise", files["high"], 1.5)
    _, other_scale = merged(ckpt, "high_noise", files["high"], 1.0)
    for lo in (None, lora, other_scale):
        load_transformer(ckpt, "high_noise", "float32", None, None, lo, cache_dir=tmp_path)
    assert len(list(tmp_path.glob("*.safetensors"))) == 3
    again = flat(load_transformer(ckpt, "high_noise", "float32", None, None, lora, cache_dir=tmp_path))
    fresh = flat(merged(ckpt, "high_noise", files["high"], 1.5)[0])
    assert all(torch.equal(again[k], fresh[k]) for k in fresh)


def test_full_deltas_are_scaled_by_the_strength_only(tiny, tmp_path):
    _, ckpt, _, _ = tiny
    cfg = transformer_config("t2v")
    g = torch.Generator().manual_seed(5)
    deltas = {
        "diffusion_model.blocks.1.self_attn.q.diff": torch.randn((cfg.dim, cfg.dim), generator=g),
        "diffusion_model.blocks.1.ffn.2.diff_b": torch.randn((cfg.dim,), generator=g),
        "diffusion_model.blocks.1.diff_m": torch.randn((1, 6, cfg.dim), generator=g),
        "diffusion_model.head.head.diff_b": torch.randn((cfg.out_channels * 4,), generator=g),
    }
    path = tmp_path / "diffs.safetensors"
    save_file(deltas, str(path))
    got = flat(merged(ckpt, "low_noise", str(path), 2.0)[0])
    base = flat(load_transformer(ckpt, "low_noise", "float32"))
    for key, target in (
        ("blocks.1.self_attn.q.diff", "blocks.1.attn1.to_q.weight"),
        ("blocks.1.ffn.2.diff_b", "blocks.1.ffn.net.2.bias"),
        ("blocks.1.diff_m", "blocks.1.scale_shift_table"),
        ("head.head.diff_b", "proj_out.bias"),
    ):
        assert torch.allclose(got[target], base[target] + 2.0 * deltas["diffusion_model." + key], atol=1e-6), target


def test_wan21_image_branch_keys_are_dropped_and_counted(tiny, tmp_path, caplog):
    _, ckpt, _, _ = tiny
    cfg = transformer_config("t2v")
    pairs = lora_pairs(cfg, rank=2, seed=4, modules=("attn2.to_k",))
    extra = {
        f"diffusion_model.blocks.{i}.cross_attn.{m}.lora_down.weight": torch.zeros(2, cfg.dim)
        for i in range(cfg.num_layers)
        for m in ("k_img", "v_img")
    }
    extra["diffusion_model.img_emb.proj.1.lora_up.weight"] = torch.zeros(4, 2)
    path = write_lora(tmp_path / "wan21.safetensors", pairs, "comfyui", alpha=2.0, extra=extra)
    with caplog.at_level(logging.WARNING, logger="parallel_wan"):
        _, lora = merged(ckpt, "high_noise", path)
    assert lora.dropped == len(extra)
    assert f"dropped {len(extra)} keys of Wan 2.1's image branch" in caplog.text
    assert len(lora.targets) == cfg.num_layers


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_jax_merges_the_same_lora(tiny, tmp_path):
    """The merge happens in the loader both backends share: JAX renders torch's LoRA video."""
    _, ckpt, files, _ = tiny
    lora = [f"lora={files['high']}", "lora_scale=0.7"]
    run_in_process(tmp_path / "torch", *common(ckpt), *lora)
    run_in_process(tmp_path / "jax", *common(ckpt), *lora, "backend=jax")
    assert_frames_close(np.load(tmp_path / "jax" / "frames.npy"), np.load(tmp_path / "torch" / "frames.npy"))


@pytest.mark.parametrize(
    "kind",
    [
        "not_safetensors",
        "corrupt",
        "unknown_key",
        "rank_mismatch",
        "shape_mismatch",
        "half_pair",
        "dora",
        "pickle_with_code",
    ],
)
def test_bad_lora_files_stop_before_loading(tmp_path, kind):
    from parallel_wan.pipeline.checkpoint import preflight

    path, words = bad_file(tmp_path, kind)
    with pytest.raises(ConfigError) as err:
        preflight(spec_for(f"lora_low={path}"))
    assert "\n" not in str(err.value)
    for w in words:
        assert w in str(err.value), str(err.value)


@pytest.mark.parametrize(
    "overrides, words",
    [
        (["lora=/no/such.safetensors"], ["lora=/no/such.safetensors", "does not exist"]),
        (["lora_high=/tmp"], ["lora_high=/tmp", "is a folder"]),
        (["lora_scale=-1", "lora=README.md"], ["README.md", "not a .safetensors"]),
        (["model=tiny_ti2v", "lora_high=x.safetensors"], ["lora_high=", "has one", "use lora="]),
        (["lora_low_scale=nan", "lora_low=tests/conftest.py"], ["not a .safetensors"]),
    ],
)
def test_bad_lora_settings(overrides, words):
    assert_refused(overrides, words)


@pytest.mark.parametrize(
    "scale, words",
    [
        ("-0.5", ["lora_scale=-0.5", "≥ 0"]),
        ("nan", ["lora_scale=nan", "finite"]),
        ("inf", ["lora_scale=inf", "finite"]),
        ("abc", ["lora_scale='abc'"]),
        ("[1.0,2.0]", ["2 values for 1 files"]),
    ],
)
def test_bad_lora_scales(tiny, scale, words):
    assert_refused([f"lora={tiny[2]['high']}", f"lora_scale={scale}"], words)


def test_cli_bad_lora_is_one_line_and_writes_nothing(tiny, tmp_path):
    import os
    import subprocess
    import sys

    path, _ = bad_file(tmp_path, "rank_mismatch")
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "parallel_wan.run", f"output_dir={out}", f"lora={path}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": REPO},
    )
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "rank mismatch" in lines[0], proc.stderr
    assert not out.exists()


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_i2v_frames_equal_diffusers_with_one_lora_for_both_experts(tmp_path_factory, tmp_path):
    """`lora=` on I2V-A14B: the musubi file (alpha 2 on rank 4) on both experts, equal to
    WanImageToVideoPipeline after load_lora_weights into transformer and transformer_2."""
    from diffusers import WanPipeline
    from harness.cli import HEIGHT, WIDTH, run
    from harness.diffusers_reference import reference_frames, tiny_checkpoint
    from harness.images import write_png

    model, ckpt = tiny_checkpoint("i2v", tmp_path_factory)
    path = write_lora(
        tmp_path / "musubi.safetensors", lora_pairs(transformer_config("i2v"), rank=4, seed=7), "musubi", alpha=2.0
    )
    image = write_png(tmp_path / "frame.png", WIDTH, HEIGHT)
    guidance = dict(guidance_high=3.5, guidance_low=3.0)
    ours = run(tmp_path / "ours", ckpt, model="tiny_i2v", image=image, lora=path, lora_scale=0.8, **guidance)
    plain = run(tmp_path / "plain", ckpt, model="tiny_i2v", image=image, **guidance)
    loader = WanPipeline(
        tokenizer=None,
        text_encoder=None,
        vae=None,
        scheduler=None,
        transformer=model.transformer,
        transformer_2=model.transformer_2,
    )  # only to load the adapters into both modules
    loader.load_lora_weights(path, adapter_name="both")
    loader.load_lora_weights(path, adapter_name="both", load_into_transformer_2=True)
    model.transformer.set_adapters(["both"], [0.8])
    model.transformer_2.set_adapters(["both"], [0.8])
    ref = reference_frames(model, image, guidance_scale=3.5, guidance_scale_2=3.0)
    assert_frames_close(ours["frames"], ref)
    assert np.abs(ours["frames"].astype(int) - plain["frames"]).max() > LORA_MATTERS
