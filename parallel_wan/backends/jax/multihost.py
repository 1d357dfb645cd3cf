"""Starting JAX on one host or on several.

One process per host drives every local device; several hosts join one runtime through
`jax.distributed.initialize()`, which must run before anything touches a device. It is
called only when the environment says this process is one of several:

- `JAX_COORDINATOR_ADDRESS=host:port` with `JAX_NUM_PROCESSES` and `JAX_PROCESS_ID` (any
  cluster, set by hand or by a launcher);
- SLURM with more than one task (`SLURM_NTASKS` > 1; `srun`, one task per host);
- a multi-host Cloud TPU slice (`TPU_WORKER_HOSTNAMES` lists more than one host; every host
  runs the same command).

Anything else is one host, and nothing is initialized. Every process then runs the same
program on global arrays; only process 0 logs and writes outputs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class JaxLaunch:
    process_index: int
    process_count: int
    how: str


def several_hosts(env: Mapping[str, str] = os.environ) -> str | None:
    """Why this process is one of several hosts, or None for a single-host run."""
    if env.get("JAX_COORDINATOR_ADDRESS"):
        return f"JAX_COORDINATOR_ADDRESS={env['JAX_COORDINATOR_ADDRESS']}"
    if env.get("SLURM_JOB_ID") and int(env.get("SLURM_NTASKS", "1") or 1) > 1:
        return f"SLURM job {env['SLURM_JOB_ID']} with {env['SLURM_NTASKS']} tasks"
    hosts = [h for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h.strip()]
    if len(hosts) > 1:
        return f"TPU slice with {len(hosts)} hosts"
    return None


def start(env: Mapping[str, str] = os.environ) -> JaxLaunch:
    """Join the multi-host runtime when launched on several hosts; otherwise do nothing."""
    import jax

    reason = several_hosts(env)
    if reason is None:
        return JaxLaunch(0, 1, "single host")
    if not jax.distributed.is_initialized():
        kwargs = {}
        if env.get("JAX_COORDINATOR_ADDRESS"):
            kwargs["coordinator_address"] = env["JAX_COORDINATOR_ADDRESS"]
            if env.get("JAX_NUM_PROCESSES"):
                kwargs["num_processes"] = int(env["JAX_NUM_PROCESSES"])
            if env.get("JAX_PROCESS_ID"):
                kwargs["process_id"] = int(env["JAX_PROCESS_ID"])
        jax.distributed.initialize(**kwargs)  # the rest is detected (SLURM, TPU metadata)
    return JaxLaunch(jax.process_index(), jax.process_count(), reason)
