"""The PyTorch hot path. compile=true: q/k/v fused at placement and the model's block function
compiled by torch.compile (the compiled block runner) render the eager run's latents. No uploads in the loop: small model
constants reach an accelerator once. The CPU test compiles with the "aot_eager"
backend — the same graph capture and guards, without inductor's C++ build (≈50 s per graph on
2 cores); the inductor-generated kernels themselves are checked on GPUs by benchmarks/step.py."""

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from parallel_wan.config import ConfigError, resolve
from parallel_wan.run import CONF_DIR, make_backend

BASE = ["dtype=float32", "steps=3", "num_frames=5", "height=48", "width=48", "seed=5", "prompt='a red kite'"]


def spec_of(overrides):
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        cfg = OmegaConf.to_container(compose(config_name="config", overrides=list(overrides)), resolve=False)
    return resolve(cfg | {"output_dir": "/tmp/unused"})


def run(overrides, compiled=None):
    from parallel_wan.pipeline import generate

    spec = spec_of(BASE + overrides)
    backend = make_backend(spec)
    backend.compile_backend = "aot_eager"
    placed = []
    place = backend.place

    def recording(tree, *args, **kwargs):
        out = place(tree, *args, **kwargs)
        placed.append(out)
        return out

    backend.place = recording
    gen = generate(spec, backend)
    return gen, placed


def _block_code():
    """The code object of the block function `models.transformer.forward` hands its runner."""
    import types

    from parallel_wan.models import transformer as dit

    (code,) = [c for c in dit.forward.__code__.co_consts if isinstance(c, types.CodeType) and c.co_name == "block"]
    return code


def test_compiled_blocks_with_fused_qkv_render_the_eager_latents(monkeypatch):
    import torch
    import torch._dynamo

    from torch._dynamo.utils import counters

    from parallel_wan.backends.torch.runners import BlockPass, compiled as compiled_runner

    # What the eager runner runs, and what the compiled runner hands torch.compile: the same
    # block function of the model's forward (a new closure per forward, one code object).
    eager_blocks, compiled_fns = [], []
    real_run, real_compile = BlockPass.run, torch.compile

    def recording_run(self, block, h, stop=None):
        eager_blocks.append(block)
        return real_run(self, block, h, stop)

    def recording_compile(fn, **kwargs):
        compiled_fns.append(fn)
        return real_compile(fn, **kwargs)

    monkeypatch.setattr(BlockPass, "run", recording_run)
    monkeypatch.setattr(compiled_runner.torch, "compile", recording_compile)
    torch._dynamo.reset()
    counters.clear()
    eager, _ = run([])
    assert counters["stats"]["unique_graphs"] == 0 and not compiled_fns  # compile=false: nothing captured
    assert {b.__code__ for b in eager_blocks} == {_block_code()}
    eager_runs = len(eager_blocks)
    compiled, placed = run(["compile=true"])
    assert compiled_fns and {f.__code__ for f in compiled_fns} == {_block_code()}
    assert len(compiled_fns) == eager_runs  # one compile wrapper per forward, around that forward's block
    # the block is captured once per expert layout (the graph breaks at the eager attention),
    # not per layer or step
    assert 1 <= counters["stats"]["unique_graphs"] <= 4, dict(counters["stats"])
    assert not counters["recompiles"], dict(counters["recompiles"])
    experts = [tree for tree in placed if isinstance(tree, dict) and "blocks" in tree]
    assert len(experts) == 2
    for tree in experts:
        assert all("to_qkv" in b["attn1"] and "to_q" not in b["attn1"] for b in tree["blocks"])
    # float32; the fused GEMM (3·dim outputs at once) blocks its sums differently from three
    # GEMMs, and the captured graph runs the same ATen ops: measured ~1e-7 after 3 steps.
    a, b = compiled.latents.astype(np.float64), eager.latents.astype(np.float64)
    err = np.linalg.norm(a - b) / np.linalg.norm(b)
    print(f"compile=true vs eager latents rel err {err:.2e}; graphs {dict(counters['stats'])}")
    assert err <= 1e-5
    diff = np.abs(compiled.frames.astype(np.int16) - eager.frames.astype(np.int16))
    assert diff.max() <= 1


def test_compile_is_refused_on_jax():
    with pytest.raises(ConfigError, match=r"compile=true .* backend=jax compiles every step already"):
        spec_of(BASE + ["compile=true", "backend=jax"])


def test_small_constants_reach_an_accelerator_once():
    """A host → accelerator copy from pageable memory waits for the device's queue; the model
    makes its timestep frequencies and VAE statistics from numpy on every call, so the torch ops
    upload each such constant once per device (the meta device stands in for a GPU here)."""
    import torch

    from parallel_wan.backends.torch import ops

    like = torch.empty(1, device="meta")
    freqs = np.arange(8, dtype=np.float32) / 8
    first, again = ops.asarray(freqs, "float32", like=like), ops.asarray(freqs.copy(), "float32", like=like)
    assert first is again and first.device.type == "meta"
    assert ops.asarray(freqs + 1, "float32", like=like) is not first  # other values, other constant
    cpu = torch.empty(1)
    assert ops.asarray(freqs, "float32", like=cpu) is not ops.asarray(freqs, "float32", like=cpu)  # CPU: no cache
