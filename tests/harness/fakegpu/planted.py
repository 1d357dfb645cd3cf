"""Plant GPU-only bugs in a scratch copy of the repository and show who catches them: the
fake-GPU tests must fail, the CPU tests of the same area still pass (they cannot see it).

    cd tests && python -m harness.fakegpu.planted [BUG ...]      # all five by default; minutes each

Each bug is a one-line edit of the project, made in a temporary copy only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ONE_GPU_BF16 = "tests/gpu/test_fake_gpu_runs.py::test_one_gpu[tiny-bfloat16]"


@dataclass(frozen=True)
class Bug:
    path: str
    old: str
    new: str
    cpu_tests: tuple[str, ...]  # pytest arguments: the CPU tests of the area
    fake_test: str


BUGS = {
    "ring receive buffer on the host": Bug(
        "parallel_wan/backends/torch/ring.py",
        "incoming = torch.empty_like(kv)",
        "incoming = torch.empty(kv.shape, dtype=kv.dtype)",
        ("tests/parallel/test_sp_attention.py", "-k", "ring or equals_one_device"),
        "tests/gpu/test_fake_gpu_runs.py::test_every_mesh_preset[ring4-sm_100]",
    ),
    ".numpy() of a device tensor": Bug(
        "parallel_wan/backends/torch/ops.py",
        "return x.detach().cpu().numpy()",
        "return x.detach().numpy()",
        ("tests/references/test_end_to_end.py", "-k", "same_seed"),
        ONE_GPU_BF16,
    ),
    "pinning a device tensor": Bug(
        "parallel_wan/backends/torch/swap.py",
        "return t.pin_memory() if pin else t",
        "return t.to('cuda').pin_memory() if pin else t",
        ("tests/parallel/test_memory_modes.py", "-k", "swap"),
        "tests/gpu/test_fake_gpu_runs.py::test_memory_swap[0]",
    ),
    "rope tables left on the host": Bug(
        "parallel_wan/backends/torch/predictor.py",
        "self.rope = (backend.to_device(cos), backend.to_device(sin))",
        'self.rope = (__import__("torch").as_tensor(cos), __import__("torch").as_tensor(sin))',
        ("tests/references/test_end_to_end.py", "-k", "same_seed"),
        ONE_GPU_BF16,
    ),
    "First-Block Cache decided on each rank's own shard": Bug(
        "parallel_wan/backends/torch/predictor.py",
        "return backend.exchanges.sum_to_host(local, axis)",
        "return local.double().cpu().numpy()",
        ("tests/unit/test_magcache_schedule.py",),
        "tests/gpu/test_fake_gpu_cache.py::test_first_block_cache_ranks_decide_together[cp2]",
    ),
}


def scratch_copy(bug: Bug) -> str:
    folder = tempfile.mkdtemp(prefix="planted_")
    for part in ("parallel_wan", "conf", "tests", "benchmarks", "pyproject.toml"):
        src = os.path.join(ROOT, part)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(folder, part), ignore=shutil.ignore_patterns("__pycache__"))
        elif os.path.exists(src):
            shutil.copy(src, folder)
    target = os.path.join(folder, bug.path)
    with open(target) as f:
        text = f.read()
    if text.count(bug.old) != 1:
        raise SystemExit(f"{bug.path}: the line to plant into has changed ({bug.old!r}); update BUGS")
    text = text.replace(bug.old, bug.new)
    with open(target, "w") as f:
        f.write(text)
    return folder


def pytest(folder: str, *args: str) -> tuple[bool, str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-p", "no:cacheprovider", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": folder},
    )
    lines = [
        line for line in done.stdout.splitlines() if line.startswith("E ") or " passed" in line or " failed" in line
    ]
    return done.returncode == 0, "\n      ".join(lines[:3] + lines[-1:] if len(lines) > 4 else lines)


def main(names: list[str]) -> int:
    missed = 0
    for name in names or list(BUGS):
        bug = BUGS[name]
        folder = scratch_copy(bug)
        try:
            cpu_ok, cpu_out = pytest(folder, *bug.cpu_tests)
            fake_ok, fake_out = pytest(folder, bug.fake_test)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        print(f"== {name} ({bug.path})")
        print(f"   CPU tests {' '.join(bug.cpu_tests)}: {'pass' if cpu_ok else 'FAIL'}\n      {cpu_out}")
        print(f"   fake GPU {bug.fake_test}: {'CAUGHT' if not fake_ok else 'missed'}\n      {fake_out}")
        missed += fake_ok
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
