"""backend=jax renders the PyTorch backend's video: one device against torch, every mesh of 8
virtual CPU devices against one device, the step compiled once, the scanned loop equal to the
Python loop, bad input refused with torch's words before anything compiles, and the CLI.

Sizes: 48×48 pixels, 9 frames → 3×3×3 = 27 tokens, padded on every cp (2 → 28, 4 → 28,
8 → 32). fp32 throughout.

Time: compiling dominates (the VAE decode most). The module shares a persistent compilation
cache with its CLI run, so the subprocess finds the dp2_cp4 programs the in-process run
compiled; a miss only costs time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from harness.images import write_png
from harness.jax_devices import rel_err, require_eight_devices
from harness.jax_runs import BASE, STEP, generate, raw_config
from harness.videos import write_source_video

from parallel_wan.backends.jax.compile_log import CompileLog
from parallel_wan.config import ConfigError
from parallel_wan.run import CONF_DIR, validate_job

REPO = os.path.dirname(CONF_DIR)

require_eight_devices()


@pytest.fixture(scope="module")
def compile_cache(tmp_path_factory):
    from jax.experimental.compilation_cache import compilation_cache

    folder = str(tmp_path_factory.mktemp("jax_cache"))
    saved = jax.config.jax_compilation_cache_dir, jax.config.jax_persistent_cache_min_compile_time_secs
    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    compilation_cache.reset_cache()  # JAX decides once per process whether to use a cache
    yield folder
    jax.config.update("jax_compilation_cache_dir", saved[0])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", saved[1])
    compilation_cache.reset_cache()


@pytest.fixture(scope="module")
def one_device():
    # Tests run earlier in this process (tests/parallel/test_jax_cache.py) may have compiled the same
    # step program: JAX would reuse it and log no compile. Start from empty caches so the
    # compile counts below are this run's.
    jax.clear_caches()
    return generate(BASE + ["backend=jax", "mesh=single"])


@pytest.fixture(scope="module")
def dp2_cp4(compile_cache):
    return generate(BASE + ["backend=jax", "mesh=dp2_cp4"])


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_one_device_renders_the_torch_video(one_device):
    gen, _, _ = one_device
    ref, _, _ = generate(BASE + ["backend=torch"])
    # fp32 on both sides; XLA and torch sum in different orders (matmuls, convs, softmax):
    # measured 2.8e-6 on the latents after 3 steps, and frames within 1 level.
    assert rel_err(gen.latents, ref.latents) <= 1e-4
    diff = np.abs(gen.frames.astype(np.int16) - ref.frames.astype(np.int16))
    assert gen.frames.shape == ref.frames.shape == (9, 48, 48, 3)
    assert diff.max() <= 2, f"frames differ by up to {diff.max()}"


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_dp2_cp4_renders_the_one_device_video(one_device, dp2_cp4):
    # CFG over dp × (ring 2 × Ulysses 2); the decode split by height over 6 devices (6 latent
    # rows). Sharding changes only summation orders: measured 8.4e-7 on the latents, frames
    # within one rounding step.
    ref, gen = one_device[0], dp2_cp4[0]
    assert rel_err(gen.latents, ref.latents) <= 1e-5
    assert "vae_decode[6 devices by height]" in gen.info["compile"]
    diff = np.abs(gen.frames.astype(np.int16) - ref.frames.astype(np.int16))
    assert diff.max() <= 1 and (diff > 0).mean() < 1e-2


@pytest.mark.parametrize(
    "mesh",
    [
        ["mesh=ring8"],
        ["mesh=ulysses8"],  # the tiny model's 8 heads, one per device
        ["mesh=dp2_cp2"],  # CFG × Ulysses 2 on 4 of the 8 devices
    ],
)
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_mesh_equals_one_device(one_device, mesh, monkeypatch):
    ref = one_device[0]
    gen, _, _ = generate(BASE + ["backend=jax"] + mesh, decode=False, monkeypatch=monkeypatch)
    # Sharding changes only the attention's summation order (ring's log-sum-exp merges) and
    # matmul shapes: measured ≤ 3.5e-6 (ring 8) after 3 steps; the project's fp32 bound.
    assert rel_err(gen.latents, ref.latents) <= 1e-5
    assert gen.info["mesh"]["padding"] > 0  # 27 tokens never divide cp here


def test_fsdp_placement_equals_one_device(one_device, monkeypatch):
    from parallel_wan.backends.jax import placement

    # The tiny model's weights are all below the real size threshold; lower it so the run
    # really shards them over the 8 devices and gathers one layer at a time.
    monkeypatch.setattr(placement, "FSDP_MIN_SIZE", 1024)
    sharded = []

    def record(backend):
        place = backend.place

        def recording(tree, dtype, keep_fp32=None):
            placed = place(tree, dtype, keep_fp32)
            sharded.extend(
                s for s in jax.tree.leaves(placement.param_specs(placed)) if s != jax.sharding.PartitionSpec()
            )
            return placed

        monkeypatch.setattr(backend, "place", recording)

    gen, _, _ = generate(
        BASE + ["backend=jax", "mesh=dp2_cp4", "jax_fsdp=true"], decode=False, monkeypatch=monkeypatch, setup=record
    )
    assert sharded  # some weights really are split over the mesh
    assert rel_err(gen.latents, one_device[0].latents) <= 1e-5


def test_step_compiles_once_and_nothing_compiles_in_the_loop(one_device):
    gen, log, window = one_device
    # Both experts have the same shapes, so they share one program: compiled once, before the
    # loop; the loop itself compiles nothing (the sampler's elementwise ops were warmed too).
    assert log.count(STEP) == 1, log.events
    assert window.at_end - window.at_start == 0, log.events[window.at_start : window.at_end]
    assert gen.info["steps_per_expert"] == {"high_noise": 2, "low_noise": 1}  # the run crosses the boundary
    assert "compile" in gen.timings and set(gen.info["compile"]) >= {"step[high_noise+low_noise]"}


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_scan_loop_equals_python_loop(one_device, monkeypatch):
    ref = one_device[0]
    gen, log, _ = generate(BASE + ["backend=jax", "scan_loop=true"], decode=False, monkeypatch=monkeypatch)
    # The same float32 products and differences, selected per step by `where`; XLA fuses the
    # forward differently inside the scan, so one step differs by rounding (3.6e-8), which the
    # random tiny model amplifies ~20× per step: measured 7.7e-7 after 3 steps.
    assert rel_err(gen.latents, ref.latents) <= 1e-5
    assert "denoise_scan" in gen.info["compile"]


BAD = [
    ["num_frames=10"],
    ["height=50"],
    ["guidance_high=-1"],
    ["sampler=ddim"],
    ["model=tiny", "image=README.md"],
    ["model=wan2.2_t2v_a14b"],
    ["checkpoint_dir=/no/such/dir"],
    ["mesh=cp4", "mesh.ulysses=4"],  # cp ≠ ulysses × ring
    ["mesh=cp2", "mesh.cp=3", "mesh.ulysses=3", "mesh.ring=1"],  # 3 does not divide the 8 heads
    ["mesh=dp2", "guidance_high=1", "guidance_low=1"],  # dp needs CFG halves or prompts
]


@pytest.mark.parametrize("overrides", BAD)
def test_bad_input_gets_torch_words_before_any_compile(overrides):
    def message(backend, world):
        with pytest.raises(ConfigError) as err:
            validate_job(raw_config(overrides + [f"backend={backend}"]), world)
        return str(err.value)

    world = 2 if any(o.startswith("mesh=dp2") and "cp" not in o for o in overrides) else 1
    if any("mesh.cp=3" in o for o in overrides):
        world = 3
    with CompileLog() as log:
        jax_words = message("jax", jax.device_count())
    assert jax_words == message("torch", world)
    assert log.events == []


def test_jax_only_settings_and_device_counts_are_refused_early():
    with pytest.raises(
        ConfigError,
        match="needs dp×cp=2×8=16 JAX devices but 8 are visible.*XLA_FLAGS=--xla_force_host_platform_device_count=16",
    ):
        validate_job(raw_config(["backend=jax", "mesh=cp8", "mesh.dp=2", "prompt=[a,b]"]), 8)
    with pytest.raises(ConfigError, match="scan_loop=true is a JAX backend setting but backend=torch"):
        validate_job(raw_config(["scan_loop=true"]), 1)


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_cli_dp2_cp4_writes_the_in_process_video(dp2_cp4, compile_cache, tmp_path):
    out = tmp_path / "out"
    env = {
        **os.environ,
        "PYTHONPATH": REPO,
        "XLA_FLAGS": os.environ["XLA_FLAGS"],
        "JAX_COMPILATION_CACHE_DIR": compile_cache,
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0.5",
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "parallel_wan.run",
            "backend=jax",
            "mesh=dp2_cp4",
            f"output_dir={out}",
            "save_frames=true",
            *BASE,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("TIMING SUMMARY") == 1 and "compile:" in proc.stderr
    sidecar = json.loads((out / "video.json").read_text())
    assert sidecar["config"]["backend"] == "jax" and sidecar["mesh"]["dp"] == 2
    assert "compile" in sidecar["timings_s"]
    assert "vae_decode[6 devices by height]" in sidecar["compile"]
    print("CLI compile seconds:", sidecar["compile"], "timings:", sidecar["timings_s"])
    # The same programs on the same inputs: the same frames.
    assert np.array_equal(np.load(out / "frames.npy"), dp2_cp4[0].frames)


def several_hosts(env):
    """Why a process with `env` is one of several hosts (None: one host), as multihost.start reads it."""
    from parallel_wan.launch import detect

    launch = detect(env)
    return launch.source if launch.world_size > 1 else None


def test_several_hosts_are_detected_from_the_environment_only():
    assert several_hosts({}) is None
    assert several_hosts({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "1"}) is None  # one task: one host
    assert several_hosts({"TPU_WORKER_HOSTNAMES": "localhost"}) is None  # a single-host TPU VM
    assert "JAX_COORDINATOR_ADDRESS" in several_hosts(
        {"JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "0"}
    )
    assert "4 tasks" in several_hosts({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "4"})
    assert "2 hosts" in several_hosts({"TPU_WORKER_HOSTNAMES": "t1v-0,t1v-1"})


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_video_to_video_renders_the_torch_video(tmp_path, monkeypatch):
    """video= with image= on JAX, everything a remix of an image-to-video job runs at once, on
    dp2 × ulysses 2 of the 8 devices with the scanned loop and First-Block Cache: the source
    encoded by JAX's VAE, noised, sharded (TI2V: 18 tokens padded to 20, per-token timesteps, the
    first frame held over the noised source), the loop started at step 1 of 4, the cache deciding
    from there — torch's latents and skips to the fp32 bound of JAX against torch (above).
    Threshold 5: the relative change of the first block's residual is ~1 on the random model
    (test_jax_cache.py), so every step after the first run skips, whatever the rounding. (The
    two-expert case of a run begun part-way: test_parallel_pipeline.py, on torch; the plan is
    the host's, shared by both backends.)"""
    source = tmp_path / "source.mp4"
    write_source_video(source, frames=9, height=48, width=48)
    image = write_png(tmp_path / "first.png", 64, 96)
    size = [o for o in BASE if not o.startswith(("height=", "width=", "steps="))] + ["height=96", "width=64"]
    common = size + ["model=tiny_ti2v", f"image={image}", "steps=4"]
    v2v = common + [f"video={source}", "strength=0.75", "cache=fbcache", "cache.threshold=5"]
    ref, _, _ = generate(v2v + ["backend=torch"], decode=False, monkeypatch=monkeypatch)
    assert ref.info["cache"]["skipped"] == {"cond": [2, 3], "uncond": [2, 3]}
    gen, _, _ = generate(v2v + ["backend=jax", "mesh=dp2_cp2", "scan_loop=true"], decode=False, monkeypatch=monkeypatch)
    assert rel_err(gen.latents, ref.latents) <= 1e-4
    assert gen.info["cache"] == ref.info["cache"]
    plain, _, _ = generate(common + ["backend=torch"], decode=False, monkeypatch=monkeypatch)
    assert rel_err(plain.latents, ref.latents) > 1e-2  # the source changed the video
