"""Bad expert files (`weights_high=` / `weights_low=` / `weights=`): every refusal is one line
naming the setting and file, before anything loads (run.py's validation, in-process), exit 2
through the CLI, nothing written. A NaN stored in a float8 weight is found as its bytes are
read (weights/finite.py): exit 2 too. NVFP4 files (ComfyUI's, LightX2V's) load; damaged ones
— a scale table of the wrong shape, a NaN or negative scale, a packing that is not whole blocks
of 16, a missing global scale — are refused the same way."""

import math
import subprocess
import sys

import pytest
import torch
from harness.paths import REPO
from harness.quantized_files import edited_file, write_expert_file
from harness.settings import assert_words, refusal

Q = "blocks.0.self_attn.q"  # a quantized layer (official name)


@pytest.fixture(scope="module")
def good(tiny_t2v, tmp_path_factory):
    folder = tmp_path_factory.mktemp("good_files")
    model = tiny_t2v.model
    return {
        fmt: write_expert_file(folder / f"{fmt}.safetensors", model.transformer, fmt)
        for fmt in ("scaled_fp8", "comfy_fp8", "lightx2v_int8", "comfy_int8", "comfy_nvfp4", "lightx2v_nvfp4")
    }


def _both_scale_conventions(t, m):
    t[f"{Q}.weight_scale"] = t[f"{Q}.scale_weight"].reshape(()).clone()


def _scale_on_plain_weight(t, m):
    t["blocks.0.self_attn.k.weight"] = t["blocks.0.self_attn.k.weight"].to(torch.float32) * t.pop(
        "blocks.0.self_attn.k.scale_weight"
    )
    t["blocks.0.self_attn.k.scale_weight"] = torch.ones(1)


def _nvfp4_global_on_fp8(t, m):
    t[f"{Q}.weight_scale_2"] = torch.ones(())


def _nvfp4_scale_shape(t, m):
    t[f"{Q}.weight_scale"] = t[f"{Q}.weight_scale"][:, :3].contiguous()


def _nvfp4_nan_scale(t, m):
    t[f"{Q}.weight_scale"].view(torch.uint8)[5, 1] = 0x7F  # e4m3's NaN


def _nvfp4_negative_scale(t, m):
    t[f"{Q}.weight_scale"].view(torch.uint8)[5, 1] = 0xB8  # -1.0 in e4m3


def _nvfp4_negative_global(t, m):
    t[f"{Q}.weight_scale_2"] = -t[f"{Q}.weight_scale_2"]


def _nvfp4_odd_packing(t, m):
    t[f"{Q}.weight"] = t[f"{Q}.weight"][:, :60].contiguous()  # 120 values a row: 7.5 blocks


def _nvfp4_without_global(t, m):
    del t[f"{Q}.weight_scale_2"]


def _nvfp4_half_of_lightx2v_global(t, m):
    del t[f"{Q}.alpha"]


def _unknown_comfy_format(t, m):
    m["_quantization_metadata"] = m["_quantization_metadata"].replace('"float8_e4m3fn"', '"mxfp8"', 1)


def _scale_shape(t, m):
    t[f"{Q}.weight_scale"] = t[f"{Q}.weight_scale"][:5]


def _block_scale_shape(t, m):
    t[f"{Q}.weight_scale"] = t[f"{Q}.weight_scale"][:, :3]


def _nan_scale(t, m):
    t[f"{Q}.weight_scale"][3, 0] = math.nan


def _huge_scale(t, m):
    t[f"{Q}.weight_scale"][3, 0] = 3e37  # finite, but 448 · s is not: a widened weight could overflow


def _wrong_shape(t, m):
    t["blocks.1.ffn.0.weight"] = t["blocks.1.ffn.0.weight"][:, :64].contiguous()
    t["blocks.1.ffn.0.weight_scale"] = t["blocks.1.ffn.0.weight_scale"]


def _missing(t, m):
    del t["blocks.1.cross_attn.o.weight"], t["blocks.1.cross_attn.o.weight_scale"]


def _unknown_key(t, m):
    t["img_emb.proj.0.weight"] = torch.ones(4)  # a Wan 2.1 I2V image branch


def _int8_without_scale(t, m):
    del t[f"{Q}.weight_scale"]


def _fp8_without_scale_among_scaled(t, m):
    del t[f"{Q}.scale_weight"]


def _scale_without_weight(t, m):
    t["blocks.0.self_attn.zz.weight_scale"] = torch.ones(1)


# case → (the good file it edits, the edit, words of the one line)
CASES = {
    "both_scale_conventions": (
        "scaled_fp8",
        _both_scale_conventions,
        ["unknown scale layout", "scale_weight", "weight_scale"],
    ),
    "scale_on_plain_weight": ("scaled_fp8", _scale_on_plain_weight, ["unknown scale layout", "self_attn.k"]),
    "nvfp4_global_on_fp8": ("comfy_fp8", _nvfp4_global_on_fp8, ["NVFP4 global scale", "F8_E4M3", "inconsistent"]),
    "nvfp4_scale_shape": (
        "comfy_nvfp4",
        _nvfp4_scale_shape,
        [f"{Q}.weight_scale", "[128, 3]", "fits no layout", "swizzled block scales: [128, 8]", "export the file again"],
    ),
    "nvfp4_nan_scale": ("comfy_nvfp4", _nvfp4_nan_scale, [f"{Q}.weight_scale", "1 non-finite", "download or export"]),
    "nvfp4_negative_scale": ("lightx2v_nvfp4", _nvfp4_negative_scale, [f"{Q}.weight_scale", "1 negative value"]),
    "nvfp4_negative_global": ("comfy_nvfp4", _nvfp4_negative_global, [f"{Q}.weight_scale_2", "negative", "damaged"]),
    "nvfp4_odd_packing": (
        "comfy_nvfp4",
        _nvfp4_odd_packing,
        [f"{Q}.weight", "[128, 60]", "multiple of 16 values a row", "damaged"],
    ),
    "nvfp4_without_global": ("comfy_nvfp4", _nvfp4_without_global, [f"{Q}.weight", "no global scale", "incomplete"]),
    "nvfp4_half_of_lightx2v_global": (
        "lightx2v_nvfp4",
        _nvfp4_half_of_lightx2v_global,
        [f"{Q}.input_global_scale", "both alpha and input_global_scale"],
    ),
    "unknown_comfy_format": (
        "comfy_fp8",
        _unknown_comfy_format,
        ["'mxfp8'", "unknown scale layout", "float8_e4m3fn, int8_blockwise"],
    ),
    "scale_shape": ("lightx2v_int8", _scale_shape, [f"{Q}.weight_scale", "[5, 1]", "fits no layout", "[128, 128]"]),
    "block_scale_shape": ("comfy_int8", _block_scale_shape, [f"{Q}.weight_scale", "[4, 3]", "fits no layout"]),
    "nan_scale": ("lightx2v_int8", _nan_scale, [f"{Q}.weight_scale", "1 non-finite", "download or export it again"]),
    "huge_scale": ("lightx2v_int8", _huge_scale, [f"{Q}.weight_scale", "overflows float32"]),
    "wrong_shape": (
        "lightx2v_int8",
        _wrong_shape,
        ["blocks.1.ffn.0.weight", "(256, 64)", "(256, 128)", "another model"],
    ),
    "missing_tensor": ("lightx2v_int8", _missing, ["lacks 1 tensors", "blocks.1.cross_attn.o.weight"]),
    "unknown_key": ("lightx2v_int8", _unknown_key, ["'img_emb.proj.0.weight'", "not a Wan 2.2 transformer tensor"]),
    "int8_without_scale": ("lightx2v_int8", _int8_without_scale, ["I8 tensor", f"{Q}.weight", "no weight_scale"]),
    "fp8_without_scale": ("scaled_fp8", _fp8_without_scale_among_scaled, ["F8_E4M3 tensor", "no scale_weight"]),
    "scale_without_weight": ("lightx2v_int8", _scale_without_weight, ["not a Wan 2.2 transformer tensor"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_expert_file(case, good, tiny_t2v, tmp_path):
    source, edit, words = CASES[case]
    (tmp_path / "in").mkdir()
    path = edited_file(good[source], tmp_path / "in" / "bad.safetensors", edit)
    msg = refusal([f"checkpoint_dir={tiny_t2v.diffusers}", f"weights_low={path}"], tmp_path)
    assert_words(msg, [f"weights_low={path}", *words])


def test_file_for_another_model_is_refused_by_its_shapes(good, tmp_path_factory, tmp_path):
    """A T2V-A14B expert file given to TI2V-5B (here: the tiny models, 16 vs 48 latent channels)."""
    from harness.diffusers_reference import tiny_checkpoint

    _, ti2v = tiny_checkpoint("ti2v", tmp_path_factory)
    msg = refusal([f"checkpoint_dir={ti2v}", "model=tiny_ti2v", f"weights={good['lightx2v_int8']}"], tmp_path)
    assert_words(msg, [f"weights={good['lightx2v_int8']}", "patch_embedding.weight", "another model"])


SETTINGS = {
    "weights_on_a14b": (["weights={file}"], ["weights=", "two", "weights_high=FILE"]),
    "weights_high_on_ti2v": (["model=tiny_ti2v", "weights_high={file}"], ["weights_high=", "has one", "weights="]),
    "missing": (["weights_high=/no/such.safetensors"], ["weights_high=/no/such.safetensors", "does not exist"]),
    "folder": (["weights_low={folder}"], ["weights_low=", "is a folder"]),
    "not_safetensors": (["weights_low={text}"], ["weights_low=", "not a safetensors file"]),
    "without_checkpoint_dir": (["weights_high={file}", "checkpoint_dir=null"], ["weights_high=", "checkpoint_dir=DIR"]),
    "not_a_string": (["weights_high=[a,b]"], ["weights_high=['a', 'b']", "one .safetensors file"]),
    # quant_compute=fp8 multiplies float8 block linears only: int8 files, and a wide expert under
    # quantize=none, hold none (quantize=fp8 leaves a file's int8 weights as stored)
    "fp8_compute_on_int8_files": (
        ["weights_high={file}", "weights_low={file}", "quant_compute=fp8"],
        ["quant_compute=fp8", "weights_high=", "weights_low=", "int8", "quantize=none", "quant_compute=dequant"],
    ),
    "fp8_compute_on_int8_files_quantize_fp8": (
        ["weights_high={file}", "weights_low={file}", "quantize=fp8", "quant_compute=fp8"],
        ["quant_compute=fp8", "weights_low=", "int8", "quant_compute=dequant"],
    ),
    "nvfp4_file_on_jax": (
        ["weights_high={nvfp4}", "backend=jax"],
        ["weights_high=", "NVFP4", "backend=jax", "backend=torch"],
    ),
    "fp8_compute_on_an_int8_file_and_a_wide_expert": (
        ["weights_high={file}", "quant_compute=fp8"],
        ["quant_compute=fp8", "weights_high=", "int8", "low_noise", "quantize=none", "quantize=fp8"],
    ),
}


@pytest.mark.parametrize("case", sorted(SETTINGS))
def test_bad_expert_file_setting(case, good, tiny_t2v, tmp_path):
    overrides, words = SETTINGS[case]
    (tmp_path / "in").mkdir()
    text = tmp_path / "in" / "expert.safetensors"
    text.write_text("not a safetensors file, but a text file long enough")
    values = {
        "file": good["lightx2v_int8"],
        "nvfp4": good["comfy_nvfp4"],
        "folder": str(tmp_path / "in"),
        "text": str(text),
    }
    overrides = [o.format(**values) for o in overrides]
    if not any(o.startswith("checkpoint_dir=") for o in overrides):
        overrides.append(f"checkpoint_dir={tiny_t2v.diffusers}")
    assert_words(refusal(overrides, tmp_path), words)


@pytest.mark.parametrize(
    "overrides",
    [
        ["weights_high={scaled_fp8}", "weights_low={lightx2v_int8}"],  # the high-noise expert's layers run in FP8
        [
            "weights_low={comfy_fp8}"
        ],  # ComfyUI's per-tensor fp8 (scale expanded to rows); high: wide, widened as it runs
        [
            "weights_high={lightx2v_int8}",
            "quantize=fp8",
        ],  # the low-noise expert, read wide, is quantized to fp8 at load
    ],
)
def test_fp8_compute_is_accepted_where_an_expert_holds_fp8_weights(overrides, good, tiny_t2v, tmp_path):
    from harness.settings import raw_config

    from parallel_wan.run import validate_job

    overrides = [o.format(**good) for o in overrides] + [f"checkpoint_dir={tiny_t2v.diffusers}", "quant_compute=fp8"]
    job, _ = validate_job(raw_config(overrides, str(tmp_path / "out")), 1)
    assert job.base.quantization.compute == "fp8"


@pytest.mark.parametrize("fmt, name", [("comfy_nvfp4", "comfy_mixed"), ("lightx2v_nvfp4", "lightx2v")])
def test_nvfp4_files_are_read(fmt, name, good, tiny_t2v, tmp_path):
    """What used to be refused ("NVFP4 … not supported yet"): described from the header and
    scales, every block linear NVFP4 (loading them: tests/unit/test_nvfp4_files.py)."""
    from harness.settings import spec_for

    from parallel_wan.pipeline.checkpoint import preflight

    ckpt = preflight(spec_for(f"checkpoint_dir={tiny_t2v.diffusers}", f"weights_low={good[fmt]}"))
    record = ckpt.expert_files["low_noise"].record()
    assert (record["format"], record["stored_dtype"], record["quantized_tensors"]) == (name, "nvfp4", 20)


def test_nan_in_a_float8_weight_is_refused_as_it_loads(good, tiny_t2v, tmp_path):
    """Bytes 0x7F / 0xFF are float8_e4m3fn's NaN; the scale is finite, so only the load sees it."""
    from harness.settings import spec_for

    from parallel_wan.errors import BadWeights
    from parallel_wan.pipeline.checkpoint import preflight
    from parallel_wan.weights.loader import load_transformer

    def nan_byte(t, m):
        t[f"{Q}.weight"].view(torch.uint8)[2, 5] = 0xFF

    path = edited_file(good["scaled_fp8"], tmp_path / "nan.safetensors", nan_byte)
    ckpt = preflight(spec_for(f"checkpoint_dir={tiny_t2v.diffusers}", f"weights_high={path}"))
    with pytest.raises(BadWeights) as err:
        load_transformer(ckpt, "high_noise", "float32")
    assert_words(str(err.value), [path, f"{Q}.weight", "1 non-finite"])


def test_cli_refuses_a_bad_file_in_one_line_with_exit_2(good, tiny_t2v, tmp_path):
    (tmp_path / "in").mkdir()
    path = edited_file(good["comfy_fp8"], tmp_path / "in" / "nvfp4.safetensors", _nvfp4_global_on_fp8)
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "parallel_wan.run",
            f"output_dir={out}",
            f"checkpoint_dir={tiny_t2v.diffusers}",
            f"weights_high={path}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": REPO, "PATH": "/usr/bin"},
        check=False,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "NVFP4" in lines[0] and f"weights_high={path}" in lines[0], proc.stderr
    assert not out.exists()
