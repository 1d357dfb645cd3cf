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

from distributed import run_on_ranks
from parallel_wan.run import CONF_DIR

BASE = ["dtype=float32", "steps=3", "num_frames=9", "seed=3", "prompt='a dog jumps'", "height=48", "width=48"]


def _spec(overrides, world=1):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from parallel_wan.config import resolve

    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        cfg = compose(config_name="config", overrides=list(overrides))
    return resolve(OmegaConf.to_container(cfg, resolve=False) | {"output_dir": "/tmp/unused"}, world)


def _tree_bytes(tree):
    from parallel_wan.weights.tree import iter_leaves

    return sum(t.numel() * t.element_size() for _, t in iter_leaves(tree))


def resident_and_sharded(rank, world, overrides):
    """Both modes on one set of ranks: (resident latents, sharded latents, resident weight
    bytes, sharded weight bytes before and after the first forward) on this rank."""
    from parallel_wan.backends.torch.backend import TorchBackend
    from parallel_wan.backends.torch.distributed import Launch
    from parallel_wan.pipeline import generate
    from parallel_wan.pipeline.checkpoint import load_components, materialize_tiny

    resident, sharded = _spec(overrides, world), _spec(overrides + ["memory=sharded"], world)
    backend = TorchBackend(resident.device, resident.mesh, Launch(rank, world, rank, "test"))
    ref = generate(resident, backend)
    got = generate(sharded, backend)
    with tempfile.TemporaryDirectory() as folder, backend.inference_mode():
        ckpt = materialize_tiny(sharded, folder)
        experts = load_components(sharded, ckpt, backend).experts
        before = sum(e.local_bytes() for _, e in experts.values())
        for _, e in experts.values():
            list(e.params()["blocks"])  # one pass: gathers the non-block weights for good
        after = sum(e.local_bytes() for _, e in experts.values())
        whole = sum(_tree_bytes(p) for _, p in load_components(resident, ckpt, backend).experts.values())
    _block_schedule_on_rank(rank, world)
    return (ref.latents, ref.frames), (got.latents, got.frames), whole, before, after


@pytest.mark.parametrize("world, mesh", [(2, "cp2"), (4, "dp2_cp2")])
def test_sharded_equals_resident(world, mesh):
    from parallel_wan import plan as planner
    from parallel_wan.builtin.tiny import transformer_config

    from parallel_wan.backends.torch.backend import TorchBackend
    from parallel_wan.pipeline import generate

    results = run_on_ranks(resident_and_sharded, world, BASE + [f"mesh={mesh}"], timeout_s=300)
    one_rank = generate(_spec(BASE), TorchBackend("cpu")).frames  # the resident, one-rank path
    eb = planner.expert_bytes(planner.transformer_shapes(transformer_config("t2v")), "float32", world)
    for rank, ((ref, ref_frames), (got, got_frames), whole, before, after) in enumerate(results):
        if rank == 0:
            np.testing.assert_array_equal(got, ref)
            np.testing.assert_array_equal(got_frames, ref_frames)
            # vs one rank: the mesh changes summation orders (~1e-7 on the latents,
            # tests/test_parallel_pipeline.py), which can flip a rounding step on a few values
            diff = np.abs(got_frames.astype(np.int16) - one_rank.astype(np.int16))
            print(f"{mesh} sharded vs one rank: frames max abs {diff.max()}, {(diff > 0).sum()} of {diff.size} values")
            assert diff.max() <= 1 and (diff > 0).mean() < 1e-3
        # per rank: 1/world of every block (FSDP pads dim 0 to a multiple of the world) ...
        assert before == 2 * (eb.sharded_blocks + eb.rest_chunk), (rank, before)
        # ... plus the non-block weights whole after the first forward, as the planner counts
        assert after == before + 2 * eb.rest
        assert whole == 2 * eb.whole
        print(f"{mesh} rank {rank}: resident {whole:,} B, sharded {before:,} B ({before / whole:.3f} of resident), "
              f"after first forward {after:,} B")
        assert before < whole / world * 1.1  # the tiny blocks' norms/tables pad a little


def _block_schedule_on_rank(rank, world):
    """The block schedule itself (run inside test_sharded_equals_resident's ranks): one block
    whole at a time, in order, each back to its shard after use; weights equal the originals."""
    import torch

    from parallel_wan.backends.torch.fsdp import chunk_tree, shard_expert

    g = torch.Generator().manual_seed(0)
    full = {"proj_out": {"weight": torch.randn(3, 4, generator=g)},
            "blocks": [{"attn1": {"to_q": {"weight": torch.randn(5, 4, generator=g)}}, "norm2": {"bias": torch.randn(4, generator=g)}}
                       for _ in range(3)]}
    rows = {"proj_out.weight": 3, **{f"blocks.{i}.{n}": r for i in range(3) for n, r in
                                     (("attn1.to_q.weight", 5), ("norm2.bias", 4))}}
    expert = shard_expert(chunk_tree(full, rank, world), rows, torch.device("cpu"))
    with torch.inference_mode():
        params = expert.params()
        assert torch.equal(params["proj_out"]["weight"], full["proj_out"]["weight"])
        holders = expert.blocks.holders

        def whole():
            return [j for j, h in enumerate(holders)
                    if type(getattr(h, h.names["attn1.to_q.weight"])).__name__ != "DTensor"]

        for i, block in enumerate(params["blocks"]):
            assert torch.equal(block["attn1"]["to_q"]["weight"], full["blocks"][i]["attn1"]["to_q"]["weight"])
            assert torch.equal(block["norm2"]["bias"], full["blocks"][i]["norm2"]["bias"])
            # only block i is whole (block i+1's gather is in flight, installed at its wait);
            # every earlier block is back to its shard
            assert whole() == [i]
        assert whole() == []


# ---------------------------------------------------------------- swap
def test_swap_plan_marks():
    from parallel_wan.pipeline.checkpoint import HIGH, LOW
    from parallel_wan.pipeline.denoise import step_plan
    from parallel_wan.sampling import make_schedule

    spec = _spec(BASE + ["steps=8", "memory=swap", "swap_prefetch_steps=2"])
    schedule = make_schedule("official", spec.steps, spec.shift)
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


def test_swap_equals_resident_and_frees_the_high_expert():

    from parallel_wan.backends.torch.backend import TorchBackend
    from parallel_wan.pipeline import generate
    from parallel_wan.pipeline.checkpoint import HIGH
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
                inner(step)
                gc.collect()
                alive = sum(r() is not None for r in self.high_refs)
                self.seen.append((step.index, step.expert, alive, list(predict.swap.events)))

            predict.before_step = before_step
            return predict

    overrides = BASE + ["steps=8"]
    spec = _spec(overrides + ["memory=swap", "swap_prefetch_steps=2"])
    ref = generate(_spec(overrides), TorchBackend("cpu"))
    probe = Probe("cpu")
    got = generate(spec, probe)
    np.testing.assert_array_equal(got.latents, ref.latents)
    np.testing.assert_array_equal(got.frames, ref.frames)

    switch = next(i for i, expert, _, _ in probe.seen if expert != HIGH)
    events = probe.seen[-1][3]
    assert events == [(switch - 2, "prefetch", "low_noise"), (switch, "release", "high_noise"),
                      (switch, "ready", "low_noise")]
    assert probe.high_refs and all(alive == len(probe.high_refs) for i, _, alive, _ in probe.seen if i < switch)
    assert all(alive == 0 for i, _, alive, _ in probe.seen if i >= switch)  # dead from the switch on
    print(f"swap: switch at step {switch}, events {events}, {len(probe.high_refs)} high-noise tensors freed")


def test_swap_exchanges_block_by_block_in_the_last_high_noise_step(monkeypatch):
    """swap_prefetch_steps=0: while the last high-noise step runs block i, every earlier
    high-noise block is already freed and only the low-noise blocks before i have been copied
    in — never two experts; the result equals the resident run bit for bit."""
    from parallel_wan.backends.torch.backend import TorchBackend
    from parallel_wan.backends.torch.swap import ExchangeBlocks
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
    real_iter = ExchangeBlocks.__iter__

    def tracking_iter(self):
        exchanges.append(self)
        return real_iter(self)

    monkeypatch.setattr(ExchangeBlocks, "__iter__", tracking_iter)
    real_block = dit.transformer_block

    def block(p, *args, **kwargs):
        if exchanges and len(seen) < len(high_blocks):  # inside the exchange step's forward
            gc.collect()
            alive = [any(r() is not None for r in refs) for refs in high_blocks]
            seen.append((alive, len(exchanges[0].copied)))
        return real_block(p, *args, **kwargs)

    monkeypatch.setattr(dit, "transformer_block", block)
    overrides = BASE + ["steps=8"]
    ref = generate(_spec(overrides), TorchBackend("cpu"))
    got = generate(_spec(overrides + ["memory=swap"]), Probe("cpu"))
    np.testing.assert_array_equal(got.latents, ref.latents)
    np.testing.assert_array_equal(got.frames, ref.frames)
    layers = len(high_blocks)
    assert len(exchanges) == 1 and len(seen) == layers
    for i, (alive, copied) in enumerate(seen):
        assert alive == [j >= i for j in range(layers)], (i, alive)  # blocks before i are gone
        assert copied == i  # the low-noise blocks before i are in
    print(f"exchange: {layers} blocks, per block (high alive, low copied): {seen}")


def test_text_encoder_is_freed_after_encoding():

    from parallel_wan.backends.torch.backend import TorchBackend
    from parallel_wan.pipeline.checkpoint import materialize_tiny
    from parallel_wan.pipeline.generate import encode_text
    from parallel_wan.text.umt5 import TextEncoder

    spec = _spec(BASE)
    backend = TorchBackend("cpu")
    with tempfile.TemporaryDirectory() as folder:
        encoder = TextEncoder.load(materialize_tiny(spec, folder), "float32")

    class Loaded:
        text_encoder = encoder

    refs = [weakref.ref(p) for p in encoder.model.parameters()] + [weakref.ref(encoder.model)]
    context = encode_text(spec, Loaded, backend)
    assert context.shape[0] == 2
    assert all(r() is None for r in refs), f"{sum(r() is not None for r in refs)} text encoder tensors still alive"


# ---------------------------------------------------------------- settings
def test_memory_settings():
    from parallel_wan.config import ConfigError

    assert _spec(BASE).memory == "resident"
    jax = _spec(BASE + ["backend=jax", "memory=sharded"], world=8)
    assert jax.memory == "sharded" and jax.jax_fsdp  # on JAX, memory=sharded is jax_fsdp
    assert _spec(BASE + ["backend=jax", "jax_fsdp=true"], world=8).memory == "sharded"  # the older switch still works
    for overrides, needle in [
        (["memory=paged"], "memory='paged' is not known; choose one of: resident, sharded, swap"),
        (["model=tiny_ti2v", "height=64", "width=64", "memory=swap"], "has one expert"),
        (["backend=jax", "memory=swap"], "memory=swap is implemented for backend=torch only"),
        (["memory=swap", "swap_prefetch_steps=-1"], "swap_prefetch_steps=-1 must be ≥ 0"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(needle)) as info:
            _spec(BASE + overrides, world=8 if "backend=jax" in overrides else 1)
        assert "\n" not in str(info.value)
