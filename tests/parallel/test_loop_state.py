"""One denoising loop over an explicit LoopState: a generation stopped after step k, its state
saved to disk and resumed in a NEW process, ends with the latents of an uninterrupted run, bit
for bit — torch on one process and on a padded ring × Ulysses mesh, JAX's host loop and JAX's
scanned loop run as two scans. And the samplers exist once: JAX's scan calls the update the
eager loop calls.

The resumed run is a fresh process (tests/distributed.py spawns it) that only loads what the
stopped run saved; the uninterrupted and the stopped run share the process before it. The VAE decode is left out (the
latents are what the loop makes).
"""

from __future__ import annotations

import ast
import json
import os

import numpy as np
import pytest
from harness.no_decode import NoDecode
from harness.ranks import run_on_ranks

from parallel_wan.pipeline.loop_state import LoopState, load_loop_state, rank_stem, save_loop_state
from parallel_wan.run import CONF_DIR

REPO = os.path.dirname(CONF_DIR)
STEPS, STOP = 5, 2  # the tiny model's boundary puts steps 0-1 on the high-noise expert
# 48×48 pixels, 9 frames: 3×3×3 = 27 tokens, padded to 28 on 4 ranks.
BASE = ["dtype=float32", f"steps={STEPS}", "num_frames=9", "seed=3", "prompt='a dog jumps'", "height=48", "width=48"]


def run_part(rank, world_size, overrides, directory, part):
    """part "whole_then_stop": the uninterrupted run (rank 0 returns its latents), then a run
    stopped after STOP steps whose state each rank saves; part "resume": a run from the saved
    state (rank 0 returns its latents)."""
    from parallel_wan.backends import make_backend
    from parallel_wan.config import resolve
    from parallel_wan.config.compose import compose_settings
    from parallel_wan.pipeline import generate, preflight

    raw = compose_settings(list(overrides)) | {"output_dir": "/tmp/unused"}
    if "backend=jax" in overrides:
        import jax

        spec = resolve(raw, jax.device_count())
        backend = make_backend(spec)
    else:
        from parallel_wan.backends.torch.backend import start_torch_backend
        from parallel_wan.launch import Launch

        spec = resolve(raw, world_size)
        backend = start_torch_backend(spec.execution.device, spec.mesh, Launch(rank, world_size, rank, "test"))
    backend.video_decoder = lambda params, cfg: NoDecode()
    stem = rank_stem(directory, rank)
    if part == "resume":
        start, meta = load_loop_state(stem)
        assert meta == {"overrides": list(overrides)} and start.step == STOP
        gen = generate(spec, backend, preflight(spec), start=start)
        return gen.latents if rank == 0 else None
    whole = generate(spec, backend, preflight(spec))
    stopped = generate(spec, backend, preflight(spec), stop_after=STOP)
    assert stopped.latents is None and stopped.state.step == STOP
    save_loop_state(stem, stopped.state, {"overrides": list(overrides)}, backend.to_host)
    return whole.latents if rank == 0 else None


def whole_and_resumed(world, overrides, directory):
    whole = run_on_ranks(run_part, world, overrides, directory, "whole_then_stop", timeout_s=600)[0]
    resumed = run_on_ranks(run_part, world, overrides, directory, "resume", timeout_s=600)[0]
    return whole, resumed


@pytest.mark.parametrize("sampler", ["unipc", "euler"])
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_torch_one_process_resumes_bit_for_bit(sampler, tmp_path):
    whole, resumed = whole_and_resumed(1, BASE + [f"sampler={sampler}"], str(tmp_path))
    assert np.array_equal(whole, resumed)
    record = json.loads((tmp_path / "state.rank0.json").read_text())
    assert record["step"] == STOP and record["sampler"] == (
        ["last", "x0_prev", "x0_prev2"] if sampler == "unipc" else []
    )


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_torch_padded_ring_ulysses_mesh_resumes_bit_for_bit(tmp_path):
    # usp2x2: Ulysses 2 × ring 2 on 4 gloo ranks, 27 tokens padded to 28; each rank saves its shard.
    whole, resumed = whole_and_resumed(4, BASE + ["mesh=usp2x2"], str(tmp_path))
    assert np.array_equal(whole, resumed)
    shards = [load_loop_state(rank_stem(tmp_path, r))[0] for r in range(4)]
    assert [s.latents.shape[1] for s in shards] == [7] * 4  # 28 padded tokens, 7 per rank


@pytest.fixture
def jax_env(tmp_path_factory, monkeypatch):
    # The spawned processes share one persistent compilation cache: the resumed run finds
    # the programs the whole run compiled.
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "jax_cache"))
    monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_jax_host_loop_resumes_bit_for_bit(jax_env, tmp_path):
    # mesh=cp4 over the 8 virtual devices: the state is a sharded global array, saved from the host.
    whole, resumed = whole_and_resumed(1, BASE + ["backend=jax", "mesh=cp4"], str(tmp_path))
    assert np.array_equal(whole, resumed)


@pytest.mark.parametrize("sampler", ["unipc", "euler"])
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_jax_scan_as_two_scans_resumes_bit_for_bit(sampler, jax_env, tmp_path):
    # [0, STOP) in one scan, state saved; [STOP, N) in a second scan of a new process.
    overrides = BASE + ["backend=jax", "scan_loop=true", f"sampler={sampler}"]
    whole, resumed = whole_and_resumed(1, overrides, str(tmp_path))
    assert np.array_equal(whole, resumed)


# ---------------------------------------------------------------- the state's files
def test_state_files_round_trip_and_refuse_a_mixed_pair(tmp_path):
    rng = np.random.default_rng(0)
    state = LoopState(
        3,
        rng.standard_normal((1, 7, 4), dtype=np.float32),
        {"last": rng.standard_normal((1, 7, 4)), "x0_prev": None},
        {"skip": np.arange(3)},
    )
    stem = rank_stem(tmp_path, 2)
    save_loop_state(stem, state, {"prompt": "a dog"})
    assert sorted(os.listdir(tmp_path)) == ["state.rank2.json", "state.rank2.safetensors"]  # no temporaries left
    back, meta = load_loop_state(stem)
    assert meta == {"prompt": "a dog"} and back.step == 3 and list(back.sampler) == ["last", "x0_prev"]
    assert back.sampler["x0_prev"] is None and back.latents.dtype == np.float32
    for got, want in [
        (back.latents, state.latents),
        (back.sampler["last"], state.sampler["last"]),
        (back.cache["skip"], state.cache["skip"]),
    ]:
        assert got.dtype == want.dtype and np.array_equal(got, want)
    # A crash between the two renames of a later save leaves new arrays beside the old JSON.
    old_json = (tmp_path / "state.rank2.json").read_text()
    save_loop_state(stem, state.map(lambda a: a + 1))
    (tmp_path / "state.rank2.json").write_text(old_json)
    with pytest.raises(ValueError, match="come from different saves"):
        load_loop_state(stem)


# ---------------------------------------------------------------- the samplers exist once
class FakePredictor:
    """What ScannedLoop reads from a JaxNoisePredictor, with products standing in for the
    transformer (rounded alike in and out of a compiled program), so the scan and the eager
    loop can be compared bit for bit: the forward's fusion moves the real ones by rounding."""

    def __init__(self, x):
        import jax
        import jax.numpy as jnp
        from jax.sharding import NamedSharding, PartitionSpec

        self.x_sharding = NamedSharding(jax.sharding.Mesh(np.asarray(jax.devices()[:1]), ("dp",)), PartitionSpec())
        self.task = type("Task", (), {"experts": {"high": (None, jnp.float32(0.7)), "low": (None, jnp.float32(1.3))}})
        self.cos = self.sin = self.cond = self.t_mask = None

    def context_for(self, name):
        return None

    @staticmethod
    def velocity(w, x, t, guidance):
        return x * w * guidance * (t / 1000)

    def program_key(self, name):
        return ("fake-loop-test", name)

    def step_function(self, name):
        return lambda params, x, t, guidance, *aux: self.velocity(params, x, t, guidance)

    def shard(self, x):
        import jax

        return jax.device_put(x, self.x_sharding)


@pytest.mark.parametrize("name", ["unipc", "euler"])
def test_scan_calls_the_eager_update_and_matches_it_bit_for_bit(name):
    import jax.numpy as jnp

    from parallel_wan.backends.jax import ops as jops
    from parallel_wan.backends.jax.scan_loop import ScannedLoop
    from parallel_wan.pipeline.steps import Step
    from parallel_wan.sampling import euler_update, make_sampler, make_schedule, unipc_update

    schedule = make_schedule("official", 6, 12.0)
    sampler = make_sampler(name, schedule)
    plan = [Step(i, float(t), "high" if i < 3 else "low", 5.0 - i) for i, t in enumerate(schedule.timesteps)]
    x = jnp.asarray(np.random.default_rng(1).standard_normal((1, 16, 8), dtype=np.float32))
    predictor = FakePredictor(x)
    scanned = ScannedLoop(predictor, plan, sampler, held=None)
    assert scanned.update is sampler.update is {"unipc": unipc_update, "euler": euler_update}[name]

    eager, state = x, sampler.initial_state()
    for i, step in enumerate(plan):
        pred = predictor.velocity(
            predictor.task.experts[step.expert][1], eager, np.float32(step.t), np.float32(step.guidance)
        )
        eager, state = sampler.update(sampler.coefs(i), state, pred, eager, jops)
    whole, _ = scanned(x, sampler.initial_state(), 0, len(plan))
    first, mid = scanned(x, sampler.initial_state(), 0, 2)
    second, _ = scanned(first, mid, 2, len(plan))
    assert np.array_equal(np.asarray(second), np.asarray(whole))
    # Compiled, XLA's CPU backend contracts `a*b - c` into fused multiply-adds, so the scan and
    # the op-by-op update differ in the last bit of some elements.
    err = np.abs(np.asarray(whole) - np.asarray(eager)).max() / np.abs(np.asarray(eager)).max()
    print(f"{name}: scan vs eager max relative difference {err:.1e}")
    assert err <= 1e-6


def test_scan_loop_defines_no_sampler_math():
    # The scan gets the update and the table from the sampler; its module names neither.
    tree = ast.parse(open(os.path.join(REPO, "parallel_wan", "backends", "jax", "scan_loop.py")).read())
    defined = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    imported = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not {d for d in defined if any(w in d.lower() for w in ("update", "table", "unipc", "euler"))}, defined
    assert not {m for m in imported if "sampling" in m}, imported
