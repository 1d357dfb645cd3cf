"""The memory planner under quantize=fp8|int8|nvfp4: its weight bytes are the loaded quantized
expert's (one byte per block-linear weight and a float32 scale per row; nvfp4: half a byte, an
e4m3 scale per 16 and a float32 per row), and for A14B the weights' share of a rank halves (nvfp4:
0.30 of bf16's)."""

import pytest

from parallel_wan import memory_plan as planner


def _bytes(tree):
    from parallel_wan.weights.tree import iter_leaves

    return sum(t.numel() * t.element_size() for _, t in iter_leaves(tree))


@pytest.mark.parametrize("kind", ["fp8", "int8", "nvfp4"])
def test_quantized_weight_bytes_equal_the_loaded_expert(tiny_t2v, kind):
    from parallel_wan.builtin.tiny import transformer_config
    from parallel_wan.models.transformer import keeps_fp32
    from parallel_wan.weights.layout import describe_checkpoint
    from parallel_wan.weights.loader import load_transformer

    ckpt = describe_checkpoint(tiny_t2v.diffusers)
    shapes = planner.transformer_shapes(transformer_config("t2v"))
    loaded = _bytes(load_transformer(ckpt, "high_noise", "bfloat16", keeps_fp32, quantize=kind))
    assert planner.expert_bytes(shapes, "bfloat16", 1, kind).whole == loaded
    assert loaded < planner.expert_bytes(shapes, "bfloat16", 1).whole
    for world in (2, 4):  # each rank's chunk (FSDP pads dim 0) holds at least its unpadded rows
        eb = planner.expert_bytes(shapes, "bfloat16", world, kind)
        chunk = _bytes(load_transformer(ckpt, "high_noise", "bfloat16", keeps_fp32, shard=(1, world), quantize=kind))
        assert chunk <= eb.sharded_blocks + eb.rest_chunk


def test_a14b_fp8_halves_the_weights_per_rank():
    """What `python -m parallel_wan.plan model=wan2.2_t2v_a14b mesh=ulysses8 quantize=fp8` counts
    for the weights (BENCHMARKS.md "Quantized weights")."""
    from parallel_wan.config.compose import compose_settings
    from parallel_wan.memory_plan.cli import planning_spec
    from parallel_wan.models.registry import ARCHITECTURES

    shapes = planner.transformer_shapes(ARCHITECTURES["wan2.2_t2v_a14b"].transformer)
    bf16, fp8 = planner.expert_bytes(shapes, "bfloat16", 8), planner.expert_bytes(shapes, "bfloat16", 8, "fp8")
    # the block linears are ~98 % of an expert's bytes; norms, modulation, embeddings and the head stay
    assert 0.5 < fp8.whole / bf16.whole < 0.52, fp8.whole / bf16.whole
    assert fp8.widened == 13824 * 5120 * 2 and bf16.widened == 0  # the FFN's linear, widened to bf16 as it runs
    raw = compose_settings(["model=wan2.2_t2v_a14b", "mesh=ulysses8", "quantize=fp8"]) | {"output_dir": "/tmp/unused"}
    weights = planner.weight_bytes(planning_spec(raw, 8), fp8)
    assert weights["denoise"] == 2 * fp8.whole + fp8.widened and weights["encode"] == 2 * fp8.whole
    assert "quantize=fp8" in weights["note"]
    # nvfp4: 0.5625 bytes a block-linear weight (+ 4 per row): 0.295 of bf16's expert, 0.58 of fp8's
    nvfp4 = planner.expert_bytes(shapes, "bfloat16", 8, "nvfp4")
    assert 0.29 < nvfp4.whole / bf16.whole < 0.30 and 0.57 < nvfp4.whole / fp8.whole < 0.59, nvfp4.whole
