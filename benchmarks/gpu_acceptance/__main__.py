"""python -m benchmarks.gpu_acceptance --out DIR [--dry-run] [--budget-min 20] [--phases …]"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .runner import Step, run_phases

# Budgets in seconds of a 20-minute run (scaled with --budget-min), in the order they run:
# correctness first (a wrong kernel makes its timings meaningless), the forward per mesh
# (a compile and a CUDA-graph capture each) and the whole videos (benchmarks/video.py: its rows
# fit this share by skipping the last ones, and take what earlier phases leave) the largest
# shares. They add up to 1,200 s; the H200 run of 2026-11-26 finished most phases well inside theirs.
PLAN = """
correct:environment 30   correct:videos 120   correct:kernels 60   correct:compiled 100
correct:fp8 60           correct:more_gpus 10 fast:gemm 40        fast:attention 40
meshes:ulysses8 120      meshes:cp8 120       meshes:dp2_cp4 120
fast:vae 75              fast:load 70         fast:whole_video 220 written:written 15
"""
# module:function (in benchmarks/gpu_acceptance) → the phase named after the function
# (step_MESH for the meshes).
STEPS = [
    Step(f"step_{func}" if module == "meshes" else func, f"benchmarks.gpu_acceptance.{module}:{func}", float(budget))
    for target, budget in zip(PLAN.split()[::2], PLAN.split()[1::2])
    for module, func in [target.split(":")]
]


def refuse(message: str) -> None:
    print(f"gpu_acceptance: {message}", file=sys.stderr)
    raise SystemExit(2)


def parse(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu_acceptance", description=__doc__)
    p.add_argument("--out", required=True, help="folder for acceptance.json and BENCHMARKS_rows.md")
    p.add_argument("--dry-run", action="store_true", help="every phase on CPU with the tiny model and tiny shapes")
    p.add_argument(
        "--budget-min", type=float, default=20.0, help="the whole run's time, minutes (phases scale with it)"
    )
    p.add_argument("--phases", nargs="+", help=f"only these, in the usual order: {' '.join(s.name for s in STEPS)}")
    p.add_argument("--device", default="cuda", help="the GPU (ignored by --dry-run)")
    args = p.parse_args(argv)
    names = [s.name for s in STEPS]
    unknown = [n for n in args.phases or () if n not in names]
    if unknown:
        refuse(f"--phases {' '.join(unknown)}: no such phase; choose from {' '.join(names)}")
    if not args.budget_min > 0:
        refuse(f"--budget-min {args.budget_min:g}: give the minutes the run may take, e.g. 20")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        refuse(f"--out {out}: a file is there; give a folder (it is made if missing)")
    if not args.dry_run:
        import torch

        if not torch.cuda.is_available():
            refuse(
                f"--device {args.device}: no CUDA device here (torch {torch.__version__}); run it on the GPU, "
                "or pass --dry-run for the CPU rehearsal"
            )
    return args


def main(argv=None, children=None) -> dict:
    """`children`: phase names run in a child process (default all; the tests run most in-process)."""
    from .written import write_rows

    args = parse(argv)
    scale = args.budget_min / 20.0
    steps = [Step(s.name, s.target, s.budget_s * scale) for s in STEPS if not args.phases or s.name in args.phases]
    out = Path(args.out)

    def report(entry):
        print(
            f"[{entry['name']}] {entry['status']} in {entry['seconds']:.0f} s of {entry['budget_s']:.0f}"
            + (f": {entry['error']}" if entry.get("error") else ""),
            flush=True,
        )

    doc = run_phases(
        steps,
        out,
        dry_run=args.dry_run,
        device="cpu" if args.dry_run else args.device,
        budget_s=60 * args.budget_min,
        children=children,
        report=report,
    )
    write_rows(doc, out / "BENCHMARKS_rows.md", sys.argv[1:] if argv is None else argv)
    print(f"wrote {out / 'acceptance.json'} and {out / 'BENCHMARKS_rows.md'}")
    return doc


if __name__ == "__main__":
    main()
