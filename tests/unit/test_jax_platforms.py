"""JAX on a host without a TPU must not probe libtpu (issue 22, item 9).

libtpu comes with the `test` extra. Left to choose its platforms, JAX tries the TPU first, and
libtpu prints five lines of errors on any host without one (`E0000 … unexpected worker
hostname`) and takes /tmp/libtpu_lockfile. The JAX backend therefore names JAX_PLATFORMS=cpu
before jax is imported when this host can only run JAX on its CPU anyway — never over a user's
own JAX_PLATFORMS, and never on a TPU host (its devices or its launcher's variables).
"""

import os
import re
import subprocess
import sys

import pytest
from harness.hosts import fake_host

from parallel_wan.launch import backend_choice
from parallel_wan.launch.backend_choice import jax_platforms, keep_jax_off_libtpu
from parallel_wan.run import CONF_DIR

REPO = os.path.dirname(CONF_DIR)
LIBTPU_NOISE = re.compile(r"^[EWF]\d{4} |TPU|libtpu\.so|libtpu_init|InitGoogle")


@pytest.fixture
def no_plugins(monkeypatch):
    """This install's JAX plugins as the test says (the real install has none: `cpu` and `tpu`
    are JAX's only built-in platforms)."""
    monkeypatch.setattr(backend_choice, "jax_plugins_installed", lambda: False)


def test_a_plain_cpu_host_gets_cpu(tmp_path, no_plugins):
    assert jax_platforms({}, root=fake_host(tmp_path)) == "cpu"
    # NVIDIA GPUs without a JAX GPU plugin: JAX can run on the CPU only, so the same.
    assert jax_platforms({}, root=fake_host(tmp_path, "/dev/nvidia0")) == "cpu"


@pytest.mark.parametrize(
    "host, env",
    [
        (("/dev/accel0",), {}),  # TPU v2–v4 chips
        ((), {"TPU_WORKER_HOSTNAMES": "a,b", "TPU_WORKER_ID": "0"}),  # a multi-host TPU job (launch/'s TPU kind)
        ((), {"MEGASCALE_NUM_SLICES": "2"}),
        ((), {"TPU_ACCELERATOR_TYPE": "v5p-8"}),
        ((), {"JAX_FORCE_TPU_INIT": "1"}),  # JAX's own "initialize the TPU even without chips"
        (("/dev/accel0",), {"TPU_WORKER_HOSTNAMES": "a,b", "TPU_WORKER_ID": "1"}),
    ],
)
def test_a_tpu_host_is_left_to_jax(tmp_path, no_plugins, host, env):
    root = fake_host(tmp_path, *host)
    assert jax_platforms(env, root=root) is None
    environ = dict(env)
    keep_jax_off_libtpu(environ, root=root)
    assert environ == env  # JAX_PLATFORMS untouched


def test_a_google_pci_device_is_a_tpu_host(tmp_path, no_plugins):  # TPU v5e/v5p/v6e, behind /dev/vfio
    assert jax_platforms({}, root=fake_host(tmp_path, vendor="0x1ae0")) is None


@pytest.mark.parametrize("value", ["", "cpu", "tpu", "cuda,cpu"])
def test_the_users_jax_platforms_wins(tmp_path, no_plugins, value):
    environ = {"JAX_PLATFORMS": value}
    keep_jax_off_libtpu(environ, root=fake_host(tmp_path))
    assert environ == {"JAX_PLATFORMS": value}


def test_a_jax_gpu_plugin_is_left_to_jax(tmp_path, monkeypatch):
    # Which of its plugins can start is JAX's to find out; naming them would turn a plugin that
    # fails into an error instead of JAX's fallback to the CPU.
    monkeypatch.setattr(backend_choice, "jax_plugins_installed", lambda: True)
    assert jax_platforms({}, root=fake_host(tmp_path, "/dev/nvidia0")) is None


def test_keep_jax_off_libtpu_sets_cpu_on_a_plain_host(tmp_path, no_plugins):
    environ = {"PATH": "/bin"}
    keep_jax_off_libtpu(environ, root=fake_host(tmp_path))
    assert environ == {"PATH": "/bin", "JAX_PLATFORMS": "cpu"}


def test_jax_plugins_installed_finds_a_namespace_plugin(tmp_path, monkeypatch):
    # JAX imports every module under the `jax_plugins` namespace package (and the `jax_plugins`
    # entry points); one there is a platform JAX may start.
    (tmp_path / "jax_plugins" / "xla_fake").mkdir(parents=True)
    (tmp_path / "jax_plugins" / "xla_fake" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert backend_choice.jax_plugins_installed() is True


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_the_cli_prints_no_libtpu_errors_on_this_cpu_host(tmp_path):
    """A user's shell has no JAX_PLATFORMS (tests/conftest.py sets one for the tests: removed here)."""
    if backend_choice.tpu_present():
        pytest.skip("this host has a TPU; libtpu is meant to start")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("JAX_PLATFORMS", "ALLOW_MULTIPLE_LIBTPU_LOAD") and not k.startswith(("TPU_", "MEGASCALE_"))
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "parallel_wan.run",
            "backend=jax",
            "mesh=single",
            "steps=1",
            "num_frames=1",
            "height=32",
            "width=32",
            f"output_dir={tmp_path}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, "PYTHONPATH": REPO},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    # libtpu's lines: glog's "E0000 …", its "WARNING: … TPU …" and InitGoogle notes, the trace
    # into libtpu_init_utils.cc (not the run's own log, whose output path names this test).
    noise = [line for line in proc.stderr.splitlines() if LIBTPU_NOISE.search(line)]
    assert noise == [], "\n".join(noise)
