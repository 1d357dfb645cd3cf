"""CPU seconds of the short processes users (and the tests) start most: a tiny run, the doctor,
the planner and the server's HTTP side — for each checkout given, so two commits compare in one
run on one machine:

    git worktree add /tmp/before <commit>
    python -m benchmarks.startup /tmp/before .     # median of 3 per command (user + sys CPU)

Each checkout is put first on PYTHONPATH of fresh processes (cwd /tmp); its built-in tiny model
is stored first by a warm-up run, so no row pays for building it.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile

HTTP_SIDE = (
    "import tempfile; from parallel_wan.config.compose import compose_settings; "
    "from parallel_wan.serve.served import serve_start; "
    "s = serve_start(compose_settings(['model=tiny']), 1, None, tempfile.mkdtemp(), (None, 'host')); "
    "s.request({'prompt': 'a', 'size': '64x64'})"
)
COMMANDS = {
    "tiny run (steps=2)": ["-m", "parallel_wan.run", "steps=2"],
    "doctor model=tiny mesh=single": ["-m", "parallel_wan.doctor", "model=tiny", "mesh=single"],
    "plan model=tiny mesh=cp2": ["-m", "parallel_wan.plan", "model=tiny", "mesh=cp2", "device_memory_gb=8"],
    "HTTP side: serve_start + a request": ["-c", HTTP_SIDE],
}


def cpu_seconds(argv: list[str], env: dict) -> float:
    """user + sys CPU of one child process (and anything it waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [sys.executable, *argv],
        env=env,
        cwd=tempfile.gettempdir(),
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(checkouts: list[str]) -> None:
    rows = {}
    for checkout in checkouts:
        env = {**os.environ, "PYTHONPATH": os.path.abspath(checkout), "OMP_NUM_THREADS": "1"}
        out = tempfile.mkdtemp(prefix="startup_")
        cpu_seconds(["-m", "parallel_wan.run", f"output_dir={out}/warm", "steps=2"], env)  # stores the tiny model
        for name, argv in COMMANDS.items():

            def once(i, argv=argv):
                if argv[1] == "parallel_wan.run":  # a folder per run: a run into its own finished video does nothing
                    argv = [*argv, f"output_dir={out}/run{i}"]
                return cpu_seconds(argv, env)

            rows.setdefault(name, []).append(statistics.median(once(i) for i in range(3)))
    print(f"{'median CPU-s of 3':<38}" + "".join(f"{c[-28:]:>30}" for c in checkouts))
    for name, values in rows.items():
        ratio = f"   ({values[0] / values[-1]:.2f}x)" if len(values) > 1 else ""
        print(f"{name:<38}" + "".join(f"{v:>30.2f}" for v in values) + ratio)


if __name__ == "__main__":
    main(sys.argv[1:] or ["."])
