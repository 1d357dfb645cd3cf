"""Where the official Wan 2.2 sources are: the installed `wan22` package (the README's test
command installs it with --no-deps). Tests that compare against it fail, never skip, without it."""

import importlib.util
from pathlib import Path

import pytest


def official_wan_dir() -> Path:
    spec = importlib.util.find_spec("wan")
    if spec is None or spec.origin is None:
        pytest.fail(
            "the official Wan 2.2 package is not installed; install it with: pip install --no-deps wan22==2.2.11"
        )
    return Path(spec.origin).parent
