"""memory=sharded and memory=swap give the resident run's latents, hold what the planner says,
and move weights when the step plan says; the text encoder's weights are freed after encoding.

Latents are compared for exact equality: sharding and swapping move bytes, not arithmetic — the
gathered (or copied) weights are bit-identical to the resident ones and every op runs on the
same shapes in the same order, so fp32 results are identical, not merely close."""

import gc
import re
import tempfile
import weakref

import numpy as np
import pytest
from harness.probes import assert_swapped_at, same_tree, swap_probe
from harness.ranks import run_on_ranks

BASE = ["dtype=float32", "steps=3", "num_frames=9", "seed=3", "prompt='a dog jumps'", "height=48", "width=48"]


def _spec(overrides, world=1):
    from parallel_wan.config.compose import compose_spec

    return compose_spec(list(overrides), world, output_dir="/tmp/unused")


def _tree_bytes(tree):
    from parallel_wan.weights.tree import iter_leaves

    return sum(t.numel() * t.element_size() for _, t in iter_leaves(tree))


def resident_and_sharded(rank, world, overrides):
    """Both modes on one set of ranks: (resident latents, sharded latents, resident weight
    bytes, sharded weight bytes before and after the first forward) on this rank."""
    from parallel_wan.backends.torch.backend import start_torch_backend
    from parallel_wan.launch import Launch
    from parallel_wan.pipeline import generate
    from parallel_wan.pipeline.checkpoint import builtin_checkpoint, load_components

    resident, sharded = _spec(overrides, world), _spec(overrides + ["memory=sharded"], world)
    backend = start_torch_backend(resident.execution.device, resident.mesh, Launch(rank, world, rank, "test"))
    ref = generate(resident, backend)
    got = generate(sharded, backend)
    with tempfile.TemporaryDirectory() as folder, backend.inference_mode():
        ckpt = builtin_checkpoint(sharded, folder)  # the stored tiny model generate() read
        experts = load_components(sharded, ckpt, backend).experts
        before = sum(e.local_bytes() for _, e in experts.values())
        for _, e in experts.values():
            e.params()  # gathers the non-block weights for good
        after = sum(e.local_bytes() for _, e in experts.values())
        whole = sum(_tree_bytes(p) for _, p in load_components(resident, ckpt, backend).experts.values())
    _block_schedule_on_rank(rank, world)
    return (ref.latents, ref.frames), (got.latents, got.frames), whole, before, after


@pytest.mark.parametrize("world, mesh", [(2, "cp2"), (4, "dp2_cp2")])
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_sharded_equals_resident(world, mesh):
    from parallel_wan import memory_plan as planner
    from parallel_wan.backends.torch.backend import start_torch_backend
    from parallel_wan.builtin.tiny import transformer_config
    from parallel_wan.pipeline import generate

    results = run_on_ranks(resident_and_sharded, world, BASE + [f"mesh={mesh}"], timeout_s=300)
    one_rank = generate(_spec(BASE), start_torch_backend("cpu")).frames  # the resident, one-rank path
    eb = planner.expert_bytes(planner.transformer_shapes(transformer_config("t2v")), "float32", world)
    for rank, ((ref, ref_frames), (got, got_frames), whole, before, after) in enumerate(results):
        if rank == 0:
            np.testing.assert_array_equal(got, ref)
            np.testing.assert_array_equal(got_frames, ref_frames)
            # vs one rank: the mesh changes summation orders (~1e-7 on the latents,
            # tests/parallel/test_parallel_pipeline.py), which can flip a rounding step on a few values
            diff = np.abs(got_frames.astype(np.int16) - one_rank.astype(np.int16))
            print(f"{mesh} sharded vs one rank: frames max abs {diff.max()}, {(diff > 0).sum()} of {diff.size} values")
            assert diff.max() <= 1 and (diff > 0).mean() < 1e-3
        # per rank: 1/world of every block (FSDP pads dim 0 to a multiple of the world) ...
        assert before == 2 * (eb.sharded_blocks + eb.rest_chunk), (rank, before)
        # ... plus the non-block weights whole after the first forward, as the planner counts
        assert after == before + 2 * eb.rest
        assert whole == 2 * eb.whole
        print(
            f"{mesh} rank {rank}: resident {whole:,} B, sharded {before:,} B ({before / whole:.3f} of resident), "
            f"after first forward {after:,} B"
        )
        assert before < whole / world * 1.1  # the tiny blocks' norms/tables pad a little


def _small_sharded_expert(rank, world):
    """A 3-block expert sharded over the ranks, and its whole tree (every rank draws the same)."""
    import torch
    from harness.chunked import chunk_tree

    from parallel_wan.backends.torch.fsdp import shard_expert

    g = torch.Generator().manual_seed(0)
    full = {
        "proj_out": {"weight": torch.randn(3, 4, generator=g)},
        "blocks": [
            {
                "attn1": {"to_q": {"weight": torch.randn(5, 4, generator=g)}},
                "norm2": {"bias": torch.randn(4, generator=g)},
            }
            for _ in range(3)
        ],
    }
    rows = {
        "proj_out.weight": 3,
        **{f"blocks.{i}.{n}": r for i in range(3) for n, r in (("attn1.to_q.weight", 5), ("norm2.bias", 4))},
    }
    return shard_expert(chunk_tree(full, rank, world), rows, torch.device("cpu")), full


def _whole_blocks(holders):
    """Indices of the blocks whose parameters are whole (not FSDP's sharded DTensors)."""
    return [j for j, h in enumerate(holders) if type(getattr(h, h.names["attn1.to_q.weight"])).__name__ != "DTensor"]


def _gather_pending(holder) -> bool:
    """FSDP2's own record of an all-gather issued (unshard) and not yet waited for."""
    return holder._get_fsdp_state()._fsdp_param_group._all_gather_result is not None


def _block_schedule_on_rank(rank, world):
    """The block schedule itself (run inside test_sharded_equals_resident's ranks): one block
    whole at a time, in order, each back to its shard after use; weights equal the originals."""
    import torch

    from parallel_wan.backends.torch.runners import ShardedRunner

    expert, full = _small_sharded_expert(rank, world)
    with torch.inference_mode():
        params = expert.params()
        assert torch.equal(params["proj_out"]["weight"], full["proj_out"]["weight"])
        holders = params["blocks"]
        ran = []

        def block(h, p):
            i = len(ran)
            assert torch.equal(p["attn1"]["to_q"]["weight"], full["blocks"][i]["attn1"]["to_q"]["weight"])
            assert torch.equal(p["norm2"]["bias"], full["blocks"][i]["norm2"]["bias"])
            # only block i is whole (block i+1's gather is in flight, installed at its wait);
            # every earlier block is back to its shard
            assert _whole_blocks(holders) == [i]
            ran.append(i)
            return h + p["norm2"]["bias"]

        out = ShardedRunner()(block, torch.zeros(4), holders)
        assert ran == [0, 1, 2] and _whole_blocks(holders) == []
        assert torch.equal(out, sum(b["norm2"]["bias"] for b in full["blocks"]))


def stop_sharded_pass_early(rank, world):
    """A step cache's use of the sharded runner: run blocks [0, stop), then either stop (close
    the pass) or go on. Returns what each case left behind, per stop."""
    import torch

    from parallel_wan.backends.torch.runners import ShardedRunner
    from parallel_wan.backends.torch.world import Launch, init_distributed

    init_distributed(Launch(rank, world, rank, "test"), torch.device("cpu"), 60.0)
    expert, full = _small_sharded_expert(rank, world)
    biases = [b["norm2"]["bias"] for b in full["blocks"]]
    report = []
    with torch.inference_mode():
        holders = expert.params()["blocks"]
        for stop in range(4):
            with ShardedRunner().open(holders) as blocks:
                h = blocks.run(lambda h, p: h + p["norm2"]["bias"], torch.zeros(4), stop=stop)
                # the next block's gather was started while block stop-1 ran (none before a first block)
                pending_before = [_gather_pending(x) for x in holders]
            after = ([_gather_pending(x) for x in holders], _whole_blocks(holders))
            # a pass that stops and then goes on gives the whole stack's result
            with ShardedRunner().open(holders) as blocks:
                h2 = blocks.run(lambda h, p: h + p["norm2"]["bias"], torch.zeros(4), stop=stop)
                h2 = blocks.run(lambda h, p: h + p["norm2"]["bias"], h2)
            report.append(
                (
                    stop,
                    pending_before,
                    after,
                    torch.equal(h, sum(biases[:stop], torch.zeros(4))),
                    torch.equal(h2, sum(biases, torch.zeros(4))),
                )
            )
    return report


def test_sharded_runner_stopped_early_leaves_no_gather_pending():
    """Stopping after block i (First-Block Cache) or before any (MagCache) must not leave block
    i's prefetched all-gather in flight or its weights whole: closing the pass waits for it and
    reshards. Continuing instead runs the rest of the stack."""
    for rank, report in enumerate(run_on_ranks(stop_sharded_pass_early, 2, timeout_s=120)):
        for stop, pending_before, (pending_after, whole_after), prefix_ok, continued_ok in report:
            # while open, exactly the prefetched block i = stop has its gather pending
            assert pending_before == [j == stop and stop > 0 for j in range(3)], (rank, stop, pending_before)
            assert pending_after == [False] * 3 and whole_after == [], (rank, stop, pending_after, whole_after)
            assert prefix_ok and continued_ok, (rank, stop)


# ---------------------------------------------------------------- swap
def test_swap_plan_marks():
    from parallel_wan.models.experts import HIGH, LOW
    from parallel_wan.pipeline.steps import step_plan
    from parallel_wan.sampling import make_schedule

    spec = _spec(BASE + ["steps=8", "memory=swap", "swap_prefetch_steps=2"])
    schedule = make_schedule("official", spec.sampling.steps, spec.sampling.shift)
    plan = step_plan(spec, schedule)
    switch = next(s.index for s in plan if s.expert == LOW)
    assert switch >= 3, [s.expert for s in plan]
    assert [s.index for s in plan if s.prefetch] == [switch - 2] and plan[switch - 2].prefetch == LOW
    assert [s.index for s in plan if s.release] == [switch] and plan[switch].release == HIGH
    assert not any(s.prefetch or s.release for s in step_plan(_spec(BASE + ["steps=8"]), schedule))
    # the default, swap_prefetch_steps=0: the last high-noise step exchanges the experts
    plan = step_plan(_spec(BASE + ["steps=8", "memory=swap"]), schedule)
    assert [s.index for s in plan if s.exchange] == [switch - 1] and plan[switch - 1].exchange == LOW
    assert not any(s.prefetch for s in plan) and plan[switch].release == HIGH


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_swap_equals_resident_and_frees_the_high_expert():

    from parallel_wan.backends.torch.backend import TorchBackend, start_torch_backend
    from parallel_wan.models.experts import HIGH
    from parallel_wan.pipeline import generate
    from parallel_wan.weights.tree import iter_leaves

    class Probe(TorchBackend):
        """Keeps weak references to the high-noise expert's device tensors and, before every
        step, records the swap's events and how many of those tensors are alive."""

        high_refs, seen = [], []

        def place(self, tree, dtype, keep_fp32=None, where="device", full_rows=None):
            out = super().place(tree, dtype, keep_fp32, where, full_rows)
            if where == "device" and isinstance(tree, dict) and "blocks" in tree and not self.high_refs:
                self.high_refs[:] = [weakref.ref(t) for _, t in iter_leaves(out)]
            return out

        def noise_predictor(self, task):
            predict = super().noise_predictor(task)
            inner = predict.before_step

            def before_step(step):
                inner(step)  # no gc.collect(): the release must free them by reference count (harness/probes.py)
                alive = sum(r() is not None for r in self.high_refs)
                self.seen.append((step.index, step.expert, alive, list(predict.swap.events)))

            predict.before_step = before_step
            return predict

    overrides = BASE + ["steps=8"]
    spec = _spec(overrides + ["memory=swap", "swap_prefetch_steps=2"])
    ref = generate(_spec(overrides), start_torch_backend("cpu"))
    probe = start_torch_backend("cpu", cls=Probe)
    got = generate(spec, probe)
    np.testing.assert_array_equal(got.latents, ref.latents)
    np.testing.assert_array_equal(got.frames, ref.frames)

    switch = next(i for i, expert, _, _ in probe.seen if expert != HIGH)
    events = probe.seen[-1][3]
    assert events == [
        (switch - 2, "prefetch", "low_noise"),
        (switch, "release", "high_noise"),
        (switch, "ready", "low_noise"),
    ]
    assert probe.high_refs and all(alive == len(probe.high_refs) for i, _, alive, _ in probe.seen if i < switch)
    assert all(alive == 0 for i, _, alive, _ in probe.seen if i >= switch)  # dead from the switch on
    print(f"swap: switch at step {switch}, events {events}, {len(probe.high_refs)} high-noise tensors freed")


def test_swap_exchanges_block_by_block_in_the_last_high_noise_step(monkeypatch):
    """swap_prefetch_steps=0: while the last high-noise step runs block i, every earlier
    high-noise block is already freed and only the low-noise blocks before i have been copied
    in — never two experts; the result equals the resident run bit for bit."""
    from parallel_wan.backends.torch.backend import TorchBackend, start_torch_backend
    from parallel_wan.backends.torch.runners import ExchangeRunner
    from parallel_wan.models import transformer as dit
    from parallel_wan.pipeline import generate
    from parallel_wan.weights.tree import iter_leaves

    high_blocks, seen = [], []

    class Probe(TorchBackend):
        def place(self, tree, dtype, keep_fp32=None, where="device", full_rows=None):
            out = super().place(tree, dtype, keep_fp32, where, full_rows)
            if where == "device" and isinstance(tree, dict) and "blocks" in tree and not high_blocks:
                high_blocks.extend([weakref.ref(t) for _, t in iter_leaves(b)] for b in out["blocks"])
            return out

    exchanges = []
    real_open = ExchangeRunner.open

    def tracking_open(self, exchange):
        exchanges.append(exchange)
        return real_open(self, exchange)

    monkeypatch.setattr(ExchangeRunner, "open", tracking_open)
    real_block = dit.transformer_block

    def block(p, *args, **kwargs):
        if exchanges and len(seen) < len(high_blocks):  # inside the exchange step's forward (no gc: by refcount)
            alive = [any(r() is not None for r in refs) for refs in high_blocks]
            seen.append((alive, len(exchanges[0].copied)))
        return real_block(p, *args, **kwargs)

    monkeypatch.setattr(dit, "transformer_block", block)
    overrides = BASE + ["steps=8"]
    ref = generate(_spec(overrides), start_torch_backend("cpu"))
    got = generate(_spec(overrides + ["memory=swap"]), start_torch_backend("cpu", cls=Probe))
    np.testing.assert_array_equal(got.latents, ref.latents)
    np.testing.assert_array_equal(got.frames, ref.frames)
    layers = len(high_blocks)
    assert len(exchanges) == 1 and len(seen) == layers
    for i, (alive, copied) in enumerate(seen):
        assert alive == [j >= i for j in range(layers)], (i, alive)  # blocks before i are gone
        assert copied == i  # the low-noise blocks before i are in
    print(f"exchange: {layers} blocks, per block (high alive, low copied): {seen}")


class PrefixRunner:
    """A step cache's use of a runner, at its most drastic: every forward runs blocks [0, stop)
    and stops there (First-Block Cache skipping after block 0; stop=0: MagCache skipping all)."""

    def __init__(self, inner, stop):
        self.inner, self.stop = inner, stop

    def __call__(self, block, x, blocks):
        with self.inner.open(blocks) as blocks_pass:
            return blocks_pass.run(block, x, stop=self.stop)


@pytest.mark.parametrize("stop", [0, 1])
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_swap_exchange_completes_when_the_step_stops_early(monkeypatch, stop):
    """memory=swap, exchange step stopped after `stop` blocks: the pass's close still drops
    every high-noise block and copies every low-noise one, so from the next step on the
    low-noise expert is whole on the device and no high-noise tensor is alive; the latents
    equal the resident run's under the same stopping, bit for bit."""
    from parallel_wan.backends.torch import predictor as predictor_module
    from parallel_wan.backends.torch.backend import start_torch_backend
    from parallel_wan.models.experts import HIGH
    from parallel_wan.pipeline import generate

    real_choice = predictor_module.expert_runner

    def stopping_choice(name, placed, compiler=None):
        params, runner = real_choice(name, placed, compiler)
        return params, PrefixRunner(runner, stop)

    monkeypatch.setattr(predictor_module, "expert_runner", stopping_choice)
    overrides = BASE + ["steps=8"]
    ref = generate(_spec(overrides), start_torch_backend("cpu"))
    probe = swap_probe()
    got = generate(_spec(overrides + ["memory=swap"]), probe)
    np.testing.assert_array_equal(got.latents, ref.latents)
    switch = next(i for i, expert, _, _ in probe.seen if expert != HIGH)
    assert_swapped_at(probe, switch)
    freed = len(probe.high_refs)
    print(f"swap stopped after {stop} block(s): switch at step {switch}, {freed} high-noise tensors freed")


def test_swap_exchange_completes_when_the_step_skips_its_forward():
    """A step cache may skip the exchange step's forward altogether: the next step's
    before_step completes the exchange the forward never ran."""
    import torch

    from parallel_wan.backends.torch.swap import ExpertSwap, HostExpert
    from parallel_wan.models.experts import HIGH, LOW
    from parallel_wan.pipeline.steps import Step
    from parallel_wan.weights.tree import iter_leaves

    g = torch.Generator().manual_seed(1)

    def tree():
        return {
            "proj_out": {"weight": torch.randn(3, 4, generator=g)},
            "blocks": [{"w": torch.randn(4, 4, generator=g)} for _ in range(3)],
        }

    high, low = tree(), tree()
    high_refs = [weakref.ref(t) for _, t in iter_leaves(high)]
    experts = {HIGH: ("cfg", high), LOW: ("cfg", HostExpert(low))}
    del high
    swap = ExpertSwap(experts, torch.device("cpu"))
    swap.before_step(Step(index=4, t=900.0, expert=HIGH, guidance=4.0, exchange=LOW))
    assert all(r() is not None for r in high_refs)  # the exchange step has not run yet
    swap.before_step(Step(index=5, t=800.0, expert=LOW, guidance=3.0, release=HIGH))
    gc.collect()
    assert [r() is not None for r in high_refs] == [False] * len(high_refs)
    placed = experts[LOW][1]
    assert isinstance(placed, dict) and len(placed["blocks"]) == 3 and same_tree(placed, low)
    assert swap.events == [(4, "exchange", LOW), (5, "release", HIGH), (5, "ready", LOW)]


def test_text_encoder_is_freed_after_encoding():

    from parallel_wan.backends.torch.backend import start_torch_backend
    from parallel_wan.pipeline.checkpoint import builtin_checkpoint
    from parallel_wan.pipeline.generate import encode_text
    from parallel_wan.text.umt5 import TextEncoder

    spec = _spec(BASE)
    backend = start_torch_backend("cpu")
    with tempfile.TemporaryDirectory() as folder:
        encoder = TextEncoder.load(builtin_checkpoint(spec, folder), "float32")

    class Loaded:
        text_encoder = encoder
        texts = None  # no texts encoded up front (pipeline/text_sources.py): generate encodes them

    refs = [weakref.ref(p) for p in encoder.model.parameters()] + [weakref.ref(encoder.model)]
    context = encode_text(spec, Loaded, backend)
    assert context.shape[0] == 2
    assert all(r() is None for r in refs), f"{sum(r() is not None for r in refs)} text encoder tensors still alive"


# ---------------------------------------------------------------- settings
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_memory_settings():
    from parallel_wan.config import ConfigError

    assert _spec(BASE).memory.mode == "resident"
    jax = _spec(BASE + ["backend=jax", "memory=sharded"], world=8)
    assert jax.memory.mode == "sharded" and jax.shards_weights_over_mesh  # on JAX, memory=sharded is jax_fsdp
    assert (
        _spec(BASE + ["backend=jax", "jax_fsdp=true"], world=8).memory.mode == "sharded"
    )  # the older switch still works
    for overrides, needle in [
        (["memory=paged"], "memory='paged' is not known; choose one of: resident, sharded, swap"),
        (["model=tiny_ti2v", "height=64", "width=64", "memory=swap"], "has one expert"),
        (["backend=jax", "memory=swap"], "memory=swap is implemented for backend=torch only"),
        (["memory=swap", "swap_prefetch_steps=-1"], "swap_prefetch_steps=-1 must be ≥ 0"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(needle)) as info:
            _spec(BASE + overrides, world=8 if "backend=jax" in overrides else 1)
        assert "\n" not in str(info.value)
