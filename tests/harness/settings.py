"""Settings as the entry points compose them, and the one-line refusal of bad ones."""

import pytest

from parallel_wan.config import ConfigError
from parallel_wan.config.compose import compose_settings, compose_spec


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

