"""JAX with quantize=fp8: the layer stack stores float8 weights with float32 scales (half the
bytes of bf16 matrices on every device) and widens them inside the layer scan; dp2_cp4 with
memory=sharded (FSDP over the 8 devices) gives the one-device quantized run, and the torch
backend's quant_compute=dequant run, as the unquantized meshes do."""

import numpy as np
import pytest
from harness.jax_devices import rel_err, require_eight_devices
from harness.jax_runs import BASE, generate

SMALL = [*BASE, "steps=2", "num_frames=5", "height=32", "width=32", "quantize=fp8"]


@pytest.mark.slow  # three generations, two of them compiled for 8 devices
def test_dp2_cp4_sharded_fp8_equals_one_device_and_torch(monkeypatch):
    import jax.numpy as jnp

    require_eight_devices()
    torch_run, _, _ = generate([*SMALL, "quant_compute=dequant"], decode=False, monkeypatch=monkeypatch)
    one, _, _ = generate([*SMALL, "backend=jax", "mesh=single"], decode=False, monkeypatch=monkeypatch)
    held = {}

    def keep_params(backend):
        from parallel_wan.backends.jax import placement

        # the tiny model's matrices are under FSDP_MIN_SIZE: shard every one of them here
        monkeypatch.setattr(placement, "FSDP_MIN_SIZE", 1024)
        place = backend.place

        def spy(tree, *args, **kwargs):
            placed = place(tree, *args, **kwargs)
            if "blocks" in placed:
                held["q"] = placed["blocks"]["attn1"]["to_q"]
            return placed

        monkeypatch.setattr(backend, "place", spy)

    mesh, _, _ = generate(
        [*SMALL, "backend=jax", "mesh=dp2_cp4", "memory=sharded"],
        decode=False,
        monkeypatch=monkeypatch,
        setup=keep_params,
    )
    assert held["q"]["weight"].dtype == jnp.float8_e4m3fn and held["q"]["weight_scale"].dtype == jnp.float32
    # FSDP: each of the 8 devices holds 1/8 of the stacked float8 weight
    shard = held["q"]["weight"].addressable_shards[0].data
    assert shard.size * 8 == held["q"]["weight"].size and shard.dtype == jnp.float8_e4m3fn
    # fp32 on CPU: the mesh changes reduction orders only (tests/parallel/test_jax_pipeline.py's 1e-5)
    assert rel_err(mesh.latents, one.latents) <= 1e-5
    assert rel_err(one.latents, torch_run.latents) <= 1e-5
    assert np.isfinite(mesh.latents).all()


@pytest.mark.parametrize("memory", ["resident", "sharded"])
def test_aot_abstract_quantized_params_are_what_the_run_places(tiny_t2v, memory):
    """backends/jax/aot.py's quantize= params (the TPU AOT test's fp8 A14B step) match, leaf by
    leaf, a quantized tiny expert as JaxBackend.place puts it on the dp2_cp4 mesh: the same
    tree, shapes, float8 weights, float32 scales and shardings."""
    import jax

    from benchmarks.tpu_aot import run_spec, shapes_of
    from parallel_wan.backends.jax import aot
    from parallel_wan.backends.jax.backend import JaxBackend
    from parallel_wan.models.transformer import keeps_fp32
    from parallel_wan.weights.layout import describe_checkpoint
    from parallel_wan.weights.loader import load_transformer

    require_eight_devices()
    spec = run_spec("model=tiny", f"memory={memory}", "quantize=fp8")
    _, _, tshapes, _ = shapes_of(spec)
    backend = JaxBackend(spec.mesh, fsdp=spec.shards_weights_over_mesh)
    host = load_transformer(
        describe_checkpoint(tiny_t2v.diffusers), "high_noise", spec.execution.dtype, keeps_fp32, quantize="fp8"
    )
    placed = backend.place(host, spec.execution.dtype, keeps_fp32)
    abstract = aot.transformer_params(
        tshapes, aot.run_mesh(spec, jax.devices()), spec.execution.dtype, spec.shards_weights_over_mesh, "fp8"
    )
    assert jax.tree.structure(placed) == jax.tree.structure(abstract)
    for (path, real), want in zip(jax.tree.leaves_with_path(placed), jax.tree.leaves(abstract)):
        where = jax.tree_util.keystr(path)
        assert (real.shape, real.dtype) == (want.shape, want.dtype), where
        assert real.sharding.is_equivalent_to(want.sharding, len(want.shape)), where
