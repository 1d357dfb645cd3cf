"""The SLURM scripts, run for real: a SLURM cluster on this machine (tests/system/slurm/setup_slurm.sh:
Debian's slurm-wlm + munge, two slurmd "nodes" n1 and n2 on localhost with 8 CPUs and 16 fake
GPUs each, partitions `debug` (default, preemptable with a grace time) and `urgent`), and
launchers/slurm/{srun,torchrun}.sbatch submitted as users submit them, the tiny model on CPU
(torch, gloo). Checked: 1 and 2 nodes, `--ntasks-per-node`, `--gres=gpu:N` end COMPLETED with
the one-process video; a job array over a prompt file writes every video into one folder; a
job stopped mid-denoise (`scontrol requeue`; an `urgent` job preempting the `debug` partition;
a signal to the batch shell, as `--signal=B:USR1@...` sends) is requeued, resumes from the
saved step, ends COMPLETED with the uninterrupted run's frames and keeps both runs' logs.

The cluster needs root and the packages (installed with apt-get when missing): the tests skip,
saying why, only where the machine cannot provide them. Jobs are submitted with
`sbatch --parsable` and followed with `scontrol show job` every 0.5 s; `sbatch --wait` polls at
2, 10, 42, 74 s, which would add up to half a minute per job."""

import json
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
from harness.cli import run_in_process
from harness.frames import assert_same_frames
from harness.hold import Hold
from harness.launchers import RUN, SRUN_SBATCH, TORCHRUN_SBATCH
from harness.paths import REPO

from processes.servers import LAUNCH_VARS

pytestmark = pytest.mark.cluster

SETUP = os.path.join(REPO, "tests", "system", "slurm", "setup_slurm.sh")
SLURM_PROGRAMS = ("slurmctld", "slurmd", "sbatch", "munged")
# 16 fake GPUs a node, so that two jobs asking for the scripts' 8 GPUs a node fit side by side.
# Short waits: SIGTERM to SIGKILL 10 s, a preempted job's grace 20 s, a requeued job may start
# 6 s after the requeue (Slurm's default is 121 s) and is started within the next 2 s pass.
CLUSTER = {
    "SLURM_TEST_GPUS": "16",
    "SLURM_TEST_KILLWAIT": "10",
    "SLURM_TEST_GRACETIME": "20",
    "SLURM_TEST_REQUEUE_DELAY": "5",
    "SLURM_TEST_SCHED_INTERVAL": "2",
}
TERMINAL = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
    "PREEMPTED",
}
# The run the preemption tests stop: it holds before step PREEMPT_AT_STEP (harness/hold.py) until
# the stop's SIGTERM has reached it, so it is preempted mid-denoise however long the stop takes.
SLOW_STEPS = 30
SLOW = ["num_frames=9", "height=128", "width=128", f"steps={SLOW_STEPS}", "dtype=float32", "dist_timeout_s=60"]
PREEMPT_AT_STEP = 20


@pytest.fixture(scope="session")
def slurm():
    """Start the localhost cluster (or find it running); stop it at the end if started here."""
    if os.geteuid() != 0:
        pytest.skip("the localhost SLURM cluster needs root (slurmd and munged run as root)")
    if not all(shutil.which(p) for p in SLURM_PROGRAMS) and not shutil.which("apt-get"):
        pytest.skip("SLURM is not installed and there is no apt-get to install it (Debian's slurm-wlm + munge)")
    conf = "/etc/slurm/slurm.conf"
    if os.path.exists(conf) and "# rendered by setup_slurm.sh" not in open(conf).read():
        pytest.skip(
            f"{conf} was not written by tests/system/slurm/setup_slurm.sh: this machine belongs to a real SLURM "
            "cluster, whose configuration the tests leave alone"
        )
    env = _no_slurm_vars() | CLUSTER
    proc = subprocess.run(["bash", SETUP, "start"], env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 and "apt-get install failed" in proc.stderr:
        pytest.skip(f"installing SLURM with apt-get failed: {proc.stderr.strip()[-1500:]}")
    assert proc.returncode == 0, f"setup_slurm.sh start failed:\n{proc.stdout}\n{proc.stderr}"
    print(proc.stdout)
    started_here = "already running" not in proc.stdout
    yield
    if started_here:
        subprocess.run(["bash", SETUP, "stop"], env=env, capture_output=True, timeout=120)


def _no_slurm_vars():
    """The environment without SLURM_* (SLURM_CONF, or a job's own variables when the tests
    run inside one): every SLURM command here talks to the localhost cluster."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}


def _job_env(**extra):
    """What the jobs see (sbatch exports the submitting environment): this checkout's code and
    interpreter, one thread per rank, no launcher variables of the test process."""
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCH_VARS)}
    return (
        env
        | {
            "PYTHONPATH": REPO,
            "OMP_NUM_THREADS": "1",
            "PYTHON": sys.executable,
            "TORCHRUN": torchrun if os.path.exists(torchrun) else shutil.which("torchrun") or "torchrun",
        }
        | extra
    )


def sbatch(folder, *args, **env):
    """Submit from `folder` (the batch log slurm-<id>.out lands there; OUTPUT_ROOT is
    folder/out); return the job id."""
    proc = subprocess.run(
        ["sbatch", "--parsable", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=60,
        env=_job_env(OUTPUT_ROOT=str(folder / "out"), **env),
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().split(";")[0]


def job_info(job):
    out = subprocess.run(
        ["scontrol", "show", "job", "-o", job], capture_output=True, text=True, timeout=60, env=_no_slurm_vars()
    ).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


def wait_for(job, restarts=0, timeout_s=180):
    """Wait until the job has ended (after `restarts` requeues at least); return its record."""
    deadline = time.monotonic() + timeout_s
    while True:
        info = job_info(job)
        if info.get("JobState") in TERMINAL and int(info.get("Restarts", 0)) >= restarts:
            return info
        if time.monotonic() > deadline:
            pytest.fail(f"job {job} not done after {timeout_s} s: {info}")
        time.sleep(0.5)


def _logs(folder, job):
    """Every log of a job, for an assertion message."""
    texts = []
    batch = folder / f"slurm-{job}.out"
    for path in [batch, *sorted((folder / "out").glob("slurm-*/logs/*.out"))]:
        if path.exists():
            texts.append(f"--- {path.name}\n{path.read_text()[-3000:]}")
    return "\n".join(texts)


def assert_completed(folder, job, restarts=0, timeout_s=180):
    info = wait_for(job, restarts, timeout_s)
    assert (info["JobState"], info["ExitCode"]) == ("COMPLETED", "0:0"), f"{info}\n{_logs(folder, job)}"
    return info


# ---------------------------------------------------------------- one video, 1 and 2 nodes
@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    out = tmp_path_factory.mktemp("one") / "out"
    run_in_process(out, *RUN, "backend=torch")  # the reference: the run in this process, no interpreter start
    return np.load(out / "frames.npy")


# (script, sbatch options, environment): every way of giving the geometry that users type.
JOBS = {
    "srun-1node-ntasks-per-node": (SRUN_SBATCH, ["--nodes", "1", "--ntasks-per-node", "2"], {}),
    "srun-2nodes-gres": (SRUN_SBATCH, ["--nodes", "2", "--ntasks-per-node", "1", "--gres=gpu:1"], {}),
    "torchrun-1node": (TORCHRUN_SBATCH, ["--nodes", "1"], {"GPUS_PER_NODE": "2"}),
    # 4 tasks on 2 nodes, yet one agent per node; GPUS_PER_NODE from the job's 1 GPU per node.
    "torchrun-2nodes-ntasks-per-node-gres": (
        TORCHRUN_SBATCH,
        ["--nodes", "2", "--ntasks-per-node", "2", "--gres=gpu:1"],
        {},
    ),
}


@pytest.fixture(scope="module")
def finished_jobs(slurm, tmp_path_factory):
    """Submit every job of JOBS at once (the cluster runs them side by side); wait for all."""
    folder = tmp_path_factory.mktemp("jobs")
    ids = {
        name: sbatch(folder, *options, script, "mesh=cp2", *RUN, "backend=torch", **env)
        for name, (script, options, env) in JOBS.items()
    }
    for job in ids.values():
        wait_for(job)
    return folder, ids


@pytest.mark.parametrize("name", list(JOBS))
def test_the_scripts_render_the_one_process_video(finished_jobs, one_process, name):
    folder, ids = finished_jobs
    job = ids[name]
    assert_completed(folder, job)
    job_dir = folder / "out" / f"slurm-{job}"
    assert sorted(os.listdir(job_dir)) == ["frames.npy", "logs", "video.json", "video.mp4"]
    assert_same_frames(np.load(job_dir / "frames.npy"), one_process, name)
    logs = "".join(p.read_text() for p in sorted((job_dir / "logs").iterdir()))
    launcher = "torchrun" if JOBS[name][0] == TORCHRUN_SBATCH else f"slurm (srun, no torchrun): job {job}, 2 tasks"
    assert logs.count(f"distributed: rank 0 of 2 (local rank 0), launched by {launcher}") == 1, logs[-3000:]
    batch_log = (folder / f"slurm-{job}.out").read_text()
    assert f"parallel_wan: job {job}, restart 0:" in batch_log, batch_log
    if JOBS[name][0] == TORCHRUN_SBATCH:
        nodes = int(JOBS[name][1][1])
        assert sorted(os.listdir(job_dir / "logs")) == [f"restart-0.node-{n}.out" for n in range(nodes)]
        assert f"{nodes} nodes × {2 // nodes} GPUs" in batch_log, batch_log


# ---------------------------------------------------------------- a job array over a prompt file
def test_an_array_job_spreads_a_prompt_file_over_its_tasks(slurm, tmp_path):
    names = [f"dog{i}" for i in range(4)]
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "".join(
            json.dumps({"prompt": f"a dog jumps, take {i}", "seed": i, "name": name}) + "\n"
            for i, name in enumerate(names)
        )
    )
    job = sbatch(
        tmp_path,
        "--array=0-1",
        "--nodes",
        "1",
        "--ntasks-per-node",
        "1",
        SRUN_SBATCH,
        f"prompts={prompts}",
        *[a for a in RUN if not a.startswith(("prompt=", "seed=", "save_frames="))],
        "backend=torch",
    )
    array_id = job
    tasks = {}
    for task in (0, 1):
        info = wait_for(f"{array_id}_{task}")
        tasks[task] = info
        assert (info["JobState"], info["ExitCode"]) == ("COMPLETED", "0:0"), f"{info}\n{_logs(tmp_path, array_id)}"
    # One folder for the whole array, named by the array's id; every entry's video and sidecar.
    (job_dir,) = (tmp_path / "out").iterdir()
    assert job_dir.name == f"slurm-{array_id}"
    files = sorted(p.name for p in job_dir.iterdir() if p.is_file())
    summaries = ["job-0-of-2.json", "job-1-of-2.json"]  # each array task's job summary
    assert files == sorted([f"{n}.mp4" for n in names] + [f"{n}.json" for n in names] + summaries), files
    # Each array task rendered its share, two of the four entries, and has its own log.
    for task, summary in enumerate(summaries):
        made = json.loads((job_dir / summary).read_text())["made"]
        assert made == names[2 * task : 2 * task + 2], (task, made)
        for name in made:
            assert json.loads((job_dir / f"{name}.json").read_text())["job"]["share"] == [task, 2]
    logs = sorted(p.name for p in (job_dir / "logs").iterdir())
    assert logs == ["array-0.restart-0.task-0.out", "array-1.restart-0.task-0.out"], logs
    for task in (0, 1):
        text = (job_dir / "logs" / f"array-{task}.restart-0.task-0.out").read_text()
        assert f"(array task {task} of 2: 2 of 4 entries)" in text, text[-3000:]
    for task, info in tasks.items():
        batch_log = (tmp_path / f"slurm-{info['JobId']}.out").read_text()
        assert f"(array {array_id} task {task}), restart 0:" in batch_log, batch_log


# ---------------------------------------------------------------- preemption
@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The slow one-entry prompt file rendered by one process, without interruption."""
    folder = tmp_path_factory.mktemp("uninterrupted")
    prompts = folder / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "a dog jumps", "seed": 3, "name": "dog"}) + "\n")
    out = folder / "out"
    run_in_process(out, f"prompts={prompts}", *SLOW, "backend=torch")  # the reference, in this process
    return prompts, json.loads((out / "dog.json").read_text())


def stop_mid_denoise_and_resume(folder, uninterrupted, script, stop, **env):
    """Submit the slow one-entry job with `script` (one process), call stop(job) while it holds
    before step PREEMPT_AT_STEP and let it go on once the SIGTERM has reached it, wait until it
    has been requeued once and has ended COMPLETED; check that it resumed from the saved step
    with the uninterrupted run's frames and kept both runs' logs. Returns (job id, job folder,
    batch log). (The restarted run resumes past the hold's step: it never holds.)"""
    prompts, reference = uninterrupted
    options = ["--nodes", "1"] + (["--ntasks-per-node", "1"] if script == SRUN_SBATCH else [])
    hold = Hold(folder, step=PREEMPT_AT_STEP)
    job = sbatch(folder, *options, script, f"prompts={prompts}", *SLOW, "backend=torch", **env, **hold.env())
    job_dir = folder / "out" / f"slurm-{job}"
    log = "restart-0.task-0.out" if script == SRUN_SBATCH else "restart-0.node-0.out"

    def running():
        return job_info(job).get("JobState") not in TERMINAL

    def logs():
        return _logs(folder, job)

    hold.wait_held(alive=running, context=logs)
    stop(job)
    hold.wait_signal("SIGTERM", alive=running, context=logs)
    hold.release()
    info = assert_completed(folder, job, restarts=1)
    assert int(info["Restarts"]) == 1, info
    sidecar = json.loads((job_dir / "dog.json").read_text())
    resumed = sidecar.get("resumed_from_step")
    assert isinstance(resumed, int) and resumed >= PREEMPT_AT_STEP, (resumed, _logs(folder, job))
    # Identical frames: the same mesh (one process), resumed from the saved loop state.
    assert sidecar["frames_sha256"] == reference["frames_sha256"], (sidecar, reference)
    logs = sorted(p.name for p in (job_dir / "logs").iterdir())
    assert log in logs and log.replace("restart-0", "restart-1") in logs, logs  # both runs' logs are kept
    batch_log = (folder / f"slurm-{job}.out").read_text()
    assert f"job {job}, restart 0:" in batch_log and f"job {job}, restart 1:" in batch_log, batch_log
    return job, job_dir, batch_log


def test_a_job_requeued_mid_denoise_resumes(slurm, uninterrupted, tmp_path):
    # srun.sbatch, one task. `scontrol requeue` signals the task (and the batch shell), the
    # run stops at a step, saves its state and exits 75; SLURM requeues the job (same id, same
    # folder), and the second run resumes from that step.
    def requeue(job):
        subprocess.run(["scontrol", "requeue", job], check=True, timeout=60, env=_no_slurm_vars())

    _, _, batch_log = stop_mid_denoise_and_resume(tmp_path, uninterrupted, SRUN_SBATCH, requeue)
    assert "requeueing it to resume" not in batch_log, batch_log  # SLURM requeued it


def test_a_job_preempted_by_an_urgent_one_requeues_itself_and_resumes(slurm, uninterrupted, tmp_path):
    # torchrun.sbatch, one node, one worker, in `debug` (preemptable, GraceTime 20 s). An
    # `urgent` job that needs every CPU preempts it: SLURM sends SIGTERM to the torchrun agent,
    # which passes it to its worker; the worker saves its state, leaves the preempted file and
    # exits 75, torchrun exits 1. A job ending within its grace time is not requeued by SLURM:
    # the batch script requeues it itself; the urgent job runs, then the job resumes.
    urgent = []

    def preempt(job):
        urgent.append(
            sbatch(tmp_path, "--partition", "urgent", "--nodes", "2", "--cpus-per-task", "8", "--wrap", "sleep 1")
        )

    _, job_dir, batch_log = stop_mid_denoise_and_resume(
        tmp_path, uninterrupted, TORCHRUN_SBATCH, preempt, GPUS_PER_NODE="1"
    )
    assert wait_for(urgent[0])["JobState"] == "COMPLETED"
    assert re.search(
        r"stopped for preemption \(exit 1, preempted at [-0-9T:]+\): requeueing it to resume", batch_log
    ), batch_log
    assert (job_dir / "logs" / "restart-0.preempted").exists()
    assert not (job_dir / "logs" / "restart-1.preempted").exists()


def test_a_signal_to_the_batch_shell_is_passed_on_and_the_job_resumes(slurm, uninterrupted, tmp_path):
    # What `--signal=B:USR1@120` does before a time limit, sent at once: `scancel -b` signals
    # only the batch shell. torchrun.sbatch traps it and passes SIGTERM on to the agent
    # (SIGUSR1 would kill it), whose worker saves its state; the script requeues the job.
    def signal_batch_shell(job):
        subprocess.run(["scancel", "--batch", "--signal=USR1", job], check=True, timeout=60, env=_no_slurm_vars())

    job, _, batch_log = stop_mid_denoise_and_resume(
        tmp_path, uninterrupted, TORCHRUN_SBATCH, signal_batch_shell, GPUS_PER_NODE="1"
    )
    assert f"job {job} got SIGUSR1: passing SIGTERM to the agents" in batch_log, batch_log
    assert "stopped for preemption (exit 1): requeueing it to resume" in batch_log, batch_log
