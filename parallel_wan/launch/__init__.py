"""Who this process is in a job: the one place that reads launcher variables.

Every launcher tells a process its rank, the world size, its rank on the node and where the
coordinator listens, each in its own variables. `detect()` reads them, in this order, and
names what it found in `Launch.source`:

1. torchrun (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`). Checked
   first: under `srun torchrun` the SLURM variables describe the torchrun agent (one per
   node), not the worker.
2. JAX's own variables (`JAX_COORDINATOR_ADDRESS=host:port`, `JAX_NUM_PROCESSES`,
   `JAX_PROCESS_ID`), set by hand or by a launcher.
3. A multi-host TPU job on GKE (XPK): `TPU_WORKER_HOSTNAMES` (or `TPU_PROCESS_ADDRESSES`) and
   `TPU_WORKER_ID` inside a slice, `MEGASCALE_NUM_SLICES` / `MEGASCALE_SLICE_ID` /
   `MEGASCALE_COORDINATOR_ADDRESS` across slices. Process id = slice · hosts + worker, the
   numbering JAX's TPU cluster detection uses.
4. SLURM tasks started by `srun` without torchrun (`SLURM_PROCID`, `SLURM_NTASKS`,
   `SLURM_LOCALID`, the node list). The coordinator is the first node of the step's node
   list (parsed here: `scontrol` may be absent where the job runs) unless `MASTER_ADDR` is
   set; the port is `MASTER_PORT` or `slurm_port(SLURM_JOB_ID)`, the same every task computes.
5. Otherwise one process.

`python -m parallel_wan.launch` prints what a process started the same way would see;
`python -m parallel_wan.launch first-host LIST` prints the first host of a SLURM host list.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from ..config import ConfigError

# JAX's coordinator port on TPU (jax._src.clusters.cloud_tpu_cluster); JAX_COORDINATOR_PORT overrides.
TPU_COORDINATOR_PORT = 8482

TORCHRUN, JAX, TPU, SLURM, SINGLE = "torchrun", "jax", "tpu", "slurm", "single"


@dataclass(frozen=True)
class Launch:
    rank: int
    world_size: int
    local_rank: int
    source: str  # which launcher's variables were found, in words
    host: str | None = None  # the coordinator (rank 0's rendezvous), when the launcher names one
    port: int | None = None
    kind: str = SINGLE  # TORCHRUN | JAX | TPU | SLURM | SINGLE

    @property
    def coordinator(self) -> str | None:
        return None if self.host is None else f"{self.host}:{self.port}"

    def describe(self) -> str:
        if self.world_size == 1:
            return self.source
        where = f", coordinator {self.coordinator}" if self.host else ""
        return f"rank {self.rank} of {self.world_size} (local rank {self.local_rank}), launched by {self.source}{where}"


def slurm_port(job_id: int) -> int:
    """A port every task of a SLURM job derives alike: 61440 + job id mod 4096, above Linux's
    ephemeral range (32768–60999) so no outgoing connection holds it. The formula JAX uses, so
    either backend meets the same port."""
    return 61440 + job_id % 4096


# ---------------------------------------------------------------- SLURM host lists
_BRACKET = re.compile(r"\[([^\]]*)\]")


def _split_top(text: str) -> list[str]:
    """Split at commas outside brackets: 'a[1,3],b' → ['a[1,3]', 'b']."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _expand_ranges(inside: str, hostlist: str) -> list[str]:
    """'01-03,07' → ['01', '02', '03', '07'], keeping each range's zero padding."""
    out = []
    for item in inside.split(","):
        lo, _, hi = item.strip().partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()) or (hi and int(hi) < int(lo)):
            raise ConfigError(
                f"cannot read the SLURM host list {hostlist!r}: [{inside}] holds {item!r}, "
                "not a number or an increasing range like 01-04"
            )
        out.extend(str(n).zfill(len(lo)) for n in range(int(lo), int(hi or lo) + 1))
    return out


def expand_hostlist(hostlist: str) -> Iterator[str]:
    """SLURM's compressed host list, host by host: 'node[01-03,07],gpu5' → node01 node02
    node03 node07 gpu5; several bracket groups in one name expand as a product."""
    for item in _split_top(hostlist):
        pieces = _BRACKET.split(item)  # text, inside, text, inside, ..., text
        if "[" in "".join(pieces[::2]) or "]" in "".join(pieces[::2]):
            raise ConfigError(f"cannot read the SLURM host list {hostlist!r}: unbalanced brackets in {item!r}")
        names = [""]
        for i, piece in enumerate(pieces):
            choices = _expand_ranges(piece, hostlist) if i % 2 else [piece]
            names = [n + c for n in names for c in choices]
        yield from names


def first_host(hostlist: str) -> str:
    for host in expand_hostlist(hostlist):
        return host
    raise ConfigError(f"the SLURM host list {hostlist!r} names no host")


# ---------------------------------------------------------------- detection
def _int(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    value = env.get(name)
    if value is None or value == "":
        if default is None:
            raise ConfigError(f"{name} is not set; the launcher that set the other variables should set it too")
        return default
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"{name}={value!r} is not an integer") from None


def _host_port(address: str, name: str, default_port: int | None = None) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep:
        host, port = address, ""
    if not port:
        if default_port is None:
            raise ConfigError(f"{name}={address!r} has no port; write it as host:port")
        return host, default_port
    if not port.isdigit():
        raise ConfigError(f"{name}={address!r}: the port {port!r} is not a number; write host:port")
    return host, int(port)


def _torchrun(env):
    rank, world = _int(env, "RANK"), _int(env, "WORLD_SIZE")
    source = (
        "torchrun" if "TORCHELASTIC_RUN_ID" in env else "torchrun variables (RANK, WORLD_SIZE) without a torchrun agent"
    )
    host = env.get("MASTER_ADDR") or None
    port = _int(env, "MASTER_PORT", 0) or None
    return Launch(rank, world, _int(env, "LOCAL_RANK", rank), source, host, port, TORCHRUN)


def _tpu(env) -> Launch | None:
    hosts = [
        h.strip()
        for h in (env.get("TPU_PROCESS_ADDRESSES") or env.get("TPU_WORKER_HOSTNAMES") or "").split(",")
        if h.strip()
    ]
    slices = _int(env, "MEGASCALE_NUM_SLICES", 1)
    if not hosts or len(hosts) * slices == 1:
        return None
    worker, slice_id = _int(env, "TPU_WORKER_ID", 0), _int(env, "MEGASCALE_SLICE_ID", 0)
    coordinator = (env.get("MEGASCALE_COORDINATOR_ADDRESS") or hosts[0]).split(":")[0]
    port = _int(env, "JAX_COORDINATOR_PORT", TPU_COORDINATOR_PORT)
    what = f"{slices} slice{'s' if slices > 1 else ''} of {len(hosts)} host{'s' if len(hosts) > 1 else ''}"
    return Launch(
        slice_id * len(hosts) + worker, slices * len(hosts), 0, f"jax multi-host (TPU: {what})", coordinator, port, TPU
    )


def _slurm(env) -> Launch | None:
    if not env.get("SLURM_JOB_ID"):
        return None
    job = _int(env, "SLURM_JOB_ID")
    # A step's own task count when srun set it; the allocation's otherwise.
    world = _int(env, "SLURM_STEP_NUM_TASKS", 0) or _int(env, "SLURM_NTASKS", 1)
    if world <= 1:
        return Launch(0, 1, 0, f"single process (SLURM job {job}, one task)")
    nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    host = env.get("MASTER_ADDR") or (first_host(nodes) if nodes else None)  # None: see require_coordinator
    port = _int(env, "MASTER_PORT", 0) or slurm_port(job)
    return Launch(
        _int(env, "SLURM_PROCID", 0),
        world,
        _int(env, "SLURM_LOCALID", 0),
        f"slurm (srun, no torchrun): job {job}, {world} tasks",
        host,
        port,
        SLURM,
    )


def _jax(env) -> Launch:
    address = env["JAX_COORDINATOR_ADDRESS"]
    host, port = _host_port(address, "JAX_COORDINATOR_ADDRESS")
    source = f"jax multi-host (JAX_COORDINATOR_ADDRESS={address})"
    if env.get("JAX_NUM_PROCESSES") and env.get("JAX_PROCESS_ID"):
        return Launch(_int(env, "JAX_PROCESS_ID"), _int(env, "JAX_NUM_PROCESSES"), 0, source, host, port, JAX)
    cluster = _tpu(env) or _slurm(env)  # the counts may come from the cluster, as JAX allows
    if cluster is None or cluster.world_size == 1:
        raise ConfigError(
            f"JAX_COORDINATOR_ADDRESS={address} is set but JAX_NUM_PROCESSES and JAX_PROCESS_ID "
            "are not, and no SLURM or TPU variables give them; set both on every process "
            "(the same count everywhere, a different id on each)"
        )
    return Launch(
        cluster.rank, cluster.world_size, cluster.local_rank, f"{source}, counts from {cluster.source}", host, port, JAX
    )


def detect(env: Mapping[str, str] = os.environ) -> Launch:
    """This process's place in the job, from the first launcher whose variables are set."""
    if "RANK" in env and "WORLD_SIZE" in env:
        launch = _torchrun(env)
    elif env.get("JAX_COORDINATOR_ADDRESS"):
        launch = _jax(env)
    else:
        launch = _tpu(env) or _slurm(env) or Launch(0, 1, 0, "single process")
    if not (launch.world_size >= 1 and 0 <= launch.rank < launch.world_size):
        raise ConfigError(
            f"{launch.source} gives rank {launch.rank} for a world of {launch.world_size}; "
            "the rank must be in [0, world size)"
        )
    return launch


def require_coordinator(launch: Launch) -> Launch:
    """The launch, once sure its processes can meet: outside torchrun (whose agent knows) a
    multi-process job needs rank 0's address."""
    if launch.world_size > 1 and launch.kind != TORCHRUN and launch.host is None:
        raise ConfigError(
            f"{launch.source}: {launch.world_size} processes but no address for rank 0: "
            "SLURM_JOB_NODELIST is not set (start the tasks with srun) and neither is MASTER_ADDR "
            "(export MASTER_ADDR=<first node> MASTER_PORT=<free port> on every task)"
        )
    return launch


def main(argv: list[str]) -> int:
    if argv[:1] == ["first-host"] and len(argv) == 2:
        print(first_host(argv[1]))
        return 0
    if argv:
        print("usage: python -m parallel_wan.launch [first-host HOSTLIST]", file=sys.stderr)
        return 2
    print(detect().describe())
    return 0
