"""A wheel, not an editable checkout: built here, installed without network (--no-deps) into a
fresh venv that reuses this environment's packages — the environment the tests run in, a
virtualenv or a system Python alike (harness/venvs.py) — then the default job runs from an
empty folder (Hydra finds the configs the wheel carries) and `parallel-wan --help` works."""

import os
import shutil
import subprocess
import sys

import pytest
from harness.paths import REPO
from harness.venvs import environment_venv

pytestmark = pytest.mark.system


def test_the_wheel_runs_from_any_folder(tmp_path):
    wheels, work, source = tmp_path / "wheels", tmp_path / "empty", tmp_path / "source"
    work.mkdir()
    # Built from a copy: setuptools writes build/ and *.egg-info into the folder it builds.
    shutil.copytree(
        REPO,
        source,
        ignore=shutil.ignore_patterns(".git", "outputs", "build", "*.egg-info", "__pycache__", ".pytest_cache"),
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheels),
            str(source),
        ],
        check=True,
        cwd=tmp_path,
        timeout=600,
    )
    wheel = next(wheels.glob("parallel_wan-*.whl"))
    # Before: `python -m venv --system-site-packages` from sys.executable, which inside a virtualenv
    # exposes the base interpreter's packages, not the virtualenv's (no torch: the test failed).
    venv = environment_venv(tmp_path)
    python = venv / "bin" / "python"
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-deps", str(wheel)], check=True, timeout=600)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = subprocess.run(
        [str(python), "-c", "import parallel_wan.run as r; print(r.__file__); print(r.CONF_DIR)"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    # The installed package and its configs, not this checkout's.
    assert all(str(venv) in p for p in where), where
    run = subprocess.run(
        [str(python), "-m", "parallel_wan.run", "steps=2", "num_frames=5", "height=48", "width=48"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    videos = list(work.glob("outputs/*/video.mp4"))
    assert len(videos) == 1 and videos[0].stat().st_size > 0
    helped = subprocess.run(
        [str(venv / "bin" / "parallel-wan"), "--help"], cwd=work, env=env, capture_output=True, text=True, timeout=300
    )
    assert helped.returncode == 0 and helped.stdout.startswith("usage: parallel-wan"), helped.stderr[-2000:]
