"""The backends a run can use, and the one place a backend is made for a run's settings.

`make_backend(spec, launch)` starts what the backend needs process-wide first (torch: the device
and the process group, backends/torch/world.py; JAX's hosts join in run.py before anything
else) and then constructs the backend from a device and a mesh; the backend's interface is
backends/contract.py. `single_controller(name)` answers, without importing torch or jax, the
one question about a backend that is asked before it exists (how many loop states a saved job
holds: jobs/runner.py).
"""

from __future__ import annotations

from .capabilities import capabilities


def single_controller(name: str) -> bool:
    """One process drives every device and holds global arrays (JAX), or one process per device,
    each with its own shard (torch): backends/capabilities.py."""
    return capabilities(name).single_controller


def make_backend(spec, launch=None, compile_backend: str = "inductor"):
    """The backend `spec.execution.backend` names, on `spec.execution.device` and `spec.mesh` (`launch`: who this
    process is in the job, parallel_wan/launch; None: one process). `compile_backend`: torch.compile's backend
    for compile=true (tests pass "aot_eager", graph capture only, to stay fast on CPU)."""
    if spec.execution.backend == "jax":
        from .jax.backend import JaxBackend

        return JaxBackend(
            spec.mesh,
            spec.execution.device,
            fsdp=spec.shards_weights_over_mesh,
            compile_cache=spec.execution.compile_cache,
        )
    from .torch.backend import start_torch_backend

    backend = start_torch_backend(
        spec.execution.device,
        spec.mesh,
        launch,
        spec.execution.dist_timeout_s,
        spec.execution.attention_impl,
        spec.execution.compile,
        sequence_parallel=spec.execution.sequence_parallel,
        quant_compute=spec.quantization.compute,
        compile_backend=compile_backend,
    )
    if backend.leader:
        from .torch import fp8_gemm

        fp8_gemm.log_choice(spec.quantization.compute, backend.quant_compute, backend.device)
    return backend
