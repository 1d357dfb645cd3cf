"""Settings as the entry points compose them, and the one-line refusal of bad ones."""

import os

import pytest

from parallel_wan.config import ConfigError
from parallel_wan.config.compose import compose_settings, compose_spec
from parallel_wan.run import validate_job


def raw_config(overrides, output_dir="/tmp/unused"):
    """The composed settings of `overrides` (a dict, as run.py hands it on)."""
    return compose_settings(list(overrides)) | {"output_dir": output_dir}


def spec_for(*overrides):
    return compose_spec(list(overrides), output_dir="/tmp/unused")


def assert_refused(overrides, words):
    """The settings stop with one line (a ConfigError) holding every one of `words`."""
    with pytest.raises(ConfigError) as err:
        spec_for(*overrides)
    msg = str(err.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg, msg


def refusal(overrides, tmp_path, world=1) -> str:
    """The one-line refusal of these command-line overrides, checked as run.py checks them;
    asserts that nothing was written."""
    out = tmp_path / "out"
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(ConfigError) as err:
        raw = compose_settings(list(overrides))
        if not any(o.startswith("output_dir=") for o in overrides):
            raw["output_dir"] = str(out)
        validate_job(raw, world)
    msg = str(err.value)
    assert "\n" not in msg and msg.strip() == msg, msg
    assert not out.exists() and sorted(os.listdir(tmp_path)) == before
    return msg


def assert_words(msg, words):
    for w in words:
        assert w in msg, f"{w!r} not in: {msg}"
