"""Step caching on backend=jax: every cache, on one device and on meshes of the 8 virtual CPU
devices, in the host loop and in the scanned loop, with FSDP weights, gives the torch one-device
cached run's latents and the same sidecar record; the cached step compiles once whatever the
steps decide; a calibration measures torch's curve.

Settings where steps really are skipped on the tiny random model (48×48, 9 frames → 27 tokens,
8 steps: 6 high-noise, 2 low-noise; fp32):
- magcache: the preset's official curve and settings skip steps 1 2 4 5 (host plan);
- taylorseer: warm-up 2, interval 2, order 2 predicts steps 2 and 4 (the second from three
  factors);
- fbcache at threshold 0.95: both branches skip steps 1 2 5, only uncond skips 3 4 7 — the
  per-branch select — and the relative changes stay ≥ 2 % away from the threshold (measured
  on torch: cond 0.908 0.808 1.064 1.010 0.932 1.090, uncond 0.678 … 0.857), so summation
  order cannot flip a decision.

Time: compiling dominates; each JAX run is its own program (mesh, loop and cache kind are part
of its key).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from harness.jax_devices import rel_err, require_eight_devices
from harness.jax_runs import BASE, STEP, generate, raw_config
from harness.no_decode import NoDecode

require_eight_devices()

STEPS = ["steps=8"]
CACHES = {
    "magcache": ["cache=magcache"],
    "taylorseer": ["cache=taylorseer", "cache.warmup=2", "cache.interval=2", "cache.order=2"],
    "fbcache": ["cache=fbcache", "cache.threshold=0.95"],
}
MESHES = {
    "dp2_cp4": ["mesh=dp2_cp4"],  # CFG over dp × ring 2 × Ulysses 2; 27 tokens padded to 28
    "ring8_scan": ["mesh=ring8", "scan_loop=true"],  # the scanned loop on a ring, padded to 32
    "usp2x2_sharded": ["mesh=usp2x2", "memory=sharded"],  # FSDP: each layer gathered over the mesh
}


SIZE = [o for o in BASE if not o.startswith("steps=")] + STEPS


def overrides(kind: str, *extra) -> list[str]:
    return SIZE + CACHES[kind] + list(extra)


@pytest.fixture(scope="module")
def torch_runs():
    return {kind: generate(overrides(kind, "backend=torch"))[0] for kind in CACHES}


@pytest.fixture(scope="module")
def one_device():
    """Each cache on one JAX device, host loop (with its compile log)."""
    return {
        kind: generate(overrides(kind, "backend=jax", "mesh=single"), decode=False, monkeypatch=pytest.MonkeyPatch())
        for kind in CACHES
    }


def test_the_settings_really_skip(torch_runs):
    record = {kind: gen.info["cache"]["skipped"] for kind, gen in torch_runs.items()}
    assert record["magcache"] == {"cond": [1, 2, 4, 5], "uncond": [1, 2, 4, 5]}
    assert record["taylorseer"] == {"cond": [2, 4], "uncond": [2, 4]}
    assert record["fbcache"] == {"cond": [1, 2, 5], "uncond": [1, 2, 3, 4, 5, 7]}


@pytest.mark.parametrize("kind", CACHES)
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_one_device_equals_torch(kind, torch_runs, one_device):
    ref, (gen, _, _) = torch_runs[kind], one_device[kind]
    # fp32 both sides, XLA and torch sum in different orders: measured ≤ 2.9e-6.
    assert rel_err(gen.latents, ref.latents) <= 1e-5
    assert gen.info["cache"] == ref.info["cache"]  # the same record: skips, block forwards, settings


@pytest.mark.parametrize("kind", CACHES)
def test_step_compiles_once_whatever_the_steps_decide(kind, one_device):
    gen, log, window = one_device[kind]
    # Skip and compute steps (and both experts) share one program: the plan row, the cache
    # arrays and the First-Block decision are data, so the loop compiles nothing.
    assert log.count(STEP) == 1, log.events
    assert window.at_end - window.at_start == 0, log.events[window.at_start : window.at_end]
    assert gen.info["cache"]["skipped"]["cond"]  # steps were skipped in that one program


@pytest.mark.parametrize("mesh", MESHES)
@pytest.mark.parametrize("kind", CACHES)
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_mesh_equals_torch_one_device(kind, mesh, torch_runs, monkeypatch):
    from parallel_wan.backends.jax import placement

    # The tiny model's weights are all below the real FSDP size threshold; lower it so
    # memory=sharded really splits them and gathers layer by layer (also in block 0 alone).
    monkeypatch.setattr(placement, "FSDP_MIN_SIZE", 1024)
    ref = torch_runs[kind]
    gen, _, _ = generate(overrides(kind, "backend=jax", *MESHES[mesh]), decode=False, monkeypatch=monkeypatch)
    # Sharding changes summation orders only (measured ≤ 2.9e-6); the First-Block metric is
    # summed over every token shard and dp group before anyone decides, so the decisions,
    # split ones included, are the one-device decisions.
    assert rel_err(gen.latents, ref.latents) <= 1e-5
    assert gen.info["cache"] == ref.info["cache"]
    assert gen.info["mesh"]["padding"] > 0


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_calibration_measures_the_torch_curve(monkeypatch):
    base = [o for o in SIZE if o not in STEPS] + ["steps=4", "cache=magcache", "cache.calibrate=true"]
    ref = generate(base + ["backend=torch"])[0].info["cache"]
    gen = generate(base + ["backend=jax", "mesh=dp2_cp4"], decode=False, monkeypatch=monkeypatch)[0].info["cache"]
    # Per-branch means of ‖r_t‖/‖r_t−1‖ over rows and valid tokens, reduced over the mesh
    # (measured 3e-7 apart); a calibration skips nothing.
    assert np.allclose(gen.pop("measured_ratios"), ref.pop("measured_ratios"), rtol=0, atol=1e-5)
    assert gen == ref and gen["skipped"] == {"cond": [], "uncond": []}


def test_resumed_host_loop_equals_uninterrupted(torch_runs):
    """Stopping after a skipped step and resuming from the LoopState (its cache arrays and
    log included) gives the uninterrupted run's latents and record."""
    from parallel_wan.backends import make_backend
    from parallel_wan.pipeline import generate as run_generation
    from parallel_wan.run import validate_job

    job, ckpt = validate_job(raw_config(overrides("fbcache", "backend=jax", "mesh=single")), jax.device_count())
    spec = job.base

    def backend():
        b = make_backend(spec)
        b.video_decoder = lambda params, cfg: NoDecode()
        return b

    first = run_generation(spec, backend(), ckpt, stop_after=4)
    state = first.state.map(lambda a: a if isinstance(a, np.ndarray) else np.asarray(a))
    gen = run_generation(spec, backend(), ckpt, start=state)
    ref = torch_runs["fbcache"]
    assert rel_err(gen.latents, ref.latents) <= 1e-5
    assert gen.info["cache"] == ref.info["cache"]
