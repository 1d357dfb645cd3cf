"""Process-wide test setup shared by every test module."""

import os
import sys

# JAX reads XLA_FLAGS once, when it is first imported; the sequence-parallel tests need 8
# virtual CPU devices, so the flag is set here, before any test module can import jax. It
# changes nothing for torch.
_DEVICES_FLAG = "--xla_force_host_platform_device_count=8"
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _DEVICES_FLAG).strip()

# The suite's XLA flags beside it (harness/xla_flags.py: LLVM -O1 for XLA:CPU's
# compiles); a value the user set is kept.
from harness.xla_flags import SUITE as _SUITE_XLA  # noqa: E402 (no jax import)

if "xla_backend_optimization_level" not in os.environ["XLA_FLAGS"]:
    os.environ["XLA_FLAGS"] += " " + _SUITE_XLA

# libtpu (installed for the TPU ahead-of-time tests) makes every JAX process try to open a TPU
# first: a second of start-up, errors on stderr, and /tmp/libtpu_lockfile, which a second JAX
# process then fails on. The tests run JAX on CPU devices; the AOT tests ask libtpu for a
# topology directly (backends/jax/aot.py), which works with CPU as the default platform.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")

# One OpenMP thread per process, in the test workers and every process they start (torchrun
# sets the same for its workers). The suite keeps every core busy with processes already (two
# workers, each starting ranks, servers and CLI runs); torch's default of one intra-op thread per
# core on top oversubscribes the cores, and OpenMP's threads spin while they wait for work. On
# this 2-core machine, two modules side by side (fake-GPU runs + JAX cache, -n 2): 156 → 130 s
# wall, 231 → 187 CPU-s. libgomp reads the variable when torch loads, so it is set here, before
# any test module imports torch; a plugin that imported it first is corrected below.
os.environ.setdefault("OMP_NUM_THREADS", "1")
if "torch" in sys.modules:
    sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

# The built-in tiny model is stored once per machine (parallel_wan/builtin/stored.py); the
# tests' runs and every process they start share one store of their own, made for this
# session and removed after it, never the user's ~/.cache.
if "PARALLEL_WAN_CACHE_HOME" not in os.environ:
    import tempfile

    os.environ["PARALLEL_WAN_CACHE_HOME"] = _SESSION_CACHE = tempfile.mkdtemp(prefix="parallel_wan_tests_")
else:
    _SESSION_CACHE = None


import pytest  # noqa: E402 - after the environment above, which JAX reads when it is imported


def pytest_configure(config):
    # pytest-xdist's loadfile would hand the modules out ordered by their number of tests;
    # harness/schedule.py orders them by measured seconds instead (pytest_collection_modifyitems)
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(session, config, items):
    from harness.schedule import longest_first, module_seconds

    longest_first(items, module_seconds())


def pytest_unconfigure(config):
    if _SESSION_CACHE is not None:
        import shutil

        shutil.rmtree(_SESSION_CACHE, ignore_errors=True)


@pytest.fixture(scope="session")
def tiny_t2v(tmp_path_factory):
    """The built-in tiny T2V model (seed 0) and its checkpoint in both layouts (the official one
    with sharded experts), written once per session. Read-only: a test that damages a checkpoint
    copies it first (harness.checkpoints.copy_of)."""
    from types import SimpleNamespace

    from parallel_wan.builtin.tiny import build_tiny, write_checkpoint

    model = build_tiny("t2v", seed=0)
    root = tmp_path_factory.mktemp("tiny_t2v")
    folders = {layout: write_checkpoint(model, root / layout, layout) for layout in ("diffusers", "official")}
    return SimpleNamespace(
        model=model, layouts=folders, diffusers=str(folders["diffusers"]), official=str(folders["official"])
    )


@pytest.fixture(scope="session")
def fake_gpu_checkpoints(tmp_path_factory):
    """The tiny checkpoints of the fake-GPU runs (harness.fakegpu.simulate.Checkpoints), each task
    built on first use and shared by every fake-GPU module of the session. Read-only."""
    from harness.fakegpu.simulate import Checkpoints

    return Checkpoints(str(tmp_path_factory.mktemp("fakegpu_checkpoints")))


@pytest.fixture(scope="module", autouse=True)
def _rank_pool():
    """The gloo rank processes a module's tests share (harness/ranks.py) stop when the module
    ends: each module pays for its ranks' start-up once, and no rank outlives the module that
    used it (memory, and state a test module might leave in a process)."""
    yield
    import sys

    ranks = sys.modules.get("harness.ranks")
    if ranks is not None:
        ranks.POOL.close()
        ranks.SPAWNED_POOL.close()
