"""`python -m parallel_wan.quantize` (issue 38 item 10): FP8/INT8 expert files written from a
checkpoint of either layout, read back by `weights_high=` / `weights_low=`. The files hold what
`quantize=` makes at load (the same q and per-channel scales, in LightX2V's layout), so a run
with them renders the `quantize=` run's frames exactly. NVFP4 files are ComfyUI's format (byte
for byte what the harness writes from that format's description) and load back. Bad input: one line, exit 2, nothing
written; a failure while writing leaves no file, whole or partial."""

import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest
import torch
from harness.cli import run
from harness.paths import REPO
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from parallel_wan import quantize as command

SMALL = {"steps": 2, "num_frames": 5, "height": 32, "width": 32}
NAMES = {
    "fp8": ["high_noise_model_fp8.safetensors", "low_noise_model_fp8.safetensors"],
    "int8": ["high_noise_model_int8.safetensors", "low_noise_model_int8.safetensors"],
    "nvfp4": ["high_noise_model_nvfp4.safetensors", "low_noise_model_nvfp4.safetensors"],
}


def write(capsys, *settings):
    """The command in this process: (exit code, stdout, stderr)."""
    code = command.main(list(settings))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("kind, layout, compute", [("fp8", "diffusers", "fp8"), ("int8", "official", "dequant")])
def test_files_render_the_video_of_quantize_at_load(kind, layout, compute, tiny_t2v, tmp_path, capsys):
    ckpt = tiny_t2v.layouts[layout]
    code, out, err = write(capsys, f"checkpoint_dir={ckpt}", f"quantize={kind}", f"output_dir={tmp_path / 'files'}")
    assert code == 0, err
    assert sorted(os.listdir(tmp_path / "files")) == NAMES[kind]
    high, low = (tmp_path / "files" / name for name in NAMES[kind])
    assert f"weights_high={high} weights_low={low}" in out  # the command to try them
    # quant_compute=fp8 without quantize=: the files' fp8 weights take the FP8 GEMM (issue 38 item 2)
    files = run(tmp_path / "files_run", ckpt, weights_high=high, weights_low=low, quant_compute=compute, **SMALL)
    at_load = run(tmp_path / "at_load", ckpt, quantize=kind, quant_compute=compute, **SMALL)
    assert files["sidecar"]["quantization"]["chosen"] == at_load["sidecar"]["quantization"]["chosen"] == compute
    assert {r["format"] for r in files["sidecar"]["expert_files"].values()} == {"lightx2v"}
    # the same stored values and scales in memory, so the same arithmetic: equal frames
    assert np.array_equal(files["frames"], at_load["frames"])


def test_the_file_holds_quantize_rows_and_says_what_made_it(tiny_t2v, tmp_path, capsys):
    from parallel_wan import __version__
    from parallel_wan.weights.quantized.form import quantize_rows
    from parallel_wan.weights.transformer_keymap import diffusers_to_official_name

    code, _, err = write(capsys, f"checkpoint_dir={tiny_t2v.diffusers}", "quantize=fp8", f"output_dir={tmp_path}")
    assert code == 0, err
    path = tmp_path / NAMES["fp8"][1]
    stored = load_file(path)
    wide = load_file(next((tiny_t2v.layouts["diffusers"] / "transformer_2").glob("*.safetensors")))
    q, scale = quantize_rows(wide["blocks.1.ffn.net.0.proj.weight"], "fp8")
    assert torch.equal(stored["blocks.1.ffn.0.weight"].view(torch.uint8), q.view(torch.uint8))
    assert torch.equal(stored["blocks.1.ffn.0.weight_scale"], scale)
    for name, value in wide.items():  # everything but the block linears: as stored, bit for bit
        if not name.startswith("blocks.") or "norm" in name or "scale_shift" in name:
            assert torch.equal(stored[diffusers_to_official_name(name)], value), name
    with safe_open(str(path), "pt") as f:
        made = json.loads(f.metadata()["parallel_wan"])
    assert made["made_by"] == f"parallel_wan {__version__}: python -m parallel_wan.quantize"
    assert (made["checkpoint_dir"], made["layout"], made["expert"], made["quantize"]) == (
        str(tiny_t2v.layouts["diffusers"]),
        "diffusers",
        "low_noise",
        "fp8",
    )
    assert "absmax / 448" in made["scales"]


def test_nvfp4_files_are_comfyuis_format_and_load_back(tiny_t2v, tmp_path, capsys):
    from harness.quantized_files import write_expert_file

    code, out, err = write(capsys, f"checkpoint_dir={tiny_t2v.official}", "quantize=nvfp4", f"output_dir={tmp_path}")
    assert code == 0, err
    assert sorted(os.listdir(tmp_path)) == NAMES["nvfp4"] and "20 block linears in nvfp4" in out
    high, low = (tmp_path / name for name in NAMES["nvfp4"])
    comfy = load_file(write_expert_file(tmp_path / "comfy.safetensors", tiny_t2v.model.transformer_2, "comfy_nvfp4"))
    stored = load_file(low)
    assert stored.keys() == comfy.keys()
    for name, value in comfy.items():  # uint8 pairs (2j high), swizzled e4m3, scalar weight_scale_2, tags
        have, want = stored[name].reshape(-1), value.reshape(-1)
        assert have.dtype == want.dtype and torch.equal(have.view(torch.uint8), want.view(torch.uint8)), name
    with safe_open(str(low), "pt") as f:
        layers = json.loads(f.metadata()["_quantization_metadata"])["layers"]
    assert len(layers) == 20 and layers["blocks.0.self_attn.q"] == {"format": "nvfp4"}
    got = run(tmp_path / "run", tiny_t2v.diffusers, weights_high=high, weights_low=low, **SMALL)
    assert {r["format"] for r in got["sidecar"]["expert_files"].values()} == {"comfy_mixed"}
    assert {r["stored_dtype"] for r in got["sidecar"]["expert_files"].values()} == {"nvfp4"}


def test_the_built_in_models_folder_is_a_checkpoint(tmp_path, capsys):
    """The folder every run of the built-in model reads (builtin/stored.py) quantizes as it stands."""
    from parallel_wan.builtin.stored import tiny_checkpoint_folder

    folder = tiny_checkpoint_folder("ti2v", tmp_path / "fallback")
    code, out, err = write(capsys, f"checkpoint_dir={folder}", "quantize=int8", f"output_dir={tmp_path / 'q'}")
    assert code == 0, err
    assert os.listdir(tmp_path / "q") == ["model_int8.safetensors"]
    assert "model=tiny_ti2v" in out and f"weights={tmp_path / 'q' / 'model_int8.safetensors'}" in out


BAD = {
    "no_checkpoint": (["quantize=fp8"], ["checkpoint_dir is missing", "~/.cache/parallel_wan/builtin/"]),
    "checkpoint_missing": (["checkpoint_dir=/no/such", "quantize=fp8"], ["checkpoint_dir=/no/such"]),
    "quantize_missing": (["checkpoint_dir={ckpt}"], ["quantize is missing", "fp8", "int8"]),
    "quantize_none": (["checkpoint_dir={ckpt}", "quantize=none"], ["quantize=none", "fp8", "int8"]),
    "quantize_unknown": (["checkpoint_dir={ckpt}", "quantize=fp4"], ["quantize=fp4", "fp8", "int8"]),
    "unknown_setting": (
        ["checkpoint_dir={ckpt}", "quantize=fp8", "dtype=bfloat16"],
        ["dtype=bfloat16 is not a setting of python -m parallel_wan.quantize", "output_dir="],
    ),
    "a_flag": (["--fast", "checkpoint_dir={ckpt}", "quantize=fp8"], ["--fast", "--help"]),
    "output_under_a_file": (["checkpoint_dir={ckpt}", "quantize=fp8", "output_dir={file}/out"], ["is a file"]),
    "output_exists": (
        ["checkpoint_dir={ckpt}", "quantize=int8", "output_dir={taken}"],
        ["low_noise_model_int8.safetensors already exists", "output_dir="],
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_line_exit_2_and_nothing_written(case, tiny_t2v, tmp_path, capsys):
    settings, words = BAD[case]
    (tmp_path / "file").write_text("")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / NAMES["int8"][1]).write_text("a file of the user's")
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    values = {"ckpt": tiny_t2v.diffusers, "file": tmp_path / "file", "taken": tmp_path / "taken"}
    settings = [s.format(**values) for s in settings]
    if not any(s.startswith("output_dir=") for s in settings):
        settings.append(f"output_dir={tmp_path / 'out'}")
    code, out, err = write(capsys, *settings)
    assert code == 2 and not out
    assert err.count("\n") == 1 and err.startswith("parallel_wan.quantize: error: "), err
    for word in words:
        assert word in err, err
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
    assert (tmp_path / "taken" / NAMES["int8"][1]).read_text() == "a file of the user's"


def test_a_nan_weight_stops_the_command_and_no_file_appears(tiny_t2v, tmp_path, capsys):
    """The low-noise expert is written after the high-noise one: a NaN in it leaves neither file
    (they appear together or not at all) and no temporary file."""
    ckpt = shutil.copytree(tiny_t2v.diffusers, tmp_path / "ckpt")
    shard = next((ckpt / "transformer_2").glob("*.safetensors"))
    tensors = load_file(shard)
    tensors["blocks.1.attn2.to_v.weight"][3, 7] = float("nan")
    save_file(tensors, shard)
    code, out, err = write(capsys, f"checkpoint_dir={ckpt}", "quantize=fp8", f"output_dir={tmp_path / 'out'}")
    assert code == 2 and err.count("\n") == 1, err
    for word in ("blocks.1.attn2.to_v.weight", "1 non-finite", str(shard)):
        assert word in err, err
    assert os.listdir(tmp_path / "out") == []


def test_the_command_line(tiny_t2v, tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "parallel_wan.quantize",
            f"checkpoint_dir={tiny_t2v.official}",
            "quantize=int8",
            f"output_dir={tmp_path}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": REPO},
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(os.listdir(tmp_path)) == NAMES["int8"]
    for name in NAMES["int8"]:  # a safetensors file: its header's length, then JSON
        raw = (tmp_path / name).read_bytes()
        (length,) = struct.unpack("<Q", raw[:8])
        assert json.loads(raw[8 : 8 + length])["__metadata__"]["format"] == "pt"
