"""Weights holding NaN or ±inf are refused while they load (issue 22 item 2), in one line naming
the file, the tensor and the count, exit 2, nothing written — for every file a run reads: the
experts (both layouts, whole or sharded, through the converted-weights cache), the VAE and the
text encoder (safetensors and .pth) and LoRA files.

Before: NaN in the high-noise expert's `blocks.0.attn1.to_k.weight` rendered a finite, wrong
video with exit 0 — torch's CPU flash-attention kernel returns 0, not NaN, for NaN keys, so the
latents stay finite and the finite-latents check never fires."""

import os
import struct
import subprocess
import sys

import pytest
import torch
from harness.checkpoints import copy_of as checkpoint_copy
from harness.lora_files import lora_pairs, write_lora

from parallel_wan.errors import BadWeights
from parallel_wan.models.transformer import keeps_fp32
from parallel_wan.run import CONF_DIR
from parallel_wan.weights import finite
from parallel_wan.weights.layout import describe_checkpoint
from parallel_wan.weights.loader import load_transformer, load_vae
from parallel_wan.weights.safetensors_io import tensor_index

REPO = os.path.dirname(CONF_DIR)
TO_K = {"diffusers": "blocks.0.attn1.to_k.weight", "official": "blocks.0.self_attn.k.weight"}
EXPERT_FOLDER = {"diffusers": "transformer", "official": "high_noise_model"}
BAD_BITS = {
    "F32": [struct.pack("<f", v) for v in (float("nan"), float("inf"), float("-inf"))],
    "BF16": [b"\xc0\x7f", b"\x80\x7f", b"\x80\xff"],
    "F16": [b"\x00\x7e", b"\x00\x7c", b"\x00\xfc"],
}


@pytest.fixture(scope="module")
def checkpoints(tiny_t2v):
    return tiny_t2v.layouts


def copy_of(checkpoints, layout, tmp_path):
    return checkpoint_copy(checkpoints[layout], tmp_path)


def poison(folder, name, positions):
    """Overwrite elements `positions` of tensor `name` (in a safetensors folder or file) with
    NaN, +inf, -inf in turn, in place; returns the file that holds it."""
    info = tensor_index(folder)[name]
    itemsize = {"F32": 4, "BF16": 2, "F16": 2}[info.dtype]
    with open(info.file, "r+b") as f:
        for i, position in enumerate(positions):
            f.seek(info.start + position * itemsize)
            f.write(BAD_BITS[info.dtype][i % 3])
    return info.file


def poison_pth(path, name=None):
    state = torch.load(path, map_location="cpu", weights_only=True)
    name = name or next(k for k, v in state.items() if v.is_floating_point() and v.numel() > 4)
    state[name].view(-1)[1] = float("nan")
    torch.save(state, path)
    return name


# ------------------------------------------------------------------------------ the check itself
def test_non_finite_counts_exactly_and_a_huge_finite_sum_is_not_an_error():
    assert finite.non_finite(torch.tensor([1.0, float("nan"), float("inf"), -float("inf"), 2.0])) == 3
    huge = torch.full((8,), 3e38)  # the sum overflows to inf; every value is finite
    assert not torch.isfinite(huge.sum()) and finite.non_finite(huge) == 0
    assert finite.non_finite(torch.arange(10)) == 0  # integers hold no NaN
    assert finite.non_finite(torch.tensor([float("nan")], dtype=torch.bfloat16)) == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_chunked_copy_finds_a_nan_in_any_chunk_and_copies_exactly(dtype, monkeypatch):
    monkeypatch.setattr(finite, "CHUNK_BYTES", 1024)  # many chunks, a partial last one
    source = torch.randn(3001, dtype=torch.float32)
    clean = torch.empty(3001, dtype=dtype)
    assert finite.copy_checked(clean, source) == 0 and torch.equal(clean, source.to(dtype))
    for where in (0, 700, 3000):  # the first chunk, a middle one, the partial last one
        bad = source.clone()
        bad[where] = float("nan")
        assert finite.copy_checked(torch.empty(3001, dtype=dtype), bad) == 1, where
    strided = torch.empty(2, 3001, dtype=dtype)[:, ::2]  # not contiguous: the plain copy, then one count
    assert finite.copy_checked(strided, source.view(1, 3001)[:, ::2].expand(2, -1).clone() * float("inf")) == 2 * 1501


# ------------------------------------------------------------------------------ the experts
@pytest.mark.parametrize("layout", ["diffusers", "official"])
def test_an_expert_with_nan_and_inf_is_refused_naming_file_tensor_and_count(checkpoints, tmp_path, layout):
    root = copy_of(checkpoints, layout, tmp_path)
    file = poison(root / EXPERT_FOLDER[layout], TO_K[layout], [0, 5, 17])
    with pytest.raises(BadWeights) as err:
        load_transformer(describe_checkpoint(root), "high_noise", "bfloat16", keeps_fp32)
    msg = str(err.value)
    assert "\n" not in msg and str(file) in msg and f"tensor {TO_K[layout]} holds 3 non-finite values" in msg, msg
    load_transformer(describe_checkpoint(root), "low_noise", "bfloat16", keeps_fp32)  # the clean expert loads


def test_a_sharded_load_checks_the_rows_it_reads(checkpoints, tmp_path):
    """memory=sharded: each rank reads only its rows, so the rank holding the bad rows finds them."""
    root = copy_of(checkpoints, "diffusers", tmp_path)
    info = tensor_index(root / "transformer")[TO_K["diffusers"]]
    rows, row = info.shape[0], info.shape[1]
    poison(root / "transformer", TO_K["diffusers"], [(rows - 1) * row])  # the last row: the last shard's
    ckpt = describe_checkpoint(root)
    load_transformer(ckpt, "high_noise", "bfloat16", keeps_fp32, shard=(0, 2))
    with pytest.raises(BadWeights, match=r"blocks\.0\.attn1\.to_k\.weight holds 1 non-finite value \(NaN"):
        load_transformer(ckpt, "high_noise", "bfloat16", keeps_fp32, shard=(1, 2))


def test_the_converted_weights_cache_never_holds_what_the_load_refused(checkpoints, tmp_path):
    root = copy_of(checkpoints, "diffusers", tmp_path)
    poison(root / "transformer", TO_K["diffusers"], [3])
    with pytest.raises(BadWeights):
        load_transformer(describe_checkpoint(root), "high_noise", "bfloat16", keeps_fp32, cache_dir=tmp_path / "cache")
    assert not list((tmp_path / "cache").rglob("*.safetensors"))


# ------------------------------------------------------------------------------ VAE, text encoder
@pytest.mark.parametrize("layout", ["diffusers", "official"])
def test_a_vae_with_nan_is_refused(checkpoints, tmp_path, layout):
    root = copy_of(checkpoints, layout, tmp_path)
    if layout == "diffusers":
        name, file = "decoder.conv_in.weight", poison(root / "vae", "decoder.conv_in.weight", [2])
        words = [str(file), f"tensor {name} holds 1 non-finite value"]
    else:
        file = next(root.glob("Wan2.*_VAE.pth"))
        poison_pth(file, "decoder.conv1.weight")
        words = [str(file), "holds 1 non-finite value"]
    with pytest.raises(BadWeights) as err:
        load_vae(describe_checkpoint(root))
    for word in words:
        assert word in str(err.value), str(err.value)


@pytest.mark.parametrize("layout", ["diffusers", "official"])
def test_a_text_encoder_with_nan_is_refused(checkpoints, tmp_path, layout):
    from parallel_wan.text.umt5 import load_umt5

    root = copy_of(checkpoints, layout, tmp_path)
    if layout == "diffusers":
        file = poison(root / "text_encoder", "shared.weight", [7, 8])
        count = "2 non-finite values"
    else:
        file = root / "models_t5_umt5-xxl-enc-bf16.pth"
        poison_pth(file)
        count = "1 non-finite value"
    with pytest.raises(BadWeights) as err:
        load_umt5(describe_checkpoint(root))
    assert str(file) in str(err.value) and count in str(err.value), str(err.value)


# ------------------------------------------------------------------------------ the CLI: exit 2, nothing written
def cli(tmp_path, *overrides):
    """The command line a user types (no output_dir=: the default folder must not be left behind)."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "parallel_wan.run", "steps=2", "num_frames=1", "height=32", "width=32", *overrides],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": REPO},
    )
    return proc, work


def assert_refused_in_one_line(proc, work, words):
    errors = [line for line in proc.stderr.splitlines() if line.startswith("parallel_wan: error")]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    for word in words:
        assert word in errors[0], errors[0]
    assert os.listdir(work) == [], os.listdir(work)  # no outputs/<date_time>, no outputs/


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_the_users_case_nan_in_to_k_stops_the_cli_with_exit_2_and_writes_nothing(checkpoints, tmp_path):
    root = copy_of(checkpoints, "diffusers", tmp_path)
    file = poison(root / "transformer", TO_K["diffusers"], [0, 1, 2, 3])
    proc, work = cli(tmp_path, f"checkpoint_dir={root}", "backend=torch")
    assert_refused_in_one_line(proc, work, [str(file), f"tensor {TO_K['diffusers']} holds 4 non-finite values"])


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_a_lora_with_nan_stops_the_cli_with_exit_2_naming_file_and_key(tmp_path):
    from parallel_wan.builtin.tiny import transformer_config

    pairs = lora_pairs(transformer_config("t2v"), modules=("attn1.to_q",))
    down, up = pairs["blocks.1.attn1.to_q"]
    up[3, 0] = float("nan")
    path = write_lora(tmp_path / "nan_lora.safetensors", pairs, "peft")
    proc, work = cli(tmp_path, f"lora={path}", "backend=torch")
    assert_refused_in_one_line(
        proc, work, [f"lora={path}", "tensor transformer.blocks.1.attn1.to_q.lora_B.weight", "holds 1 non-finite value"]
    )
