"""quantize=fp8 under every memory mode and compile=true: memory=sharded (FSDP shards the float8 weights and their
float32 scales; each rank holds its rows' bytes) and memory=swap (the host copy and the exchange
move the quantized bytes) give the resident quantized run's latents exactly — they move bytes,
not arithmetic (tests/parallel/test_memory_modes.py says why exactly)."""

import numpy as np
import pytest
from harness.ranks import run_on_ranks

BASE = [
    "dtype=float32",
    "steps=3",
    "num_frames=5",
    "seed=3",
    "prompt='a dog jumps'",
    "height=32",
    "width=32",
    "quantize=fp8",
]


def _spec(overrides, world=1):
    from parallel_wan.config.compose import compose_spec

    return compose_spec(list(overrides), world, output_dir="/tmp/unused")


def resident_and_sharded(rank, world, overrides):
    """(resident latents, sharded latents, the dtypes and bytes of this rank's FSDP chunks)."""
    import tempfile

    from parallel_wan.backends.torch.backend import start_torch_backend
    from parallel_wan.launch import Launch
    from parallel_wan.pipeline import generate
    from parallel_wan.pipeline.checkpoint import builtin_checkpoint, load_components

    resident, sharded = _spec(overrides, world), _spec(overrides + ["memory=sharded"], world)
    backend = start_torch_backend(resident.execution.device, resident.mesh, Launch(rank, world, rank, "test"))
    ref = generate(resident, backend).latents
    got = generate(sharded, backend).latents
    with tempfile.TemporaryDirectory() as folder, backend.inference_mode():
        ckpt = builtin_checkpoint(sharded, folder)  # the stored tiny model generate() read
        expert = load_components(sharded, ckpt, backend).experts["high_noise"][1]
        chunks = expert.blocks[0].local_chunks()
        dtypes = {name: str(t.dtype) for name, t in chunks.items()}
        shapes = {name: tuple(t.shape) for name, t in chunks.items()}
    return ref, got, dtypes, shapes


@pytest.mark.slow  # two gloo ranks, four generations
def test_sharded_fp8_equals_resident_fp8():
    from parallel_wan.builtin.tiny import transformer_config

    dim = transformer_config("t2v").dim
    for rank, (ref, got, dtypes, shapes) in enumerate(
        run_on_ranks(resident_and_sharded, 2, BASE + ["mesh=cp2"], timeout_s=300)
    ):
        np.testing.assert_array_equal(got, ref)
        assert (
            dtypes["attn1.to_q.weight"] == "torch.float8_e4m3fn" and dtypes["ffn.net.2.weight"] == "torch.float8_e4m3fn"
        )
        assert dtypes["attn1.to_q.weight_scale"] == "torch.float32"
        # FSDP's Shard(0): half the rows of the weight and of its scale on each rank
        assert shapes["attn1.to_q.weight"] == (dim // 2, dim) and shapes["attn1.to_q.weight_scale"] == (dim // 2, 1), (
            rank
        )


@pytest.mark.parametrize("prefetch", [0, 1])
def test_swap_fp8_equals_resident_fp8(prefetch):
    from parallel_wan.backends.torch.backend import start_torch_backend
    from parallel_wan.pipeline import generate

    backend = start_torch_backend("cpu")
    ref = generate(_spec(BASE), backend).latents
    got = generate(_spec(BASE + ["memory=swap", f"swap_prefetch_steps={prefetch}"]), backend).latents
    np.testing.assert_array_equal(got, ref)


@pytest.mark.slow  # torch.compile's capture, twice
@pytest.mark.parametrize("compute", ["dequant", "fp8"])
def test_compiled_blocks_with_quantized_weights_render_the_eager_latents(compute):
    """compile=true on fp8 weights: q‖k‖v fused with their scales, the block compiled ("aot_eager":
    graph capture and guards without Inductor's C++ build, as tests/parallel/test_hot_path.py)."""
    import torch._dynamo

    from parallel_wan.backends import make_backend
    from parallel_wan.pipeline import generate

    def run(*extra):
        spec = _spec(BASE + [f"quant_compute={compute}", *extra])
        backend = make_backend(spec, compile_backend="aot_eager")
        return generate(spec, backend).latents

    eager = run()
    torch._dynamo.reset()
    compiled = run("compile=true")
    torch._dynamo.reset()
    # fp32: one fused q‖k‖v GEMM instead of three changes only the summation's blocking (the
    # fp8 path's per-token scales are per row, so fusing leaves them alone): rounding-level
    err = np.linalg.norm(compiled - eager) / np.linalg.norm(eager)
    assert err <= 1e-5, err
