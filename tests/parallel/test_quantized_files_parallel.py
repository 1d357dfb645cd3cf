"""Quantized expert files on meshes: cp4 on 4 gloo ranks (resident and memory=sharded, where
FSDP shards the int8/fp8 bytes and their scales) and JAX dp2_cp4 on 8 virtual devices, resident
and sharded (weights stored int8/fp8 with their scales, widened inside the layer scan) render what diffusers renders
from the same files dequantized (tests/references/test_quantized_files.py has the formats on
one process; one pair of formats here: Kijai scaled fp8 on the high-noise expert, ComfyUI int8
blockwise on the low-noise one, both prefixed differently)."""

import numpy as np
import pytest
from harness.cli import common
from harness.diffusers_reference import reference_frames
from harness.frames import assert_frames_close
from harness.jax_devices import require_eight_devices
from harness.quantized_files import dequantized_model, write_expert_file
from harness.ranks import run_on_ranks

GUIDANCE = {"guidance_high": 4.0, "guidance_low": 3.0}
# Torch meshes: the weights are bit-identical to diffusers' dequantized ones and the mesh changes
# only summation orders (≤ 1e-6 relative, harness/frames.py): 1 level, as on one process.
LEVELS = 1


@pytest.fixture(scope="module")
def files(tiny_t2v, tmp_path_factory):
    folder = tmp_path_factory.mktemp("quantized_mesh")
    model = tiny_t2v.model
    high = write_expert_file(folder / "high.safetensors", model.transformer, "scaled_fp8", prefix=True)
    low = write_expert_file(folder / "low.safetensors", model.transformer_2, "comfy_int8", prefix=False)
    return high, low


@pytest.fixture(scope="module")
def reference(tiny_t2v, files):
    return reference_frames(dequantized_model(tiny_t2v.model, *files), guidance_scale=4.0, guidance_scale_2=3.0)


def _overrides(tiny_t2v, files, *extra):
    high, low = files
    return [*common(tiny_t2v.diffusers, weights_high=high, weights_low=low, **GUIDANCE), *extra]


def resident_and_sharded(rank, world, overrides):
    """cp4 frames (rank 0) with the experts resident, then sharded (FSDP over the 4 ranks)."""
    from parallel_wan.backends.torch.backend import start_torch_backend
    from parallel_wan.config.compose import compose_spec
    from parallel_wan.launch import Launch
    from parallel_wan.pipeline import generate, preflight

    frames = []
    backend = None
    for memory in ("resident", "sharded"):
        spec = compose_spec([*overrides, f"memory={memory}"], world, output_dir="/tmp/unused")
        ckpt = preflight(spec)
        backend = backend or start_torch_backend(spec.execution.device, spec.mesh, Launch(rank, world, rank, "test"))
        gen = generate(spec, backend, ckpt)
        frames.append(gen.frames)
    return frames if rank == 0 else None


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_cp4_resident_and_sharded_match_diffusers(tiny_t2v, files, reference):
    resident, sharded = run_on_ranks(resident_and_sharded, 4, _overrides(tiny_t2v, files, "mesh=cp4"), timeout_s=300)[0]
    assert_frames_close(resident, reference, max_abs=LEVELS)
    assert_frames_close(sharded, reference, max_abs=LEVELS)
    np.testing.assert_array_equal(sharded, resident)  # sharding moves bytes, not arithmetic


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
@pytest.mark.parametrize("memory", ["resident", "sharded"])
def test_jax_dp2_cp4_matches_diffusers(tiny_t2v, files, reference, memory):
    """memory=sharded on JAX: the int8/float8 weights and their scales sharded over the 8
    devices (NamedSharding), gathered one layer at a time inside the scan."""
    from harness.jax_runs import generate

    require_eight_devices()
    gen, _, _ = generate(_overrides(tiny_t2v, files, "backend=jax", "mesh=dp2_cp4", f"memory={memory}"))
    # XLA sums in other orders than torch (matmuls, convs, softmax); measured: 1 level on 9 of
    # 110,592 values, so the torch bound holds here too.
    diff = np.abs(gen.frames.astype(np.int16) - reference.astype(np.int16))
    print(
        f"JAX dp2_cp4 memory={memory} with expert files vs diffusers: max {diff.max()} levels, "
        f"{(diff > 0).sum()} values"
    )
    assert_frames_close(gen.frames, reference, max_abs=LEVELS)
