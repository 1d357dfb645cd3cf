"""A prompt-file job against the same videos made one command each — the peer users have today
(one `python -m parallel_wan.run` per video, each loading the model). Both arms run here, one
after the other, with the same settings; the table gives wall seconds and the ratio, and the
count that does not depend on the machine: model loads per job (1 against N).

    python -m benchmarks.jobs [--videos 4] [overrides …]      # default: the built-in tiny model

On the tiny model loading is a few seconds (it is built and written in the run); on A14B it is
a minute per expert pair from disk, so the saving grows with the checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(args: list[str], cwd: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "parallel_wan.run", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": REPO},
    )
    if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
    return time.perf_counter() - t0, proc.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--videos", type=int, default=4)
    parser.add_argument("overrides", nargs="*")
    opts = parser.parse_args()
    prompts = [f"video {i}: a red fox walks through fresh snow" for i in range(opts.videos)]
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "prompts.jsonl")
        with open(path, "w") as f:
            f.writelines(json.dumps({"prompt": p, "seed": i}) + "\n" for i, p in enumerate(prompts))
        job_s, job_log = run([f"prompts={path}", f"output_dir={folder}/job", *opts.overrides], folder)
        job_loads = len(re.findall(r"loaded the model once", job_log))
        single_s, single_loads = 0.0, 0
        for i, p in enumerate(prompts):
            seconds, log = run(
                [f"prompt='{p}'", f"seed={i}", f"output_dir={folder}/single{i}", *opts.overrides], folder
            )
            single_s += seconds
            single_loads += len(re.findall(r"loaded \S+ checkpoint", log))
    print(f"{opts.videos} videos ({' '.join(opts.overrides) or 'tiny model, defaults'}), wall seconds incl. start-up:")
    print(f"  {'':28s} {'seconds':>8s} {'model loads':>12s}")
    print(f"  {'one command per video':28s} {single_s:8.1f} {single_loads:12d}")
    print(f"  {'one prompt-file job':28s} {job_s:8.1f} {job_loads:12d}")
    print(f"  job / separate commands: {job_s / single_s:.2f}")


if __name__ == "__main__":
    main()
