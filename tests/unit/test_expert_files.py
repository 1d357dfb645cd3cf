"""Expert files in the loader's other paths: the converted-weights cache stores the quantized
bytes and scales, a LoRA merges into the dequantized weight and is requantized per channel
(sharded rows alike), memory=swap and a bf16 run keep the stored form, and JAX placement keeps
int8/float8 weights and float32 scales as they are."""

import dataclasses

import numpy as np
import pytest
import torch
from harness.cli import run
from harness.quantized_files import dequantized_state, loaded_with_a_lora, write_expert_file

from parallel_wan.models.transformer import keeps_fp32
from parallel_wan.weights import tree
from parallel_wan.weights.expert_file import describe_expert_file
from parallel_wan.weights.loader import load_transformer
from parallel_wan.weights.quantized.form import dequantize, quantize_rows
from parallel_wan.weights.safetensors_io import chunk_rows

EXPERT = "high_noise"


@pytest.fixture(scope="module")
def ckpt(tiny_t2v, tmp_path_factory):
    """The tiny checkpoint with its high-noise expert from a ComfyUI int8 blockwise file and the
    low-noise one from a Kijai scaled fp8 file."""
    from parallel_wan.weights.layout import describe_checkpoint

    folder = tmp_path_factory.mktemp("expert_files")
    model, base = tiny_t2v.model, describe_checkpoint(tiny_t2v.diffusers)
    high = write_expert_file(folder / "high.safetensors", model.transformer, "comfy_int8")
    low = write_expert_file(folder / "low.safetensors", model.transformer_2, "scaled_fp8", prefix=True)
    files = {
        "high_noise": describe_expert_file("weights_high", high, base.transformers["high_noise"]),
        "low_noise": describe_expert_file("weights_low", low, base.transformers["low_noise"]),
    }
    return dataclasses.replace(base, expert_files=files)


def test_the_weights_cache_stores_the_quantized_form(ckpt, tmp_path):
    direct = tree.flatten(load_transformer(ckpt, EXPERT, "bfloat16", keeps_fp32))
    first = tree.flatten(load_transformer(ckpt, EXPERT, "bfloat16", keeps_fp32, cache_dir=tmp_path))
    entries = list(tmp_path.glob("*.safetensors"))
    assert len(entries) == 1
    hit = tree.flatten(load_transformer(ckpt, EXPERT, "bfloat16", keeps_fp32, cache_dir=tmp_path))
    shard = tree.flatten(load_transformer(ckpt, EXPERT, "bfloat16", keeps_fp32, (1, 2), cache_dir=tmp_path))
    assert direct["blocks.0.attn1.to_q.weight"].dtype is torch.int8
    assert direct["blocks.0.attn1.to_q.weight_scale"].dtype is torch.float32
    for name, t in direct.items():
        assert first[name].dtype == hit[name].dtype == t.dtype and torch.equal(hit[name], t), name
        rows = chunk_rows(t.shape[0], 1, 2) if t.ndim else None
        assert torch.equal(shard[name], t[rows[0] : rows[1]] if rows else t), name
    # The entry's key holds the file: the checkpoint's own expert has another entry.
    plain = dataclasses.replace(ckpt, expert_files={})
    load_transformer(plain, EXPERT, "bfloat16", keeps_fp32, cache_dir=tmp_path)
    assert len(list(tmp_path.glob("*.safetensors"))) == 2


def test_a_lora_is_merged_dequantized_then_requantized_per_channel(ckpt, tiny_t2v, tmp_path):
    pairs, whole, half, stored = loaded_with_a_lora(ckpt, EXPERT, tmp_path)
    for module, (down, up) in pairs.items():
        name = module + ".weight"
        want = stored[name] + 0.7 * (2.0 / 4) * (up @ down)  # s·(α/r)·up·down, in float32
        q, scale = quantize_rows(want, "int8")
        # The merge adds s·α/r·up·down inside one GEMM (addmm_'s alpha); `want` multiplies after
        # the product. The two float32 sums differ by a few ulps — and which ulps depends on the
        # GEMM's code path (it failed once in CI as an exact comparison, 1 ulp in one row's scale)
        # — so a row's absmax, hence its scale, may move by ulps and a value on a rounding
        # boundary by one int8 step.
        assert whole[name].dtype is torch.int8, name
        assert (whole[name].int() - q.int()).abs().max() <= 1, name
        torch.testing.assert_close(whole[name + "_scale"], scale.expand_as(whole[name + "_scale"]), rtol=1e-6, atol=0)
        # one rounding more than the file's own: at most half an int8 step of each row
        step = want.abs().amax(1, keepdim=True) / 127
        assert ((dequantize(whole[name], whole[name + "_scale"]) - want).abs() <= step / 2 + 1e-7).all()
        # a shard of the rows is the same merge on fewer rows: the whole's rows, bit for bit
        begin, end = chunk_rows(q.shape[0], 1, 2)
        assert torch.equal(half[name], whole[name][begin:end])
        assert torch.equal(half[name + "_scale"][:, :1], whole[name + "_scale"][begin:end, :1])


def test_swap_and_bf16_runs_keep_the_stored_form(ckpt, tiny_t2v, tmp_path):
    """memory=swap (the low-noise expert waits in host memory, then is copied in) renders the
    resident run's frames bit for bit; and a bf16 run (the widening casts to bf16) renders close to the float32 one."""
    high, low = (str(ckpt.expert_files[e].path) for e in ("high_noise", "low_noise"))
    files = {"weights_high": high, "weights_low": low, "steps": 3, "guidance_high": 4.0, "guidance_low": 3.0}
    resident = run(tmp_path / "resident", tiny_t2v.diffusers, **files)
    swap = run(tmp_path / "swap", tiny_t2v.diffusers, memory="swap", **files)
    np.testing.assert_array_equal(swap["frames"], resident["frames"])
    bf16 = run(tmp_path / "bf16", tiny_t2v.diffusers, dtype="bfloat16", **files)
    # bf16 compute vs fp32: a bf16 run of the tiny model moves frames by tens of levels, never the whole range
    diff = np.abs(bf16["frames"].astype(np.int16) - resident["frames"].astype(np.int16))
    assert 0 < diff.mean() < 16, diff.mean()


def test_torch_and_jax_placement_keep_quantized_weights_and_float32_scales(ckpt):
    import ml_dtypes

    from parallel_wan.backends.jax import placement
    from parallel_wan.backends.torch.backend import start_torch_backend

    params = load_transformer(ckpt, "low_noise", "bfloat16", keeps_fp32)
    placed = tree.flatten(start_torch_backend("cpu").place(params, "bfloat16", keeps_fp32))
    assert placed["blocks.0.attn1.to_q.weight"].dtype is torch.float8_e4m3fn
    assert placed["blocks.0.attn1.to_q.weight_scale"].dtype is torch.float32
    assert placed["proj_out.weight"].dtype is torch.bfloat16  # the head, quantized in the file, widened at load
    host = placement.to_host(params, "bfloat16", keeps_fp32)
    attn = host["blocks"]["attn1"]["to_q"]
    assert attn["weight"].dtype == np.dtype(ml_dtypes.float8_e4m3fn) and attn["weight"].shape[0] == 2
    assert attn["weight_scale"].dtype == np.float32
    want = params["blocks"][1]["attn1"]["to_q"]["weight"].view(torch.uint8).numpy()
    assert np.array_equal(attn["weight"][1].view(np.uint8), want)  # bit for bit


def test_float8_without_any_scale_loads_with_scale_one(tiny_t2v, tmp_path):
    """ComfyUI's older unscaled fp8 experts: float8_e4m3fn block linears, no scales at all (W = q)."""
    from harness.quantized_files import edited_file

    from parallel_wan.weights.layout import describe_checkpoint

    def unscaled(tensors, metadata):
        for name in [n for n in tensors if n.startswith("blocks.") and n.endswith(("attn.q.weight", "ffn.0.weight"))]:
            tensors[name] = tensors[name].to(torch.float8_e4m3fn)

    plain = write_expert_file(tmp_path / "plain.safetensors", tiny_t2v.model.transformer, "plain_bf16")
    path = edited_file(plain, tmp_path / "fp8.safetensors", unscaled)
    base = describe_checkpoint(tiny_t2v.diffusers)
    file = describe_expert_file("weights_high", path, base.transformers[EXPERT])
    assert (file.format, file.stored_dtype, len(file.quantized)) == ("fp8_unscaled", "float8_e4m3fn", 6)
    flat = tree.flatten(load_transformer(dataclasses.replace(base, expert_files={EXPERT: file}), EXPERT, "float32"))
    want = dequantized_state(path)["blocks.1.attn2.to_q.weight"]
    assert flat["blocks.1.attn2.to_q.weight"].dtype is torch.float8_e4m3fn
    assert torch.equal(flat["blocks.1.attn2.to_q.weight_scale"], torch.ones(128, 1))
    assert torch.equal(dequantize(flat["blocks.1.attn2.to_q.weight"], flat["blocks.1.attn2.to_q.weight_scale"]), want)


def test_quantize_on_an_expert_file_keeps_what_the_file_quantized(ckpt):
    """`quantize=fp8` with an int8 blockwise file: the file's block linears stay as stored (int8
    with their (out, G) scales — quantizing them again would round twice), and only tensors the
    file holds wide could be quantized (none of the block linears here). The Kijai fp8 expert
    likewise keeps its float8 bytes and scalar-per-row scales exactly."""
    for expert in ("high_noise", "low_noise"):
        plain = tree.flatten(load_transformer(ckpt, expert, "bfloat16", keeps_fp32))
        quantized = tree.flatten(load_transformer(ckpt, expert, "bfloat16", keeps_fp32, quantize="fp8"))
        assert quantized.keys() == plain.keys()
        for name, t in plain.items():
            assert quantized[name].dtype == t.dtype and torch.equal(quantized[name], t), (expert, name)
