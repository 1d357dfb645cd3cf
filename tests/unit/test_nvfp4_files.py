"""NVFP4 expert files (ComfyUI's and LightX2V's) through the loader: every block linear lands in
the one in-memory form (packed uint8, row-order e4m3 block scales, float32 global per row) whose
widening is, bit for bit, the harness's own dequantization of the file (tests/harness/
quantized_files.py: written from the format, not from the loader); a sharded load holds the
whole load's rows; the converted-weights cache keeps the form; a LoRA is merged into the
dequantized weight and requantized to NVFP4."""

import dataclasses

import pytest
import torch
from harness.quantized_files import dequantized_state, loaded_with_a_lora, write_expert_file

from parallel_wan.models.transformer import keeps_fp32
from parallel_wan.weights import tree
from parallel_wan.weights.expert_file import describe_expert_file
from parallel_wan.weights.loader import load_transformer
from parallel_wan.weights.quantized import nvfp4
from parallel_wan.weights.quantized.form import dequantize
from parallel_wan.weights.quantized.names import global_scale_name, quantizable, scale_name
from parallel_wan.weights.safetensors_io import chunk_rows

EXPERT = "high_noise"


@pytest.fixture(scope="module", params=["comfy_nvfp4", "lightx2v_nvfp4"])
def ckpt(request, tiny_t2v, tmp_path_factory):
    from parallel_wan.weights.layout import describe_checkpoint

    base = describe_checkpoint(tiny_t2v.diffusers)
    path = write_expert_file(
        tmp_path_factory.mktemp("nvfp4") / "high.safetensors", tiny_t2v.model.transformer, request.param
    )
    described = describe_expert_file("weights_high", path, base.transformers[EXPERT])
    return dataclasses.replace(base, expert_files={EXPERT: described})


def _widened(flat, name):
    return dequantize(flat[name], flat[scale_name(name)], flat[global_scale_name(name)])


def test_the_loaded_form_widens_to_the_files_dequantization(ckpt):
    flat = tree.flatten(load_transformer(ckpt, EXPERT, "float32", keeps_fp32))
    want = dequantized_state(ckpt.expert_files[EXPERT].path)
    for name, w in want.items():
        if quantizable(name):
            rows, cols = w.shape
            assert flat[name].dtype == torch.uint8 and flat[name].shape == (rows, cols // 2), name
            assert flat[scale_name(name)].dtype == torch.float8_e4m3fn and flat[scale_name(name)].shape == (
                rows,
                cols // 16,
            )
            assert flat[global_scale_name(name)].shape == (rows, 1), name
            assert torch.equal(_widened(flat, name), w), name
        else:
            assert torch.equal(flat[name].to(torch.float32), w.to(torch.float32)), name
    for index in range(3):  # a sharded load: its rows only, the whole load's bytes
        part = tree.flatten(load_transformer(ckpt, EXPERT, "float32", keeps_fp32, (index, 3)))
        for name, t in part.items():
            rows = chunk_rows(flat[name].shape[0], index, 3) if flat[name].ndim else None
            whole = flat[name][rows[0] : rows[1]] if rows else flat[name]
            assert torch.equal(t.view(torch.uint8), whole.contiguous().view(torch.uint8)), name


def test_the_weights_cache_keeps_the_nvfp4_form(ckpt, tmp_path):
    direct = tree.flatten(load_transformer(ckpt, EXPERT, "bfloat16", keeps_fp32))
    load_transformer(ckpt, EXPERT, "bfloat16", keeps_fp32, cache_dir=tmp_path)
    hit = tree.flatten(load_transformer(ckpt, EXPERT, "bfloat16", keeps_fp32, cache_dir=tmp_path))
    assert len(list(tmp_path.glob("*.safetensors"))) == 1
    for name, t in direct.items():
        assert hit[name].dtype == t.dtype and torch.equal(hit[name].view(torch.uint8), t.view(torch.uint8)), name


def test_a_lora_is_merged_dequantized_then_requantized_to_nvfp4(ckpt, tmp_path):
    pairs, whole, half, stored = loaded_with_a_lora(ckpt, EXPERT, tmp_path)
    for module, (down, up) in pairs.items():
        name = module + ".weight"
        want = stored[name] + 0.7 * (2.0 / 4) * (up @ down)  # s·(α/r)·up·down, in float32
        got = _widened(whole, name)
        assert whole[name].dtype == torch.uint8 and whole[scale_name(name)].dtype == torch.float8_e4m3fn
        # requantized: within NVFP4's rounding of the merged weight (≈ 9.5% RMS for Gaussian rows)
        assert float((got - want).norm() / want.norm()) < 0.12, name
        again = nvfp4.dequantize(*nvfp4.quantize(want))  # the same requantization, up to GEMM ulps
        assert float((got - again).norm() / want.norm()) < 0.02, name
        rows = chunk_rows(want.shape[0], 1, 2)
        assert torch.equal(_widened(half, name), got[rows[0] : rows[1]]), name
