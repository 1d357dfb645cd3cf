"""The built-in tiny model stored once per machine (parallel_wan/builtin/stored.py): the stored
folder holds exactly what a fresh write holds, later runs read it without building, writers
racing each other leave one whole folder, anything that decides the bytes is a new folder, and
an unwritable cache home falls back to the run's own folder."""

from __future__ import annotations

import dataclasses
import filecmp
import multiprocessing as mp
import os

import pytest

from parallel_wan.builtin import stored
from parallel_wan.builtin.tiny import build_tiny, write_checkpoint


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("PARALLEL_WAN_CACHE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def same_tree(a, b) -> list[str]:
    """Relative paths that differ between two folders (missing on one side or other bytes)."""
    names = {os.path.relpath(os.path.join(d, f), root) for root in (a, b) for d, _, fs in os.walk(root) for f in fs}
    return sorted(
        n
        for n in names
        if not (os.path.isfile(a / n) and os.path.isfile(b / n) and filecmp.cmp(a / n, b / n, shallow=False))
    )


@pytest.mark.parametrize("kind", ["t2v", "ti2v"])
def test_the_stored_folder_is_a_fresh_write_byte_for_byte(home, tmp_path, kind):
    folder = stored.tiny_checkpoint_folder(kind, tmp_path / "fallback")
    assert folder.parent == home / "builtin" and folder.name.startswith(("tiny-", "tiny_ti2v-"))
    fresh = write_checkpoint(build_tiny(kind, seed=0), tmp_path / "fresh", layout="diffusers")
    differ = same_tree(folder, fresh)
    # model_index.json records the diffusers version, the same for both; nothing else may differ
    assert differ == [], differ
    assert not (tmp_path / "fallback").exists()


def test_a_later_run_reads_the_stored_folder_without_building(home, tmp_path, monkeypatch):
    first = stored.tiny_checkpoint_folder("t2v", tmp_path / "a")

    def no_build(*args, **kwargs):
        raise AssertionError("built again")

    monkeypatch.setattr("parallel_wan.builtin.tiny.build_tiny", no_build)
    assert stored.tiny_checkpoint_folder("t2v", tmp_path / "b") == first


def _store(home, kind, queue):
    os.environ["PARALLEL_WAN_CACHE_HOME"] = home
    queue.put(str(stored.tiny_checkpoint_folder(kind, os.path.join(home, f"fallback{os.getpid()}"))))


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_writers_racing_each_other_leave_one_whole_folder(home):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_store, args=(str(home), "t2v", queue)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]
    folders = {queue.get(timeout=5) for _ in procs}
    assert len(folders) == 1
    # one folder, no partial ones beside it, no fallback written
    assert sorted(os.listdir(home / "builtin")) == [os.path.basename(folders.pop())]
    assert sorted(os.listdir(home)) == ["builtin"]


def test_what_decides_the_bytes_decides_the_folder(home, monkeypatch):
    from parallel_wan.models import registry

    t2v, ti2v = stored.stored_folder("t2v"), stored.stored_folder("ti2v")
    assert t2v != ti2v
    tiny = registry.ARCHITECTURES["tiny"]
    monkeypatch.setitem(
        registry.ARCHITECTURES,
        "tiny",
        dataclasses.replace(tiny, transformer=dataclasses.replace(tiny.transformer, num_layers=3)),
    )
    assert stored.stored_folder("t2v") != t2v  # another architecture
    monkeypatch.setitem(registry.ARCHITECTURES, "tiny", tiny)
    real_version = stored.metadata.version
    monkeypatch.setattr(stored.metadata, "version", lambda name: "0.0" if name == "diffusers" else real_version(name))
    assert stored.stored_folder("t2v") != t2v  # another diffusers
    monkeypatch.setattr(stored.metadata, "version", real_version)
    assert stored.stored_folder("t2v") == t2v


def test_a_cache_home_that_is_a_file_falls_back_to_the_runs_folder(home, tmp_path):
    home.parent.mkdir(exist_ok=True)
    home.write_text("not a folder")  # unwritable even for root (who writes through read-only modes)
    folder = stored.tiny_checkpoint_folder("t2v", tmp_path / "run")
    assert folder == tmp_path / "run" and (folder / "model_index.json").is_file()
    assert home.read_text() == "not a folder"


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_the_cli_run_uses_the_store(home, tmp_path):
    """The README's main command: the first run stores the model, the second reads it and
    renders the same video without importing diffusers."""
    import subprocess
    import sys

    import numpy as np
    from harness.paths import REPO

    imported = []
    for name in ("first", "second"):
        proc = subprocess.run(
            [
                sys.executable,
                "-X",
                "importtime",
                "-m",
                "parallel_wan.run",
                "model=tiny",
                "steps=2",
                "num_frames=5",
                "height=32",
                "width=32",
                f"output_dir={tmp_path / name}",
                "save_frames=true",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PYTHONPATH": REPO, "PARALLEL_WAN_CACHE_HOME": str(home)},
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        imported.append(
            {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
        )
    assert len(os.listdir(home / "builtin")) == 1
    assert "diffusers" in imported[0] and "diffusers" not in imported[1]

    assert np.array_equal(np.load(tmp_path / "first" / "frames.npy"), np.load(tmp_path / "second" / "frames.npy"))
