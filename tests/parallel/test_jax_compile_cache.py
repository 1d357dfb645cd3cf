"""compile_cache= (backends/jax/compile_cache.py): a run whose programs an earlier run compiled
loads them from the folder instead of compiling them, and renders the same bits; `off` writes
and reads nothing; bad values are one line before anything loads."""

from __future__ import annotations

import logging

import jax
import numpy as np
import pytest
from harness.jax_devices import require_eight_devices
from harness.jax_runs import BASE, STEP, generate, raw_config

from parallel_wan.backends.jax import compile_cache
from parallel_wan.config import ConfigError
from parallel_wan.run import validate_job

require_eight_devices()

RUN = [*BASE, "backend=jax", "mesh=single"]


@pytest.fixture
def jax_cache_restored():
    """The process-wide JAX cache as the session has it, after a test that points it elsewhere."""
    yield
    compile_cache.use("auto")


def _programs(folder) -> set[str]:
    return {p.name for p in folder.iterdir() if p.name.endswith("-cache")}


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_a_second_run_loads_every_program_and_renders_the_same_bits(tmp_path, jax_cache_restored, monkeypatch, caplog):
    folder = tmp_path / "programs"
    # every program written, however fast this machine compiles it (the product skips those under
    # 0.1 s, which would make what is kept depend on the machine's speed)
    monkeypatch.setattr(compile_cache, "MIN_COMPILE_S", 0.0)
    caplog.set_level(logging.INFO, logger="parallel_wan")
    jax.clear_caches()  # nothing from this process's memory: what the second run gets is from disk
    first, first_log, _ = generate([*RUN, f"compile_cache={folder}"])
    kept = _programs(folder)
    assert first_log.hits == 0 and any(name.startswith("jit_noise_prediction_step-") for name in kept)
    assert f"compile_cache={folder}: {folder} (0 programs kept" in caplog.text

    jax.clear_caches()
    second, second_log, _ = generate([*RUN, f"compile_cache={folder}"])
    assert f"({len(kept)} programs kept" in caplog.text
    # every program the first run wrote was loaded (the step among them), none written anew
    assert second_log.hits >= len(kept) and second_log.count(STEP) == 1
    assert _programs(folder) == kept
    # the executable XLA built, loaded: the very same bits out
    np.testing.assert_array_equal(np.asarray(second.latents), np.asarray(first.latents))
    np.testing.assert_array_equal(second.frames, first.frames)


def test_off_compiles_every_program_and_keeps_none(tmp_path, jax_cache_restored, monkeypatch):
    folder = tmp_path / "programs"
    compile_cache.use(str(folder))  # a folder JAX would read if off were ignored
    compile_cache.use("off")
    jax.clear_caches()
    gen, log, _ = generate([*RUN, "steps=1", "compile_cache=off"], decode=False, monkeypatch=monkeypatch)
    assert log.count(STEP) == 1 and log.hits == 0
    assert _programs(folder) == set()


def test_auto_is_the_cache_home_unless_jax_has_its_own(tmp_path, monkeypatch):
    monkeypatch.setenv("PARALLEL_WAN_CACHE_HOME", str(tmp_path))
    assert compile_cache.folder_for("auto") == str(tmp_path / "jax_programs")
    monkeypatch.setattr(compile_cache, "_USERS_OWN", "/their/jax/cache")
    assert compile_cache.folder_for("auto") == "/their/jax/cache"
    assert compile_cache.folder_for("off") is None


def test_the_setting_resolves_and_bad_values_are_one_line(tmp_path):
    def resolved(*overrides):
        return validate_job(raw_config(list(overrides)), 1)[0].base.execution.compile_cache

    assert resolved("backend=jax") == "auto"
    assert resolved("backend=jax", "compile_cache=off") == "off"
    assert resolved("backend=jax", f"compile_cache={tmp_path}/x") == f"{tmp_path}/x"
    assert resolved("backend=torch") == "auto"
    with pytest.raises(ConfigError, match=r"compile_cache=.* backend=torch; add backend=jax or drop compile_cache"):
        resolved("backend=torch", f"compile_cache={tmp_path}")
    (tmp_path / "a_file").write_text("")
    with pytest.raises(ConfigError, match=r"compile_cache=.*a_file.* is a file, not a folder"):
        resolved("backend=jax", f"compile_cache={tmp_path}/a_file")
    # the sidecar's config and the result keys leave it out: it decides nothing in the video
    spec = validate_job(raw_config(["backend=jax", "compile_cache=off"]), 1)[0].base
    assert "compile_cache" not in spec.to_dict()
