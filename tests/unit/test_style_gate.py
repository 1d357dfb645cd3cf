"""The style gate CI runs first (.ci/run): ruff's lint and format checks over the whole tree with
pyproject.toml's settings, here too so the inner loop catches a change before CI does."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _ruff(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("ruff") or sys.executable
    cmd = [exe, *args] if exe != sys.executable else [exe, "-m", "ruff", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)


def test_ruff_check_is_clean():
    done = _ruff("check", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_format_is_clean():
    done = _ruff("format", "--check", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_ci_runs_the_gate_before_the_suite():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "ruff check . && ruff format --check ." in ci
    assert ci.index("ruff check .") < ci.index('bash -c "$test_cmd"')


def test_the_gate_reads_the_project_settings():
    config = (ROOT / "pyproject.toml").read_text()
    assert "[tool.ruff]" in config and "line-length = 120" in config
