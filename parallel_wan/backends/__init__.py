"""The backends a run can use, and the one place a backend is made for a run's settings.

`make_backend(spec, launch)` starts what the backend needs process-wide first (torch: the device
and the process group, backends/torch/world.py; JAX's hosts join in run.py before anything
else) and then constructs the backend from a device and a mesh; the backend's interface is
backends/contract.py. `single_controller(name)` answers, without importing torch or jax, the
one question about a backend that is asked before it exists (how many loop states a saved job
holds: jobs/runner.py).
"""

from __future__ import annotations

# One process drives every device and holds global arrays (JAX), or one process per device,
# each with its own shard (torch).
SINGLE_CONTROLLER = {"torch": False, "jax": True}


def single_controller(name: str) -> bool:
    return SINGLE_CONTROLLER[name]


def make_backend(spec, launch=None):
    """The backend `spec.execution.backend` names, on `spec.execution.device` and `spec.mesh` (`launch`: who this
    process is in the job, parallel_wan/launch; None: one process)."""
    if spec.execution.backend == "jax":
        from .jax.backend import JaxBackend

        return JaxBackend(spec.mesh, spec.execution.device, fsdp=spec.memory.jax_fsdp)
    from .torch.backend import start_torch_backend

    backend = start_torch_backend(
        spec.execution.device,
        spec.mesh,
        launch,
        spec.execution.dist_timeout_s,
        spec.execution.attention_impl,
        spec.execution.compile,
    )
    use_quant_compute(backend, spec.quantization.compute)
    return backend


def use_quant_compute(backend, setting: str) -> None:
    """quant_compute=auto|dequant|fp8 decided on the torch backend's device (fp8_gemm.py): the
    ops namespace the model gets, and the choice the sidecar records; logged on rank 0."""
    from .torch import fp8_gemm

    choice = fp8_gemm.choose(setting, backend.device, compiled=bool(getattr(backend, "compile", False)))
    backend.ops, backend.quant_compute = fp8_gemm.ops_for(choice), choice
    if backend.is_main:
        fp8_gemm.log_choice(setting, choice, backend.device)
