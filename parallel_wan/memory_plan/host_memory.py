"""How much memory new allocations of this process can get on the host, before the kernel's OOM
killer steps in.

The host's MemAvailable is not the answer inside a container (docker, Kubernetes, SLURM's
cgroup plugin): there the process may use what its memory cgroup allows, however much the host
has free. So the answer is the smaller of MemAvailable and, for the memory cgroup this process
is in and each cgroup above it, its limit minus what it already uses:

- cgroup v2 (one unified tree): `memory.max` ("max": no limit) − (`memory.current` − the
  reclaimable page cache, `inactive_file` of `memory.stat`);
- cgroup v1 (the `memory` controller's own tree): `memory.limit_in_bytes` (a near-2^63 value:
  no limit) − (`memory.usage_in_bytes` − `total_inactive_file`).

Page cache that the kernel can drop is not counted as used (Kubernetes' "working set" rule):
it is what a run's memory-mapped weights and a previous run's files fill. Reading files only:
cheap, no torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

NO_LIMIT = 1 << 60  # cgroup v1 writes "no limit" as a page-rounded 2^63 − 1


@dataclass(frozen=True)
class HostMemory:
    available: float  # bytes new allocations can get
    where: str  # what decided it, for messages


def host_memory(proc: str = "/proc", cgroup_root: str = "/sys/fs/cgroup") -> HostMemory | None:
    """The host memory this process can still use (None when even MemAvailable is unknown)."""
    available = mem_available(os.path.join(proc, "meminfo"))
    limit = cgroup_available(os.path.join(proc, "self", "cgroup"), cgroup_root)
    if limit is not None and (available is None or limit[0] < available):
        return HostMemory(*limit)
    if available is None:
        return None
    return HostMemory(available, "host memory (MemAvailable)")


def mem_available(meminfo: str = "/proc/meminfo") -> float | None:
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def cgroup_available(self_cgroup: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> tuple[float, str] | None:
    """(bytes left under the tightest memory limit of this process's cgroups, where it is), or
    None when no memory cgroup limits this process."""
    try:
        with open(self_cgroup) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    best = None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "" and os.path.exists(os.path.join(root, "cgroup.controllers")):
            found = _tightest(root, path, _v2)  # the unified tree mounted at the root
        elif "memory" in controllers.split(","):
            found = _tightest(os.path.join(root, "memory"), path, _v1)
        else:
            continue
        if found is not None and (best is None or found[0] < best[0]):
            best = found
    return best


def _tightest(mount: str, path: str, read) -> tuple[float, str] | None:
    """The smallest (limit − use) of the cgroup at `path` under `mount` and every cgroup above
    it. Inside a cgroup namespace the path may not exist under the mount (the mount's root is
    the process's own cgroup then): the mount's root is read."""
    folder = os.path.join(mount, path.lstrip("/"))
    if not os.path.isdir(folder):
        folder = mount
    best = None
    mount = os.path.abspath(mount)
    folder = os.path.abspath(folder)
    while True:
        found = read(folder)
        if found is not None and (best is None or found[0] < best[0]):
            best = found
        if folder == mount or not folder.startswith(mount):
            return best
        folder = os.path.dirname(folder)


def _number(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max": no limit


def _stat(path: str, key: str) -> int:
    try:
        with open(path) as f:
            for line in f:
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _v2(folder: str) -> tuple[float, str] | None:
    limit = _number(os.path.join(folder, "memory.max"))
    if limit is None:
        return None
    used = (_number(os.path.join(folder, "memory.current")) or 0) - _stat(
        os.path.join(folder, "memory.stat"), "inactive_file"
    )
    return _left(limit, used, f"{os.path.join(folder, 'memory.max')}", "cgroup v2")


def _v1(folder: str) -> tuple[float, str] | None:
    limit = _number(os.path.join(folder, "memory.limit_in_bytes"))
    if limit is None or limit >= NO_LIMIT:
        return None
    used = (_number(os.path.join(folder, "memory.usage_in_bytes")) or 0) - _stat(
        os.path.join(folder, "memory.stat"), "total_inactive_file"
    )
    return _left(limit, used, f"{os.path.join(folder, 'memory.limit_in_bytes')}", "cgroup v1")


def _left(limit: int, used: int, file: str, kind: str) -> tuple[float, str]:
    left = max(limit - max(used, 0), 0)
    return float(
        left
    ), f"the container's memory limit ({kind} {file}: {limit / 1e9:.2f} GB, {max(used, 0) / 1e9:.2f} GB in use)"
