"""Issue 16 on 4 torchrun ranks (gloo on CPU): a prompt-file job with no mesh given (mesh=auto),
and a job preempted mid-denoise by a SIGTERM to torchrun's agent (which forwards it to its
workers, as under SLURM or Kubernetes) on a padded cp4 mesh, then resumed."""

import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest
from harness.frames import assert_same_frames
from harness.hold import Hold
from harness.images import write_png

from parallel_wan.jobs import run_job
from parallel_wan.run import CONF_DIR, compose_settings, validate_job
from processes.servers import LAUNCH_VARS

REPO = os.path.dirname(CONF_DIR)


def env(**extra):
    base = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCH_VARS)}
    return base | {"PYTHONPATH": REPO, "OMP_NUM_THREADS": "1"} | extra


def torchrun(*overrides, cwd, extra_env=None, nproc=4):
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(nproc),
        "-m",
        "parallel_wan.run",
        *overrides,
    ]


def run_torchrun(overrides, cwd, timeout=400, nproc=4, **extra_env):
    proc = subprocess.run(
        torchrun(*overrides, cwd=cwd, nproc=nproc),
        cwd=cwd,
        env=env(**extra_env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    return proc


def write_lines(path, *lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_a_prompt_file_on_4_ranks_without_a_mesh_equals_the_one_process_job(tmp_path):
    write_png(tmp_path / "first.png", 64, 64)
    prompts = write_lines(
        tmp_path / "p.jsonl",
        {"prompt": "a fox", "seed": 1, "num_frames": 5, "height": 64, "width": 64},
        {
            "prompt": "a boat",
            "seed": 2,
            "image": "first.png",
            "num_frames": 5,
            "height": 64,
            "width": 64,
            "name": "boat",
        },
        {"prompt": "a kite", "seed": 3, "num_frames": 9, "height": 96, "width": 64},
    )
    common = [f"prompts={prompts}", "model=tiny_ti2v", "save_frames=true", "steps=3"]
    job, ckpt = validate_job(compose_settings(common + [f"output_dir={tmp_path / 'one'}", "backend=torch"]), 1, env={})
    run_job(job, ckpt)

    proc = run_torchrun(common + [f"output_dir={tmp_path / 'four'}"], cwd=tmp_path)
    assert re.search(r"mesh=auto → \S+ \(dp=2, ulysses=2, ring=1\)", proc.stderr), proc.stderr[-3000:]
    assert proc.stderr.count("loaded the built-in tiny_ti2v model (random weights)") == 1
    assert proc.stderr.count("one load for 3 entries") == 1
    assert len(re.findall(r"\[\d/3\] \S+\.mp4 written", proc.stderr)) == 3
    for entry in job.entries:
        four = np.load(tmp_path / "four" / f"{entry.name}.frames.npy")
        assert_same_frames(four, np.load(tmp_path / "one" / f"{entry.name}.frames.npy"), f"4 ranks, {entry.name}")
        sidecar = json.loads((tmp_path / "four" / f"{entry.name}.json").read_text())
        assert sidecar["mesh"]["dp"] == 2 and sidecar["job"]["result_key"] == entry.key


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_sigterm_to_torchrun_mid_denoise_saves_every_rank_and_the_rerun_resumes_bit_for_bit(tmp_path):
    # Two ranks (the agent forwards the signal to each of its workers; the property does not grow
    # with their number, and 4-rank jobs are the other tests'): 9 frames of 48 × 80, 3 × 3 × 5 = 45
    # tokens, padded to 46 over cp2.
    prompts = write_lines(tmp_path / "p.jsonl", {"prompt": "a fox", "name": "fox", "steps": 16}, {"prompt": "a dog"})
    common = [f"prompts={prompts}", "mesh=cp2", "num_frames=9", "height=48", "width=80", "steps=4", "save_frames=true"]
    run_torchrun(common + [f"output_dir={tmp_path / 'full'}"], cwd=tmp_path, nproc=2)

    out, log, marker = tmp_path / "cut", tmp_path / "cut.log", tmp_path / "preempted.json"
    hold = Hold(tmp_path, step=3)  # fox, the first entry, holds before its step 3 on both ranks
    with open(log, "w") as stderr:
        proc = subprocess.Popen(
            torchrun(*common, f"output_dir={out}", cwd=tmp_path, nproc=2),
            cwd=tmp_path,
            stderr=stderr,
            stdout=subprocess.DEVNULL,
            env=env(PARALLEL_WAN_PREEMPTED_FILE=str(marker), **hold.env()),
        )
        try:

            def running():
                return proc.poll() is None

            hold.wait_held(processes=2, alive=running, context=log.read_text)  # 3 of fox's 16 steps are done
            proc.send_signal(signal.SIGTERM)  # to the agent, as slurmstepd or the kubelet would
            hold.wait_signal("SIGTERM", processes=2, alive=running, context=log.read_text)  # passed on to both
            hold.release()
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
    text = log.read_text()
    # torchrun's agent ends with its own code after a signal; the workers' 75 and the marker say "preempted".
    assert re.search(r"preempted \(SIGTERM\): stopped after step (\d+) of 16 of fox", text), text[-4000:]
    step = int(re.search(r"stopped after step (\d+) of 16", text).group(1))
    assert 3 <= step < 16
    assert json.loads(marker.read_text()) | {"output_dir": None} == {
        "entry": "fox",
        "step": step,
        "steps": 16,
        "signal": "SIGTERM",
        "output_dir": None,
        "exit_code": 75,
    }
    state = out / ".parallel_wan" / "resume" / "fox"
    ranks = range(2)
    assert sorted(os.listdir(state)) == sorted(f"state.rank{r}.{ext}" for r in ranks for ext in ("json", "safetensors"))
    assert not (out / "fox.mp4").exists()

    proc = run_torchrun(common + [f"output_dir={out}"], cwd=tmp_path, nproc=2)
    assert f"fox: resuming from step {step} of 16" in proc.stderr
    names = sorted(n for n in os.listdir(tmp_path / "full") if n.endswith(".frames.npy"))
    assert len(names) == 2 and sorted(n for n in os.listdir(out) if n.endswith(".frames.npy")) == names
    for name in names:
        assert np.array_equal(np.load(out / name), np.load(tmp_path / "full" / name)), name
    assert json.loads((out / "fox.json").read_text())["resumed_from_step"] == step
    assert not state.exists()

    proc = run_torchrun(common + [f"output_dir={out}"], cwd=tmp_path, nproc=2)
    assert "job complete: all 2 entries" in proc.stderr and "loaded the model" not in proc.stderr
