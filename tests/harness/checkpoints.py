"""Tiny checkpoints: a test's own copy of a session checkpoint (conftest.py `tiny_t2v`) to damage."""

import shutil
from pathlib import Path


def copy_of(folder, tmp_path) -> Path:
    """A writable copy of a checkpoint folder under tmp_path/ckpt."""
    return Path(shutil.copytree(folder, Path(tmp_path) / "ckpt"))
