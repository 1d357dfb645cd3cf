"""The entry points' own flags (issue 22 items 6, 7 and 10): `--help` says what each does, its
settings with examples (all of which exist) and the other entry points; `--version` prints
parallel_wan's; `parallel-wan --nproc N` starts torchrun (whose own `--nproc` is ambiguous);
`python -m parallel_wan.doctor` under torchrun reports once, from rank 0, with the planner's
numbers shown once."""

import importlib.metadata
import json
import os
import re
import subprocess
import sys

import pytest

from parallel_wan import cli, doctor
from parallel_wan.config.compose import CONF_DIR, compose_settings
from parallel_wan.serve.settings import SERVER_KEYS

REPO = os.path.dirname(CONF_DIR)
ENV = {**os.environ, "PYTHONPATH": REPO}


def python_m(module, *args, timeout=300, cwd=None):
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=timeout,
                          env=ENV, cwd=cwd or REPO)


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
            yield [w for w in words if not w.startswith("device_memory_gb=") and w.split("=")[0] not in SERVER_KEYS]


@pytest.mark.parametrize("program", sorted(cli.PROGRAMS))
def test_every_setting_a_help_shows_exists(program):
    for settings in _example_settings(program):
        compose_settings(settings)  # an unknown key or option raises ConfigError naming it


def test_the_run_help_shows_the_most_used_settings():
    shown = {w.split("=")[0] for s in _example_settings("run") for w in s}
    assert {"model", "checkpoint_dir", "prompt", "image", "num_frames", "steps", "seed", "prompts", "mesh", "backend",
            "memory", "cache", "lora", "output_dir"} <= shown


def test_plan_help_is_not_an_error_about_device_memory():
    proc = python_m("parallel_wan.plan", "--help")
    assert proc.returncode == 0 and "device_memory_gb is missing" not in proc.stdout + proc.stderr


def test_cfg_job_prints_every_setting_and_flags_that_do_not_exist_are_refused():
    proc = python_m("parallel_wan.run", "--cfg", "job", "seed=7")
    assert proc.returncode == 0 and "seed: 7" in proc.stdout and "num_frames:" in proc.stdout, proc.stderr
    for flags, words in ((["-m", "seed=1,2"], ["-m is not an option", "prompts=FILE"]),
                         (["--frames", "9"], ["--frames is not an option", "--nproc N"])):
        proc = python_m("parallel_wan.run", *flags)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        for word in words:
            assert word in proc.stderr, proc.stderr


# ------------------------------------------------------------------------------ --nproc N
def test_nproc_becomes_torchrun(monkeypatch):
    """The script execs torchrun (exit codes and signals then belong to torchrun, as when typed)."""
    seen = []
    monkeypatch.setattr(os, "execv", lambda path, argv: seen.append(argv) or sys.exit(0))
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    for flags in (["--nproc", "4"], ["--nproc=4"], ["--nproc-per-node", "4"], ["--nproc_per_node=4"]):
        with pytest.raises(SystemExit):
            cli.front("run", [*flags, "mesh=usp2x2", "prompt=a b"])
        assert seen.pop() == [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
                              "-m", "parallel_wan.run", "mesh=usp2x2", "prompt=a b"]
    assert cli.front("run", ["--nproc", "1", "seed=3"]) == ["seed=3"]  # one process: no launcher needed


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
    proc = python_m("parallel_wan.run", "--nproc", "2", "steps=1", "num_frames=1", "height=32", "width=32",
                    "backend=torch", f"output_dir={out}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "starting 2 processes: torchrun --standalone --nproc-per-node 2" in proc.stderr
    mesh = json.loads((out / "video.json").read_text())["config"]["mesh"]
    assert (mesh["name"], mesh["dp"] * mesh["cp"]) == ("auto:dp2", 2), mesh  # mesh=auto: CFG parallel on 2


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
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           *entry, *settings], capture_output=True, text=True, timeout=300, env=ENV, cwd=REPO)


# The doctor with rank 0 late to its plan (3 s): rank 1, done first with a problem, must not exit
# before rank 0 has printed its report (torchrun's agent stops every worker once one fails).
RANK_0_LATE = """import sys, time
from parallel_wan import doctor
plan = doctor.Doctor.mesh_and_plan
doctor.Doctor.mesh_and_plan = lambda self, device: (self.launch.rank == 0 and time.sleep(3), plan(self, device))
sys.exit(doctor.main(sys.argv[1:]))
"""


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_doctor_under_torchrun_reports_once_from_rank_0():
    proc = torchrun_doctor("model=tiny", "mesh=cp2")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    for line in ("this process uses cpu", "communication: gloo group of 2, one all_reduce OK", "mesh=cp2:", "FITS",
                 "ready"):
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
