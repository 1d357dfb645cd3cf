"""How a process of a run joins its job, per backend, before any setting is checked against the
world: who it is (its rank, whether it speaks), how many processes there are, and the world
size the mesh is checked against — processes for torch (one per device), devices for JAX (one
process drives a host's devices; several hosts join through `jax.distributed` here, before
anything touches a device). Nothing heavy starts here: torch's process group is started with
the backend (backends/__init__.py `make_backend`), after the settings passed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..launch import Launch


@dataclass(frozen=True)
class JobProcess:
    rank: int  # this process in the job (rank 0 speaks and writes)
    count: int  # processes in the job
    world: int  # what the mesh must use: torch processes, or the JAX devices this job sees
    local_rank: int = 0
    node_size: int | None = None  # processes per node, as the launcher says (mesh=auto)
    launch: Launch | None = None  # for make_backend (torch)
    note: str | None = None  # a line for the log (JAX on several hosts)
    shutdown: Callable[[], None] = field(default=lambda: None)


def join_job(backend: str, device: str = "auto") -> JobProcess:
    """This process's place in the job for `backend` ("torch" or "jax"). Raises ConfigError
    for launcher variables that cannot be read."""
    if backend == "jax":
        return _join_jax(device)
    from ..launch import detect, require_coordinator
    from ..launch.backend_choice import node_size

    # The launcher's variables are read without torch: a bad setting is refused in well under a
    # second, before torch (2 s of imports) loads — it loads once the settings passed.
    launch = require_coordinator(detect())
    return JobProcess(
        launch.rank,
        launch.world_size,
        launch.world_size,
        launch.local_rank,
        node_size(),
        launch,
        shutdown=_shutdown_torch,
    )


def _shutdown_torch() -> None:
    import sys

    if "torch.distributed" in sys.modules:  # no process group can exist before torch loaded
        from .torch.world import shutdown

        shutdown()


def _join_jax(device: str) -> JobProcess:
    import warnings

    from .jax import multihost
    from .jax.backend import visible_devices

    # JAX warns on any fork; the only fork here is imageio's ffmpeg subprocess, which execs at once.
    warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
    started = multihost.start()
    note = None
    if started.process_count > 1:
        note = f"JAX multi-host: process {started.process_index} of {started.process_count} ({started.how})"
    return JobProcess(started.process_index, started.process_count, len(visible_devices(device)), note=note)


def check_device(spec, local_rank: int = 0, world_size: int = 1) -> None:
    """The run's device and kernel settings against this machine, before anything loads (torch:
    no CUDA, cuda:N on many ranks, an attention_impl whose kernels cannot run here,
    sequence_parallel=xfuser without CUDA or the package; JAX checked its platform when it
    counted the devices). Raises ConfigError."""
    if spec.execution.backend == "torch":
        from ..errors import ConfigError
        from .torch.world import pick_device

        device = pick_device(spec.execution.device, local_rank, world_size)
        if spec.execution.attention_impl != "auto":
            _check_attention_kernel(spec, device)
        if spec.execution.sequence_parallel == "xfuser":
            from .torch.xfuser_attention import xfuser_unavailable_reason

            reason = xfuser_unavailable_reason(spec.execution.sequence_parallel_set_by)
            if reason:
                raise ConfigError(reason)


def _check_attention_kernel(spec, device) -> None:
    """attention_impl=sdpa|flash|cudnn|sage (its registered kernels: backends/torch/kernels/)
    against this device, the run's dtype and the model's head_dim (its architecture's: every
    Wan 2.2 model has 128), before anything loads."""
    from ..errors import ConfigError
    from ..models.registry import architecture
    from .torch import ops
    from .torch.attention_impl import unavailable_reason

    head_dim = architecture(spec.model.architecture).transformer.attention_head_dim
    reason = unavailable_reason(spec.execution.attention_impl, device, head_dim, ops.dtype(spec.execution.dtype))
    if reason:
        raise ConfigError(reason)
