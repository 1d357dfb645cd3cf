"""What each backend can do, as data: the questions config/, the planner and the entry points
ask about a backend before one exists, answered without importing torch or jax.

Code above backends/ asks `capabilities(name).<question>` instead of comparing the backend's
name (tests/unit/test_backend_contract.py holds that for every package above backends/), so a
third backend is one more entry here plus its package.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Capabilities:
    name: str
    # One process drives every device and holds global arrays (JAX), or one process per device
    # with its own shard (torch): how a world is counted, how many loop states a job saves,
    # whether a launcher's N processes make sense.
    single_controller: bool
    # memory=swap: one expert on the device, exchanged for the other at the switch.
    swap: bool
    # How memory=sharded holds the weights: "rank_rows" — each process loads 1/world of every
    # tensor and gathers a block before it runs (torch's FSDP runner); "mesh" — the arrays are
    # sharded over the device mesh and gathered a layer at a time inside the layer scan (JAX).
    sharded_memory: str
    # attention_impl= picks a local attention kernel; False: the backend picks its own per
    # platform (JAX: splash on TPU, cuDNN on GPU, jnp on CPU).
    attention_kernels: bool
    # quant_compute=fp8: FP8 GEMMs on FP8 weights (torch._scaled_mm).
    fp8_compute: bool
    # A step cache may run CFG on one expert and not the other (JAX keeps one set of cache
    # arrays for both experts' programs, so their rows must match).
    cache_rows_per_expert: bool
    # Several processes share one host's memory (torchrun's LOCAL_WORLD_SIZE); False: one
    # process per host holds every local device.
    processes_share_host: bool
    # Animate's per-segment forward inputs (pose, image context, face tokens) reach its noise
    # predictor (both backends' do; a third backend says so here when its does).
    segment_inputs: bool = False
    # S2V's clips (its sequence runs on past the video's tokens: the reference and motion tokens)
    # reach its noise predictor (both backends' do).
    s2v: bool = False
    # NVFP4 weights (packed e2m1 pairs, e4m3 block scales and a float32 global scale) are
    # widened per layer, or multiplied in FP4 where FP4 tensor cores are (torch); JAX's layer
    # scan widens one-byte weights only.
    nvfp4_weights: bool = False
    # Settings only this backend reads; set on another backend they are refused by name (torch's
    # compile=true is torch.compile of the block; JAX compiles every step with XLA anyway).
    own_settings: tuple[str, ...] = ()
    # The backend's package: its modules answer device questions asked before a backend exists
    # (`<package>.device_facts`: backends/device_facts.py).
    package: str = ""


BACKENDS: dict[str, Capabilities] = {
    "torch": Capabilities(
        name="torch",
        single_controller=False,
        swap=True,
        sharded_memory="rank_rows",
        attention_kernels=True,
        fp8_compute=True,
        cache_rows_per_expert=True,
        processes_share_host=True,
        segment_inputs=True,
        s2v=True,
        nvfp4_weights=True,
        own_settings=("compile",),
        package="parallel_wan.backends.torch",
    ),
    "jax": Capabilities(
        name="jax",
        single_controller=True,
        swap=False,
        sharded_memory="mesh",
        attention_kernels=False,
        fp8_compute=False,
        cache_rows_per_expert=False,
        processes_share_host=False,
        segment_inputs=True,
        s2v=True,
        own_settings=("scan_loop", "jax_fsdp", "compile_cache"),
        package="parallel_wan.backends.jax",
    ),
}


def capabilities(name: str) -> Capabilities:
    """The named backend's capabilities (a KeyError names a backend nobody registered)."""
    return BACKENDS[name]
