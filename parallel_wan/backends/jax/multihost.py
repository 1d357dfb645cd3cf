"""Starting JAX on one host or on several.

One process per host drives every local device; several hosts join one runtime through
`jax.distributed.initialize()`, which must run before anything touches a device. Whether this
process is one of several is read in one place, `parallel_wan/launch/`:

- `JAX_COORDINATOR_ADDRESS=host:port` with `JAX_NUM_PROCESSES` and `JAX_PROCESS_ID` (any
  cluster, set by hand or by a launcher);
- a multi-host Cloud TPU job on GKE, e.g. XPK (`TPU_WORKER_HOSTNAMES` lists more than one
  host, or `MEGASCALE_NUM_SLICES` > 1; every host runs the same command);
- SLURM with more than one task (`srun`).

Anything else is one host, and nothing is initialized. Every process then runs the same
program on global arrays; only process 0 logs and writes outputs.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

from ...config import ConfigError
from ...launch import TORCHRUN, TPU, Launch, detect, require_coordinator

log = logging.getLogger("parallel_wan")


@dataclass(frozen=True)
class JaxLaunch:
    process_index: int
    process_count: int
    how: str


def initialize_kwargs(launch: Launch) -> dict | None:
    """The arguments for `jax.distributed.initialize`, or None when there is one process."""
    if launch.world_size == 1:
        return None
    if launch.kind == TORCHRUN:
        raise ConfigError(
            f"backend=jax was started by torchrun ({launch.world_size} processes); JAX runs one "
            "process per host, which drives all of the host's devices: start it with "
            "`python -m parallel_wan.run backend=jax` once per host (srun, XPK or JAX_* variables)"
        )
    if launch.kind == TPU:
        # JAX reads the TPU variables itself and also waits for the coordinator's DNS name,
        # which on GKE appears only once every pod of the job exists.
        return {}
    require_coordinator(launch)
    return {"coordinator_address": launch.coordinator, "num_processes": launch.world_size, "process_id": launch.rank}


def start(env: Mapping[str, str] = os.environ) -> JaxLaunch:
    """Join the multi-host runtime when launched on several hosts; otherwise do nothing."""
    import jax

    launch = detect(env)
    kwargs = initialize_kwargs(launch)
    if kwargs is None:
        return JaxLaunch(0, 1, launch.source)
    if not jax.distributed.is_initialized():
        jax.distributed.initialize(**kwargs)
    if (jax.process_index(), jax.process_count()) != (launch.rank, launch.world_size):
        log.warning(
            "JAX numbers this process %d of %d but %s said %d of %d; going with JAX's numbering",
            jax.process_index(),
            jax.process_count(),
            launch.source,
            launch.rank,
            launch.world_size,
        )
    return JaxLaunch(jax.process_index(), jax.process_count(), launch.source)
