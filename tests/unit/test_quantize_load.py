"""quantize=fp8|int8|nvfp4 at load (weights/quantized/at_load.py): the block linears of a wide checkpoint
become quantize_rows of the stored weight (nvfp4: its packed values, e4m3 block scales and global
scale per row; after the LoRA merge), nothing else changes; a sharded
load holds the rows of the whole one; placement (device, host for memory=swap, JAX) keeps the
quantized bytes and float32 scales; the converted-weights cache stores them under their own key;
the settings' refusals are one line before anything loads."""

from __future__ import annotations

import os

import pytest
import torch
from harness.lora_files import lora_pairs, write_lora

from parallel_wan.builtin.tiny import build_tiny, transformer_config, write_checkpoint
from parallel_wan.config import ConfigError
from parallel_wan.models.transformer import keeps_fp32
from parallel_wan.run import compose_settings, validate_job
from parallel_wan.weights import tree
from parallel_wan.weights.layout import describe_checkpoint
from parallel_wan.weights.loader import load_transformer
from parallel_wan.weights.quantized.form import KINDS, layer_names, quantize_layer, quantize_rows
from parallel_wan.weights.quantized.names import is_scale, quantizable, scale_name

EXPERT = "high_noise"


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    """The tiny T2V model (float32 files), official layout: names go through the key map too."""
    return describe_checkpoint(
        write_checkpoint(build_tiny("t2v", seed=7), tmp_path_factory.mktemp("q") / "c", "official")
    )


def _flat(*args, **kwargs):
    return tree.flatten(load_transformer(*args, **kwargs))


@pytest.mark.parametrize("kind", ["fp8", "int8", "nvfp4"])
def test_block_linears_are_quantize_rows_of_the_stored_weight(ckpt, kind):
    wide = _flat(ckpt, EXPERT, "float32", keeps_fp32)
    plain = _flat(ckpt, EXPERT, "bfloat16", keeps_fp32)
    got = _flat(ckpt, EXPERT, "bfloat16", keeps_fp32, quantize=kind)
    linears = [n for n in wide if quantizable(n)]
    assert len(linears) == 2 * 10  # 2 tiny blocks × (q, k, v, out of both attentions, two FFN linears)
    assert set(got) == set(plain) | {s for n in linears for s in layer_names(n, kind)[1:]}
    for name in linears:
        # from the stored float32 values, not a bf16 rounding
        for target, want in zip(layer_names(name, kind), quantize_layer(wide[name], kind), strict=True):
            assert got[target].dtype == want.dtype and torch.equal(
                got[target].view(torch.uint8), want.view(torch.uint8)
            )
        assert got[name].dtype == KINDS[kind] and got[scale_name(name)].dtype in (torch.float32, torch.float8_e4m3fn)
    for name in plain:  # norms, embeddings, modulation, head, biases: as without quantize=
        if not quantizable(name):
            assert got[name].dtype == plain[name].dtype and torch.equal(got[name], plain[name]), name


@pytest.mark.parametrize("kind", ["fp8", "nvfp4"])
def test_a_sharded_load_holds_the_rows_of_the_whole(ckpt, kind):
    whole = _flat(ckpt, EXPERT, "bfloat16", keeps_fp32, quantize=kind)
    for index in range(3):
        part = _flat(ckpt, EXPERT, "bfloat16", keeps_fp32, (index, 3), quantize=kind)
        assert part.keys() == whole.keys()
        for name, t in part.items():
            rows = whole[name].shape[0] if whole[name].ndim else 0
            size = -(-rows // 3)
            want = whole[name][index * size : (index + 1) * size] if whole[name].ndim else whole[name]
            assert t.dtype == want.dtype and torch.equal(t.view(torch.uint8), want.contiguous().view(torch.uint8)), name


def test_the_lora_is_merged_before_quantizing(ckpt, tmp_path):
    from parallel_wan.lora.merge import expert_lora
    from parallel_wan.models.transformer_shapes import param_shapes

    cfg = transformer_config("t2v")
    path = write_lora(tmp_path / "l.safetensors", lora_pairs(cfg, seed=3), "comfyui", alpha=2.0)

    def lora():
        return expert_lora(EXPERT, [(path, 0.7, "lora")], param_shapes(cfg))

    merged = _flat(ckpt, EXPERT, "float32", keeps_fp32, lora=lora())
    got = _flat(ckpt, EXPERT, "bfloat16", keeps_fp32, lora=lora(), quantize="int8")
    changed = 0
    for name in (n for n in merged if quantizable(n)):
        q, scale = quantize_rows(merged[name], "int8")
        assert torch.equal(got[name], q) and torch.equal(got[scale_name(name)], scale), name
        changed += 1
    assert changed == 20


def test_the_weights_cache_stores_quantized_bytes_under_their_own_key(ckpt, tmp_path):
    want = _flat(ckpt, EXPERT, "bfloat16", keeps_fp32, quantize="fp8")
    first = _flat(ckpt, EXPERT, "bfloat16", keeps_fp32, cache_dir=tmp_path, quantize="fp8")
    (entry,) = tmp_path.glob("*.safetensors")
    hit = _flat(ckpt, EXPERT, "bfloat16", keeps_fp32, cache_dir=tmp_path, quantize="fp8")
    shard = _flat(ckpt, EXPERT, "bfloat16", keeps_fp32, (1, 2), cache_dir=tmp_path, quantize="fp8")
    for got in (first, hit):
        assert got.keys() == want.keys()
        for name in want:
            assert got[name].dtype == want[name].dtype and torch.equal(
                got[name].view(torch.uint8), want[name].view(torch.uint8)
            ), name
    name = next(n for n in want if quantizable(n))
    assert shard[name].dtype == torch.float8_e4m3fn and shard[scale_name(name)].shape == (want[name].shape[0] // 2, 1)
    # quantized bytes on disk: one byte per block-linear weight, so the entry is smaller than the bf16 one
    _flat(ckpt, EXPERT, "bfloat16", keeps_fp32, cache_dir=tmp_path)
    sizes = sorted(os.path.getsize(p) for p in tmp_path.glob("*.safetensors"))
    assert len(sizes) == 2 and sizes[0] == os.path.getsize(entry) and sizes[0] < sizes[1]


@pytest.mark.parametrize("kind", ["fp8", "nvfp4"])
def test_placement_keeps_quantized_bytes_and_float32_scales(ckpt, kind):
    import ml_dtypes
    import numpy as np

    from parallel_wan.backends.jax import placement
    from parallel_wan.backends.torch.backend import start_torch_backend
    from parallel_wan.backends.torch.swap import to_host

    params = load_transformer(ckpt, EXPERT, "float32", keeps_fp32, quantize=kind)
    flat = tree.flatten(params)
    backend = start_torch_backend("cpu")
    for placed in (
        tree.flatten(backend.place(params, "bfloat16", keeps_fp32)),
        tree.flatten(to_host(params, torch.bfloat16, keeps_fp32).tree),
    ):
        for name, t in placed.items():
            want = flat[name].dtype if quantizable(name) or is_scale(name) or keeps_fp32(name) else torch.bfloat16
            assert t.dtype == want, name
            if quantizable(name) or is_scale(name):
                assert torch.equal(t.view(torch.uint8), flat[name].view(torch.uint8)), name
    if kind == "nvfp4":  # JAX reads no NVFP4 (config/quantization.py refuses it there)
        return
    name = next(n for n in flat if quantizable(n))
    host = placement.host_array(flat[name])
    assert host.dtype == np.dtype(ml_dtypes.float8_e4m3fn)
    assert np.array_equal(host.view(np.uint8), flat[name].view(torch.uint8).numpy())
    assert (
        placement._target(scale_name(name), placement.host_array(flat[scale_name(name)]), "bfloat16", keeps_fp32)
        == np.float32
    )
    assert placement._target(name, host, "bfloat16", keeps_fp32) == host.dtype


@pytest.mark.parametrize(
    "overrides, words",
    [
        (["quantize=fp4"], ["quantize='fp4'", "none, fp8, int8"]),
        (["quantize=true"], ["quantize=True", "none, fp8, int8"]),
        (["quant_compute=int8"], ["quant_compute='int8'", "auto, dequant, fp8"]),
        (["quantize=int8", "quant_compute=fp8"], ["quant_compute=fp8", "quantize=int8", "quant_compute=dequant"]),
        (["backend=jax", "quant_compute=fp8"], ["quant_compute=fp8", "backend=jax", "quant_compute=dequant"]),
        (["backend=jax", "quantize=nvfp4"], ["quantize=nvfp4", "backend=jax", "quantize=fp8", "backend=torch"]),
    ],
)
def test_bad_quantization_settings_are_one_line_before_loading(overrides, words, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(ConfigError) as err:
        validate_job(compose_settings(overrides) | {"output_dir": str(out)}, 1)
    msg = str(err.value)
    assert "\n" not in msg and all(w in msg for w in words), msg
    assert not out.exists()


def test_quantization_settings_and_result_keys():
    from harness.settings import spec_for

    from parallel_wan.jobs.keys import result_settings

    plain, fp8 = spec_for(), spec_for("quantize=fp8", "dtype=float32")  # fp8 weights widened to float32: allowed
    assert (plain.quantization.quantize, plain.quantization.compute) == ("none", "auto")
    assert (fp8.quantization.quantize, fp8.execution.dtype) == ("fp8", "float32")
    assert fp8.to_dict()["quantize"] == "fp8" and plain.to_dict()["quant_compute"] == "auto"
    # at their defaults the settings leave the result key as it was before they existed
    assert "quantize" not in result_settings(plain) and "quant_compute" not in result_settings(plain)
    assert result_settings(fp8)["quantize"] == "fp8"
    assert result_settings(spec_for("quant_compute=dequant"))["quant_compute"] == "dequant"
