"""Issue 38 item 1: inside a container the memory a run may use is its cgroup's limit, not the
host's MemAvailable (memory_plan/host_memory.py), read from a fake /proc and cgroup tree of
each kind: cgroup v2 (one tree), v1 (the memory controller's tree), a limit set on a parent, a
cgroup namespace whose mount is the process's own cgroup, and no limit at all."""

import pytest

from parallel_wan.memory_plan import fits
from parallel_wan.memory_plan.host_memory import NO_LIMIT, host_memory

GB = 10**9


def fake(tmp_path, cgroup_lines, files, mem_available_kb=20 * GB // 1024):
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text(f"MemTotal:       32000000 kB\nMemAvailable:   {mem_available_kb} kB\n")
    (proc / "self" / "cgroup").write_text("".join(line + "\n" for line in cgroup_lines))
    root = tmp_path / "cgroup"
    root.mkdir()
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(proc), str(root)


def test_without_a_cgroup_limit_it_is_memavailable(tmp_path):
    proc, root = fake(
        tmp_path, ["0::/user.slice"], {"cgroup.controllers": "cpu memory", "user.slice/memory.max": "max\n"}
    )
    found = host_memory(proc, root)
    assert found.available == 20 * GB // 1024 * 1024 and found.where == "host memory (MemAvailable)"


def test_cgroup_v2_limit_minus_what_is_used_without_the_page_cache(tmp_path):
    proc, root = fake(
        tmp_path,
        ["0::/kubepods/pod1/ctr"],
        {
            "cgroup.controllers": "cpu memory",
            "kubepods/pod1/ctr/memory.max": f"{8 * GB}\n",
            "kubepods/pod1/ctr/memory.current": f"{3 * GB}\n",
            "kubepods/pod1/ctr/memory.stat": f"anon {2 * GB}\nfile {GB}\ninactive_file {GB}\n",
        },
    )
    found = host_memory(proc, root)
    assert found.available == 6 * GB  # 8 − (3 − 1 reclaimable)
    assert "cgroup v2" in found.where and "memory.max: 8.00 GB, 2.00 GB in use" in found.where


def test_a_limit_on_a_parent_cgroup_counts_too(tmp_path):
    proc, root = fake(
        tmp_path,
        ["0::/slurm/job_7/step_0"],
        {
            "cgroup.controllers": "cpu memory",
            "slurm/job_7/step_0/memory.max": "max\n",
            "slurm/job_7/memory.max": f"{4 * GB}\n",
            "slurm/job_7/memory.current": f"{GB}\n",
        },
    )
    assert host_memory(proc, root).available == 3 * GB


def test_cgroup_v1_memory_controller(tmp_path):
    proc, root = fake(
        tmp_path,
        ["9:name=systemd:/", "4:memory:/docker/abc", "1:cpu:/"],
        {
            "memory/docker/abc/memory.limit_in_bytes": f"{5 * GB}\n",
            "memory/docker/abc/memory.usage_in_bytes": f"{2 * GB}\n",
            "memory/docker/abc/memory.stat": f"cache {GB}\ntotal_inactive_file {GB // 2}\n",
            "memory/memory.limit_in_bytes": f"{NO_LIMIT + 4096}\n",
        },
    )
    found = host_memory(proc, root)
    assert found.available == 5 * GB - (2 * GB - GB // 2) and "cgroup v1" in found.where


def test_inside_a_cgroup_namespace_the_mount_is_the_processs_own_cgroup(tmp_path):
    # /proc/self/cgroup names a path the container cannot see; its mount's root is that cgroup
    proc, root = fake(
        tmp_path,
        ["0::/../../kubepods/x"],
        {"cgroup.controllers": "memory", "memory.max": f"{2 * GB}\n", "memory.current": "0\n"},
    )
    assert host_memory(proc, root).available == 2 * GB


def test_memavailable_wins_when_it_is_smaller(tmp_path):
    proc, root = fake(
        tmp_path, ["0::/"], {"cgroup.controllers": "memory", "memory.max": f"{64 * GB}\n"}, mem_available_kb=GB // 1024
    )
    assert host_memory(proc, root).where == "host memory (MemAvailable)"


def test_the_fit_check_uses_the_containers_limit_on_cpu(tmp_path, monkeypatch):
    """A run that fits the host but not its container is refused naming the container's limit."""
    from parallel_wan.config import ConfigError, resolve
    from parallel_wan.config.compose import compose_settings
    from parallel_wan.memory_plan import host_memory as module

    proc, root = fake(
        tmp_path, ["0::/"], {"cgroup.controllers": "memory", "memory.max": f"{GB // 2}\n", "memory.current": "0\n"}
    )
    monkeypatch.setattr(fits, "host_memory", lambda: module.host_memory(proc, root))
    spec = resolve(
        {
            **compose_settings(["backend=torch", "device=cpu", "num_frames=81", "height=480", "width=832"]),
            "output_dir": str(tmp_path / "out"),
        },
        1,
    )
    budget, where = fits.device_memory(spec)
    assert budget == GB // 2 and "container's memory limit" in where
    with pytest.raises(ConfigError, match="the container's memory limit"):
        fits.check_fits(spec)
