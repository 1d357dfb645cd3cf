"""Step caches (cache=magcache|taylorseer|fbcache) on every mesh, memory mode, compile=true and
across a stopped-and-resumed loop: the one-device cached run's latents and the same skipped
steps everywhere.

- Every mesh preset (padded Ulysses, ring, hybrid, CFG parallel, CFG parallel × Ulysses) on
  gloo ranks gives the one-device cached latents (fp32, rel ≤ 1e-5) and every rank reports the
  one-device `skipped` record; each cache really skips steps at these settings.
- First-Block Cache's decision is made on the group's sums: a threshold picked between the two
  cp ranks' LOCAL metrics (a rank alone would decide the other way) still gives every rank the
  one-device decision, and the run completes (the harness's timeout would catch a hang).
- memory=sharded (FSDP over the ranks) and memory=swap (block-by-block exchange and a one-step
  prefetch) equal the resident cached run bit for bit, also when the exchange step is skipped
  (the low-noise expert ends resident, the high-noise one freed); compile=true within the
  compile tests' tolerance.
- generate(stop_after=k) with k inside a run of skipped steps, saved and resumed in a new
  process, equals the uninterrupted cached run bit for bit with the same record.

The VAE decode is left out (the latents are what a cache changes).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from harness.frames import RTOL
from harness.no_decode import NoDecode
from harness.probes import assert_swapped_at, swap_probe
from harness.ranks import run_on_ranks

# 8 steps: the tiny model runs steps 0-5 on the high-noise expert (5 is the swap's exchange
# step) and 6-7 on the low-noise one. 48×48 pixels, 9 frames: 27 tokens, padded on cp 2 and 4.
BASE = ["dtype=float32", "steps=8", "num_frames=9", "seed=3", "prompt='a dog jumps'", "height=48", "width=48"]
EXCHANGE_STEP = 5
# Each cache at settings that skip on the tiny model, and what they skip (checked on one device).
CACHES = {
    # the preset's official T2V-A14B curve, threshold 0.06, K 2, retention 0.2
    "magcache": (["cache=magcache"], {"cond": [1, 2, 4, 5], "uncond": [1, 2, 4, 5]}),
    # per expert: warm-up steps 0-1 compute, then one computed step in three (high: 3; low: 6, 7)
    "taylorseer": (
        ["cache=taylorseer", "cache.warmup=2", "cache.interval=3"],
        {"cond": [2, 4, 5], "uncond": [2, 4, 5]},
    ),
    # random weights change fast: the relative L1 change of block 0's residual is 0.6-1.1 here,
    # so a high threshold skips — both branches on steps 1, 2, 5, uncond alone on 3, 4, 7
    "fbcache": (["cache=fbcache", "cache.threshold=0.95"], {"cond": [1, 2, 5], "uncond": [1, 2, 3, 4, 5, 7]}),
}
KINDS = list(CACHES)
# stop_after=k: the stop falls between two skipped steps (k − 1 and k)
RESUME_AFTER = {"magcache": 2, "taylorseer": 5, "fbcache": 2}
PROMPTS = ["prompt=['a dog jumps','a red car at night']"]  # dp2 × cp2 splits them: FB sums over the world


def cached(kind, *extra):
    return BASE + CACHES[kind][0] + list(extra)


# ---------------------------------------------------------------- running on ranks
class FirstBlockLedger:
    """Records every First-Block decision made in this process: the step, this rank's LOCAL
    sums ([Σ|r − r_ref|, Σ|r_ref|] per branch, caching/first_block.py), the sums the decision
    was made on and the decision."""

    def __enter__(self):
        from parallel_wan.caching import first_block
        from parallel_wan.caching.host_cache import StepCache

        self.records, self.saved = [], (first_block.branch_sums, first_block.computes, StepCache._first_block)
        real_sums, real_computes, real_first_block = self.saved
        records = self.records

        def first_block_step(cache, *args):
            records.append({"step": cache.index})
            return real_first_block(cache, *args)

        def branch_sums(*args):
            out = real_sums(*args)
            records[-1]["local"] = out.double().cpu().numpy()
            return out

        def computes(sums, threshold):
            out = real_computes(sums, threshold)
            records[-1].update(group=np.asarray(sums, np.float64), compute=list(out))
            return out

        first_block.branch_sums, first_block.computes, StepCache._first_block = branch_sums, computes, first_block_step
        return self

    def __exit__(self, *exc):
        from parallel_wan.caching import first_block
        from parallel_wan.caching.host_cache import StepCache

        first_block.branch_sums, first_block.computes, StepCache._first_block = self.saved


def _spec(overrides, world):
    from parallel_wan.config.compose import compose_spec

    return compose_spec(list(overrides), world, output_dir="/tmp/unused")


def cached_runs(rank, world, runs):
    """Runs on this rank, one after the other (one backend per mesh); each run is (overrides,
    stop, state): stop=k stops after k steps and saves the loop state under the folder
    `state`; a `state` with stop=None resumes from the state saved there. Per run: the latents
    (rank 0; None when stopped), the sidecar's cache record, this rank's First-Block ledger and
    the names of the cache arrays in a stopped run's loop state."""
    from parallel_wan.backends.torch.backend import start_torch_backend
    from parallel_wan.launch import Launch
    from parallel_wan.pipeline import generate, preflight
    from parallel_wan.pipeline.loop_state import load_loop_state, rank_stem, save_loop_state

    backends, out = {}, []
    for overrides, stop, state in runs:
        spec = _spec(overrides, world)
        if repr(spec.mesh) not in backends:
            backends[repr(spec.mesh)] = start_torch_backend(
                spec.execution.device, spec.mesh, Launch(rank, world, rank, "test")
            )
            backends[repr(spec.mesh)].video_decoder = lambda params, cfg: NoDecode()
        backend = backends[repr(spec.mesh)]
        start = load_loop_state(rank_stem(state, rank))[0] if state and stop is None else None
        with FirstBlockLedger() as ledger:
            gen = generate(spec, backend, preflight(spec), start=start, stop_after=stop)
        if stop is not None:
            save_loop_state(rank_stem(state, rank), gen.state, {}, backend.to_host)
            out.append({"latents": None, "cache": None, "fb": ledger.records, "state": sorted(gen.state.cache)})
            continue
        out.append({"latents": gen.latents if rank == 0 else None, "cache": gen.info["cache"], "fb": ledger.records})
    return out


def rel_err(got, ref):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(got - ref) / np.linalg.norm(ref)


def same_record(got, ref):
    keys = ("skipped", "block_forwards", "block_forwards_dense")
    return {k: got[k] for k in keys} == {k: ref[k] for k in keys}


def assert_margins(result, threshold, margin=1e-3):
    """Every First-Block decision of a reference run is at least `margin` (relative) from the
    threshold: the ~1e-6 a mesh changes the sums by cannot flip one."""
    for rec in result["fb"]:
        for a, b in rec.get("group", []):  # (a step after the expert's first)
            assert abs(a / b - threshold) > margin * threshold, (rec, threshold)


# ---------------------------------------------------------------- the jobs
# The spawned processes are few (each spends ~15 s importing what the tiny model needs): one
# process for every one-device run, one 2-rank and one 4-rank job for every mesh of that size.
MESHES = {
    "ulysses2_padded": (2, ["mesh=cp2"]),
    "ring2_padded": (2, ["mesh=cp2", "mesh.ulysses=1", "mesh.ring=2"]),
    "dp2_cfg": (2, ["mesh=dp2"]),
    "usp2x2_padded": (4, ["mesh=usp2x2"]),
    "dp2_cp2_padded": (4, ["mesh=dp2_cp2"]),
}
SHARDED_ON = "ulysses2_padded"  # memory=sharded runs its caches on this mesh too (FSDP over both ranks)
PROMPTS_ON = "dp2_cp2_padded"  # and two prompts split over dp, First-Block sums over the world
STRADDLE_ON = "ulysses2_padded"  # the group-decision test's mesh


def _shard_sums(residual, reference, shards):
    """(cp ranks, branches, 2): the model's own branch sums (caching/first_block.py) of the
    one-device residuals over each cp rank's valid tokens — what each rank adds to the group."""
    import torch

    from parallel_wan.backends.torch import ops
    from parallel_wan.caching import first_block

    out = []
    for c in range(shards.cp):
        index = shards.token_index(c)
        keep = torch.as_tensor(index[index < shards.tokens])
        valid = torch.ones((1, len(keep), 1))
        out.append(first_block.branch_sums(residual[:, keep], reference[:, keep], valid, 2, ops).double().numpy())
    return np.asarray(out)


@pytest.fixture(scope="module")
def straddle():
    """A First-Block threshold the cp2 ranks alone would decide on differently at step 1 (the
    first decision): from a one-device run, step 1's residual and step 0's, the metric each
    rank computes over its own shard (14 + 13 valid tokens); the threshold halfway between the
    group's metric and the rank further from it — the group (and the nearer rank) skip, the
    other rank alone would compute."""
    from parallel_wan.backends.torch.backend import start_torch_backend
    from parallel_wan.caching import first_block
    from parallel_wan.parallel.shards import SequenceShards
    from parallel_wan.pipeline import generate

    recorded, real_sums = [], first_block.branch_sums

    def recording(residual, reference, *args):
        recorded.append((residual.clone(), reference.clone()))
        return real_sums(residual, reference, *args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(first_block, "branch_sums", recording)
        # threshold 0: steps 0 and 1 compute, and step 1 compares its residual with step 0's
        generate(_spec(BASE + ["cache=fbcache", "cache.threshold=0"], 1), start_torch_backend("cpu"), stop_after=2)
    ((residual, reference),) = recorded
    sums = _shard_sums(residual, reference, SequenceShards(residual.shape[1], 2))
    local = sums[..., 0] / sums[..., 1]  # (ranks, branches)
    group = sums.sum(axis=0)[:, 0] / sums.sum(axis=0)[:, 1]
    branch = int(np.argmax(np.abs(local[0] - local[1])))
    low, high = sorted(local[:, branch])
    assert low < group[branch] < high
    threshold = float((group[branch] + high) / 2)
    print(
        f"straddle: branch {branch}, local metrics {local[:, branch]}, group {group[branch]:.4f}, "
        f"threshold {threshold:.4f}"
    )
    return {
        "branch": branch,
        "local": local[:, branch],
        "threshold": threshold,
        "overrides": BASE + ["cache=fbcache", f"cache.threshold={threshold!r}"],
    }


def _mesh_jobs(straddle):
    """{world: [(label, overrides)]}: every run of the mesh tests, by the job that runs it."""
    jobs = {1: [(("one_device", kind), cached(kind)) for kind in KINDS]}
    jobs[1] += [
        (("one_device", "prompts"), cached("fbcache", *PROMPTS)),
        (("one_device", "straddle"), straddle["overrides"]),
    ]
    for name, (world, mesh) in MESHES.items():
        runs = jobs.setdefault(world, [])
        runs += [((name, kind), cached(kind, *mesh)) for kind in KINDS]
        if name == SHARDED_ON:
            runs += [((name, kind, "sharded"), cached(kind, *mesh, "memory=sharded")) for kind in KINDS]
        if name == PROMPTS_ON:
            runs += [((name, "prompts"), cached("fbcache", *mesh, *PROMPTS))]
        if name == STRADDLE_ON:
            runs += [((name, "straddle"), straddle["overrides"] + mesh)]
    return jobs


@pytest.fixture(scope="module")
def jobs(straddle, tmp_path_factory):
    """The runs of one world size, in one spawned job each, run when first asked for:
    jobs(world) → {label: [each rank's result]}. The one-device job also stops each cache
    inside a skip run and saves the loop state (the resume test): label ("stopped", kind)."""
    plan, done = _mesh_jobs(straddle), {}
    states = tmp_path_factory.mktemp("cache_states")

    def get(world):
        if world not in done:
            runs = [(overrides, None, None) for _, overrides in plan[world]]
            labels = [label for label, _ in plan[world]]
            if world == 1:
                runs += [(cached(kind), RESUME_AFTER[kind], str(states / kind)) for kind in KINDS]
                labels += [("stopped", kind) for kind in KINDS]
            per_rank = run_on_ranks(cached_runs, world, runs, timeout_s=600)
            done[world] = {label: [results[i] for results in per_rank] for i, label in enumerate(labels)}
        return done[world]

    get.states = states
    return get


@pytest.fixture(scope="module")
def one_device(jobs):
    """The one-device cached runs; each cache skips what CACHES says, and no First-Block
    decision is within 0.1 % of its threshold."""
    refs = {label[1]: results[0] for label, results in jobs(1).items() if label[0] == "one_device"}
    for kind in KINDS:
        assert refs[kind]["cache"]["skipped"] == CACHES[kind][1], (kind, refs[kind]["cache"])
    assert_margins(refs["fbcache"], 0.95)
    assert_margins(refs["prompts"], 0.95)
    assert refs["prompts"]["cache"]["skipped"]["cond"], refs["prompts"]["cache"]
    return refs


# ---------------------------------------------------------------- every mesh
@pytest.mark.parametrize("name", list(MESHES))
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_every_cache_on_every_mesh_equals_one_device(one_device, jobs, name):
    """Every cache on the mesh: the one-device latents, and every rank reports the one-device
    skipped steps. On ulysses2 also memory=sharded (equal to the resident mesh run bit for
    bit); on dp2×cp2 also two prompts split over dp."""
    world, _ = MESHES[name]
    results = {label[1:]: per_rank for label, per_rank in jobs(world).items() if label[0] == name}
    for (what, *mode), per_rank in results.items():
        if what == "straddle":
            continue  # the next test's
        ref = one_device[what]
        err = rel_err(per_rank[0]["latents"], ref["latents"])
        print(f"{name} {what} {mode}: latents rel err {err:.2e}, skipped {per_rank[0]['cache']['skipped']}")
        assert err <= RTOL, (name, what, mode, err)
        for rank, got in enumerate(per_rank):  # every rank took the one-device decisions
            assert same_record(got["cache"], ref["cache"]), (name, what, mode, rank, got["cache"])
        if mode == ["sharded"]:  # FSDP moves bytes, not arithmetic: the resident mesh run exactly
            np.testing.assert_array_equal(per_rank[0]["latents"], results[(what,)][0]["latents"], err_msg=what)
    assert len(results) >= len(KINDS)


# ---------------------------------------------------------------- the group's decision
def test_first_block_decides_on_the_group_sums_where_ranks_alone_would_differ(straddle, jobs):
    """cp2, padded Ulysses, at a threshold between the two ranks' LOCAL metrics of step 1
    (fixture `straddle`): on the mesh each rank's recorded local metric is on its side of the
    threshold — each rank alone would decide differently — yet every rank takes the one-device
    decision at every step, the run completes on both ranks and the latents equal the
    one-device ones. (A rank deciding alone mismatches attention's collectives with its peer:
    a hang, which the harness's timeout ends, or — seen here with the sums left unreduced —
    ranks that finish with different skipped steps and a wrong video.)"""
    branch, threshold = straddle["branch"], straddle["threshold"]
    ref = jobs(1)[("one_device", "straddle")][0]
    got = jobs(MESHES[STRADDLE_ON][0])[(STRADDLE_ON, "straddle")]
    assert_margins(ref, threshold)
    assert 1 in ref["cache"]["skipped"][["cond", "uncond"][branch]]  # one device skips step 1 on this branch
    seen = [next(r for r in results["fb"] if r["step"] == 1)["local"][branch] for results in got]
    seen = np.asarray([a / b for a, b in seen])
    assert seen.min() < threshold < seen.max(), (seen, threshold)
    np.testing.assert_allclose(seen, straddle["local"], rtol=1e-4)  # what the fixture predicted
    decisions = [(r["step"], r.get("compute")) for r in ref["fb"]]
    for rank, results in enumerate(got):
        assert [(r["step"], r.get("compute")) for r in results["fb"]] == decisions, rank
        assert same_record(results["cache"], ref["cache"]), rank
    assert rel_err(got[0]["latents"], ref["latents"]) <= RTOL


# ---------------------------------------------------------------- memory=swap, compile=true
def run_here(overrides, backend=None, compile_backend=None):
    """One run in this process (eager resident unless the overrides say otherwise)."""
    from parallel_wan.backends import make_backend
    from parallel_wan.pipeline import generate

    spec = _spec(overrides, 1)
    backend = backend or make_backend(spec, compile_backend=compile_backend or "inductor")
    backend.video_decoder = lambda params, cfg: NoDecode()
    return generate(spec, backend)


@pytest.fixture(scope="module")
def resident():
    """The resident eager cached run of some overrides, in this process, run once."""
    memo = {}

    def get(overrides):
        if tuple(overrides) not in memo:
            memo[tuple(overrides)] = run_here(overrides)
        return memo[tuple(overrides)]

    return get


@pytest.fixture(scope="module")
def swap_caches(tmp_path_factory):
    """Each cache at settings that skip the swap's exchange step (the last high-noise one).
    MagCache from a crafted curve (official format, 8 steps, high-noise slice = steps 0-5):
    a ratio of 2 (error 1) everywhere but step 5's ratio of 1, so with threshold 0.1 and K 1
    step 5 is the one reuse step of the run."""
    cond = [2.0, 2.0, 2.0, 2.0, 1.0, 2.0, 2.0]  # γ of steps 1 … 7
    path = tmp_path_factory.mktemp("curve") / "mag_ratios.json"
    path.write_text(json.dumps({"mag_ratios": [v for c in cond for v in (c, 1.0)], "split": 6}))
    crafted = BASE + [
        "cache=magcache",
        f"cache.ratios={path}",
        "cache.threshold=0.1",
        "cache.max_skips=1",
        "cache.retention=0",
    ]
    return {"magcache": crafted, "taylorseer": cached("taylorseer"), "fbcache": cached("fbcache")}


@pytest.mark.parametrize("prefetch", [0, 1])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_swap_with_each_cache_skipping_the_exchange_step(swap_caches, resident, kind, prefetch):
    """memory=swap with the exchange step (5) skipped — MagCache reusing its residual,
    TaylorSeer predicting, First-Block Cache stopping after block 0 on both branches: the
    resident cached run's latents bit for bit and record, and from the switch on the
    low-noise expert is whole on the device (equal to its host copy) and no high-noise tensor
    is alive. swap_prefetch_steps=0 is the block-by-block exchange during step 5; 1 copies the
    low-noise expert in before step 5 and frees the high-noise one at the switch."""
    from parallel_wan.models.experts import HIGH, LOW

    overrides = swap_caches[kind]
    ref = resident(overrides)
    probe = swap_probe()
    got = run_here(overrides + ["memory=swap", f"swap_prefetch_steps={prefetch}"], probe)
    np.testing.assert_array_equal(got.latents, ref.latents)
    assert got.info["cache"] == ref.info["cache"]
    skipped = got.info["cache"]["skipped"]
    assert all(EXCHANGE_STEP in steps for steps in skipped.values()), skipped
    if kind == "magcache":
        assert skipped == {"cond": [EXCHANGE_STEP], "uncond": [EXCHANGE_STEP]}
    switch = EXCHANGE_STEP + 1
    assert [i for i, expert, _, _ in probe.seen if expert == LOW][0] == switch
    assert (EXCHANGE_STEP, "exchange" if prefetch == 0 else "prefetch", LOW) in probe.swap.events
    assert probe.swap.events[-2:] == [(switch, "release", HIGH), (switch, "ready", LOW)], probe.swap.events
    assert_swapped_at(probe, switch)
    print(f"swap prefetch {prefetch} {kind}: skipped {skipped}, events {probe.swap.events}")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_compiled_blocks_with_each_cache_equal_the_eager_cached_run(resident, kind):
    """compile=true (q/k/v fused, the block function compiled; "aot_eager" as in
    tests/parallel/test_hot_path.py) with each cache: the eager cached run's skipped steps and latents
    within the compile test's tolerance (the fused GEMM sums in another order)."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    ref = resident(cached(kind))
    torch._dynamo.reset()
    counters.clear()
    got = run_here(cached(kind, "compile=true"), compile_backend="aot_eager")
    assert counters["stats"]["unique_graphs"] >= 1, dict(counters["stats"])  # the blocks ran compiled
    err = rel_err(got.latents, ref.latents)
    print(
        f"compile=true {kind}: latents rel err {err:.2e}, skipped {got.info['cache']['skipped']}, "
        f"graphs {dict(counters['stats'])}"
    )
    assert err <= 1e-5
    assert same_record(got.info["cache"], ref.info["cache"])


# ---------------------------------------------------------------- resume
@pytest.fixture(scope="module")
def resumed(jobs):
    """Each cache's run resumed from the state the one-device job saved, in a new process."""
    jobs(1)
    runs = [(cached(kind), None, str(jobs.states / kind)) for kind in KINDS]
    return dict(zip(KINDS, run_on_ranks(cached_runs, 1, runs, timeout_s=600)[0]))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_resumed_inside_a_skip_run_equals_the_whole_cached_run(one_device, jobs, resumed, kind):
    """The one-device job stopped each cache after k steps, k − 1 and k both skipped, and saved
    the state; a new process resumes from the files: the uninterrupted run's latents bit for
    bit and its whole cache record (the skipped steps before the stop come from the state)."""
    k = RESUME_AFTER[kind]
    skipped = one_device[kind]["cache"]["skipped"]
    assert any(k - 1 in steps and k in steps for steps in skipped.values()), (kind, k, skipped)
    stopped = jobs(1)[("stopped", kind)][0]
    # the state carries the cache's arrays (residual, Taylor factors, first-block references) and its log
    arrays = {
        "magcache": ["residual"],
        "taylorseer": ["taylor_f0", "taylor_f1"],
        "fbcache": ["fb_reference", "fb_tail"],
    }
    assert stopped["state"] == sorted(arrays[kind] + ["log_skipped"]), stopped["state"]
    np.testing.assert_array_equal(resumed[kind]["latents"], one_device[kind]["latents"])
    assert resumed[kind]["cache"] == one_device[kind]["cache"]
    # the resumed process made First-Block decisions only from step k on, against the saved references
    assert all(r["step"] >= k for r in resumed[kind]["fb"])
