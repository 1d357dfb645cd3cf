"""The entry points' own flags (issue 22 items 6, 7 and 10): `--help` says what each does, its
settings with examples (all of which exist) and the other entry points; `--version` prints
parallel_wan's; `parallel-wan --nproc N` starts torchrun's ranks (torchrun's own `--nproc` is
ambiguous) and ends as the first rank that stopped — its line once, its exit code, signals passed
on (issue 38 item 5); `python -m parallel_wan.doctor` under torchrun reports once, from rank 0, with the planner's
numbers shown once."""

import importlib.metadata
import json
import os
import re
import signal
import subprocess
import sys

import pytest
from harness.hold import Hold

from parallel_wan import cli, doctor
from parallel_wan.config.compose import CONF_DIR, compose_settings
from parallel_wan.launch import nproc
from parallel_wan.serve.settings import SERVER_KEYS

REPO = os.path.dirname(CONF_DIR)
ENV = {**os.environ, "PYTHONPATH": REPO}


def python_m(module, *args, timeout=300, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=timeout, env=ENV, cwd=cwd or REPO
    )


# ------------------------------------------------------------------------------ --help, --version
@pytest.mark.parametrize("program", sorted(cli.PROGRAMS))
def test_help_says_what_it_does_and_names_the_other_entry_points(program):
    proc = python_m(f"parallel_wan.{program}", "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage:") and "Hydra" not in proc.stdout and not proc.stderr
    assert proc.stdout.strip() == cli.HELP[program].strip()
    for other in cli.PROGRAMS.values():
        assert other in proc.stdout, other
    assert "--version" in proc.stdout


@pytest.mark.parametrize("program", sorted(cli.PROGRAMS))
def test_version_is_parallel_wans(program):
    proc = python_m(f"parallel_wan.{program}", "--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"parallel_wan {importlib.metadata.version('parallel_wan')}"


def _example_settings(program):
    """Each line of the help's examples, as the settings a reader would type (placeholders kept)."""
    for line in cli.HELP[program].splitlines():
        words = [w.replace('"', "") for w in re.findall(r"(?<!\S)([a-z_.]+=(?:\"[^\"]*\"|\S+))", line)]
        if words:
            yield [
                w
                for w in words
                if not w.startswith(("device_memory_gb=", "device_tflops=")) and w.split("=")[0] not in SERVER_KEYS
            ]


@pytest.mark.parametrize("program", sorted(cli.PROGRAMS))
def test_every_setting_a_help_shows_exists(program):
    for settings in _example_settings(program):
        compose_settings(settings)  # an unknown key or option raises ConfigError naming it


def test_the_run_help_shows_the_most_used_settings():
    shown = {w.split("=")[0] for s in _example_settings("run") for w in s}
    assert {
        "model",
        "checkpoint_dir",
        "prompt",
        "image",
        "num_frames",
        "steps",
        "seed",
        "prompts",
        "mesh",
        "backend",
        "memory",
        "cache",
        "lora",
        "output_dir",
    } <= shown


def test_plan_help_is_not_an_error_about_device_memory():
    proc = python_m("parallel_wan.plan", "--help")
    assert proc.returncode == 0 and "device_memory_gb is missing" not in proc.stdout + proc.stderr


def test_cfg_job_prints_every_setting_and_flags_that_do_not_exist_are_refused():
    proc = python_m("parallel_wan.run", "--cfg", "job", "seed=7")
    assert proc.returncode == 0 and "seed: 7" in proc.stdout and "num_frames:" in proc.stdout, proc.stderr
    for flags, words in (
        (["-m", "seed=1,2"], ["-m is not an option", "prompts=FILE"]),
        (["--frames", "9"], ["--frames is not an option", "--nproc N"]),
    ):
        proc = python_m("parallel_wan.run", *flags)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        for word in words:
            assert word in proc.stderr, proc.stderr


# ------------------------------------------------------------------------------ --nproc N
def test_nproc_starts_torchruns_ranks(monkeypatch):
    """The script starts N ranks as `torchrun --standalone --nproc-per-node N` would, and exits
    with the code of the first rank that stopped (launch/nproc.py)."""
    seen = []
    monkeypatch.setattr(nproc, "run_ranks", lambda n, settings: seen.append((n, settings)) or 75)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    for flags in (["--nproc", "4"], ["--nproc=4"], ["--nproc-per-node", "4"], ["--nproc_per_node=4"]):
        with pytest.raises(SystemExit) as stop:
            cli.front("run", [*flags, "mesh=usp2x2", "prompt=a b"])
        assert stop.value.code == 75 and seen.pop() == (4, ["mesh=usp2x2", "prompt=a b"])
    assert cli.front("run", ["--nproc", "1", "seed=3"]) == ["seed=3"]  # one process: no launcher needed


def test_nproc_gives_the_ranks_time_to_save_after_a_signal(monkeypatch):
    """torchrun SIGKILLs its ranks 30 s after passing a signal on; a preempted rank first ends
    its step and saves. The script gives them 300 s unless TORCH_ELASTIC_SHUTDOWN_TIMEOUT says."""
    from torch.distributed import run as torchrun

    seen = []
    monkeypatch.setattr(torchrun, "run", lambda args: seen.append(os.environ.get("TORCH_ELASTIC_SHUTDOWN_TIMEOUT")))
    monkeypatch.delenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", raising=False)
    monkeypatch.delenv("PARALLEL_WAN_RANK_EXITS", raising=False)  # run_ranks sets both for its ranks
    assert nproc.run_ranks(2, ["steps=2"]) == 0
    monkeypatch.setenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "45")
    assert nproc.run_ranks(2, ["steps=2"]) == 0
    assert seen == ["300", "45"]


@pytest.mark.parametrize(
    "records,failures,signum,lines,code",
    [
        # a bad setting: every rank refuses; the earliest says it, whoever the agent saw first
        (
            [{"code": 2, "line": "bad", "time": 100.3}, {"code": 2, "line": "bad", "time": 100.4}],
            [(1, 2, 100), (0, 2, 100)],
            None,
            ["bad"],
            2,
        ),
        # a rank fails; the agent closes its peer with SIGTERM (not a failure of its own)
        (
            [{"code": 1, "line": "rank 1/2 failed", "time": 100.3}],
            [(1, 1, 100), (0, -15, 100)],
            None,
            ["rank 1/2 failed"],
            1,
        ),
        # the OOM killer takes rank 1; rank 0 then loses its peer and records that
        (
            [{"code": 1, "line": "rank 0/2 failed: peer gone", "time": 100.3}],
            [(1, -9, 100), (0, 1, 100)],
            None,
            ["parallel_wan: rank 1/2 was killed by SIGKILL", "rank 0/2 failed: peer gone"],
            137,
        ),
        # rank 0 fails; rank 1, hung, is killed by the agent 30 s after its SIGTERM: rank 0 was first
        (
            [{"code": 1, "line": "rank 0/2 failed", "time": 100.3}],
            [(0, 1, 100), (1, -9, 131)],
            None,
            ["parallel_wan: rank 1/2 was killed by SIGKILL", "rank 0/2 failed"],
            1,
        ),
        # SIGTERM to the script: every rank saved and recorded 75
        (
            [{"code": 75, "line": "preempted", "time": 100.3}, {"code": 75, "line": "preempted", "time": 100.3}],
            [],
            signal.SIGTERM,
            ["preempted"],
            75,
        ),
        # SIGTERM while the ranks were still importing: no rank could catch it
        (
            [],
            [],
            signal.SIGTERM,
            ["parallel_wan: stopped by SIGTERM before any rank could stop cleanly; nothing was saved"],
            143,
        ),
        # a rank's own uncaught traceback (no record) and a clean run
        ([], [(1, 1, 100), (0, -15, 100)], None, [], 1),
        ([], [], None, [], 0),
    ],
    ids=["refused", "failed", "oom-killed", "hung-then-killed", "preempted", "signal-at-start", "traceback", "ok"],
)
def test_the_script_reports_the_first_rank_to_stop(records, failures, signum, lines, code):
    assert nproc.verdict(records, failures, 2, signum) == (lines, code)


@pytest.mark.parametrize("flags", [["--nproc"], ["--nproc", "0"], ["--nproc", "four"], ["--nproc=-2"]])
def test_a_bad_nproc_is_refused_in_one_line(flags, capsys, monkeypatch):
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    with pytest.raises(SystemExit) as stop:
        cli.front("run", flags)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.startswith("parallel_wan: error: --nproc") and "e.g. --nproc 4" in err


def test_nproc_under_a_launcher_is_refused(capsys, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "0")
    with pytest.raises(SystemExit) as stop:
        cli.front("run", ["--nproc", "2"])
    assert stop.value.code == 2 and "already started by a launcher" in capsys.readouterr().err


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_nproc_2_runs_the_tiny_model_on_two_processes(tmp_path):
    out = tmp_path / "out"
    proc = python_m(
        "parallel_wan.run",
        "--nproc",
        "2",
        "steps=1",
        "num_frames=1",
        "height=32",
        "width=32",
        "backend=torch",
        f"output_dir={out}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "starting 2 processes: torchrun --standalone --nproc-per-node 2" in proc.stderr
    mesh = json.loads((out / "video.json").read_text())["config"]["mesh"]
    assert (mesh["name"], mesh["dp"] * mesh["cp"]) == ("auto:dp2", 2), mesh  # mesh=auto: CFG parallel on 2


def test_nproc_refuses_jax_before_torchrun_starts(tmp_path):
    proc = python_m(
        "parallel_wan.run",
        "--nproc",
        "2",
        "backend=jax",
        "steps=1",
        "num_frames=1",
        "height=32",
        "width=32",
        f"output_dir={tmp_path / 'out'}",
        cwd=tmp_path,
    )
    assert (proc.returncode, proc.stderr.count("\n")) == (2, 1), proc.stderr[-3000:]
    assert proc.stderr.startswith("parallel_wan: error: --nproc 2 with backend=jax"), proc.stderr
    assert "one process per host" in proc.stderr and "drop --nproc" in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


NPROC_RUN = ["backend=torch", "dist_timeout_s=60"]
TORCHRUNS_OWN = ("Traceback", "ChildFailedError", "closing signal", "exitcode")  # its wall and its notices


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_nproc_a_bad_setting_exits_2_with_one_line(tmp_path):
    proc = python_m(
        "parallel_wan.run",
        "--nproc",
        "2",
        *NPROC_RUN,
        "steps=1",
        "num_frames=1",
        "height=50",
        "width=32",
        f"output_dir={tmp_path / 'out'}",
        cwd=tmp_path,
    )
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert lines[0].startswith("parallel_wan: starting 2 processes: torchrun"), proc.stderr
    assert lines[1:] == ["parallel_wan: error: height=50 must be a positive multiple of 16 for tiny; try height=48"], (
        proc.stderr[-3000:]
    )


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
@pytest.mark.parametrize(
    "signum,code,line",
    [
        (
            signal.SIGTERM,
            75,
            r"parallel_wan: preempted \(SIGTERM\): stopped after step \d+ of 12 of video; the loop state "
            r"is saved in .*; run the same command again to resume \(exit code 75\)",
        ),
        (signal.SIGUSR1, 75, r"parallel_wan: preempted \(SIGUSR1\): stopped after step \d+ of 12 of video"),
        (signal.SIGINT, 130, r"parallel_wan: interrupted \(rank \d/2\); nothing was written"),
    ],
    ids=["SIGTERM", "SIGUSR1", "SIGINT"],
)
def test_a_signal_to_nproc_reaches_the_ranks_and_their_exit_code_comes_back(tmp_path, signum, code, line):
    # As a scheduler (SIGTERM, or SLURM's --signal=USR1: preemption, requeued on 75) or a terminal
    # (Ctrl-C) stops the `parallel-wan --nproc` process itself, mid-denoise: both ranks hold before
    # step 2 of 12 (harness/hold.py), the signal goes to the `--nproc` process, and a preemption
    # is let go on once both ranks' handlers have run (Ctrl-C raises out of the hold itself).
    log, hold = tmp_path / "log", Hold(tmp_path, step=2)
    with open(log, "w") as stderr:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "parallel_wan.run",
                "--nproc",
                "2",
                *NPROC_RUN,
                "mesh=cp2",
                "num_frames=9",
                "height=48",
                "width=80",
                "steps=12",
                f"output_dir={tmp_path / 'out'}",
            ],
            cwd=tmp_path,
            env={**ENV, **hold.env()},
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
        try:

            def running():
                return proc.poll() is None

            hold.wait_held(processes=2, alive=running, context=log.read_text)
            proc.send_signal(signum)
            if signum != signal.SIGINT:
                hold.wait_signal(signal.Signals(signum).name, processes=2, alive=running, context=log.read_text)
                hold.release()
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
    text = log.read_text()
    assert proc.returncode == code, text[-3000:]
    assert len(re.findall(line, text)) == 1, text[-3000:]
    assert not [word for word in TORCHRUNS_OWN if word in text], text[-3000:]


# ------------------------------------------------------------------------------ doctor
def test_doctor_shows_the_planners_numbers_once_when_a_run_does_not_fit(capsys):
    import io

    out = io.StringIO()
    code = doctor.main(["model=wan2.2_t2v_a14b", "mesh=single"], out=out)
    text = out.getvalue()
    assert code == 1, text
    assert len(re.findall(r"peak \d+\.\d+ GB of \d+\.\d GB: DOES NOT FIT", text)) == 1, text
    assert re.search(r"PROBLEM: the run does not fit: peak \d+\.\d+ GB of \d+\.\d GB", text), text
    assert text.count("try: ") == 1, text


def torchrun_doctor(*settings, script=None):
    entry = [script] if script else ["-m", "parallel_wan.doctor"]
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *entry, *settings],
        capture_output=True,
        text=True,
        timeout=300,
        env=ENV,
        cwd=REPO,
    )


# The doctor with rank 0 late to its plan: it starts it only once rank 1, done first with a
# problem, is finishing (a file beside this script says so); rank 1 must not exit before rank 0
# has printed its report (torchrun's agent stops every worker once one fails).
RANK_0_LATE = """import os, sys, time
from parallel_wan import doctor
done = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rank_1_finishing")
plan, finished = doctor.Doctor.mesh_and_plan, doctor.Doctor.report_finished
def late_plan(self, device):
    deadline = time.monotonic() + 300
    while self.launch.rank == 0 and not os.path.exists(done) and time.monotonic() < deadline:
        time.sleep(0.02)
    return plan(self, device)
def report_finished(self):
    if self.launch.rank == 1:
        open(done, "w").close()
    return finished(self)
doctor.Doctor.mesh_and_plan, doctor.Doctor.report_finished = late_plan, report_finished
sys.exit(doctor.main(sys.argv[1:]))
"""


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_doctor_under_torchrun_reports_once_from_rank_0():
    proc = torchrun_doctor("model=tiny", "mesh=cp2")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    for line in (
        "this process uses cpu",
        "communication: gloo group of 2, one all_reduce OK",
        "mesh=cp2:",
        "FITS",
        "ready",
    ):
        assert proc.stdout.count(line) == 1, proc.stdout
    assert "[rank" not in proc.stdout


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_doctor_under_torchrun_tags_another_ranks_problems(tmp_path):
    script = tmp_path / "rank_0_late.py"
    script.write_text(RANK_0_LATE)
    proc = torchrun_doctor("model=tiny", "mesh=cp2", "device=cuda", script=str(script))
    assert proc.returncode != 0, proc.stdout
    problems = [line for line in proc.stdout.splitlines() if "PROBLEM: device=cuda" in line]
    assert sorted(line.split("PROBLEM")[0] for line in problems) == ["", "[rank 1/2] "], proc.stdout
    assert proc.stdout.count("problem(s); see PROBLEM lines") == 1, proc.stdout  # rank 0's report, whole
    assert "plan for this device's" in proc.stdout, proc.stdout
