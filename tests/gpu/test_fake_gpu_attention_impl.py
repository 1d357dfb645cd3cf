"""attention_impl on a fake H100 (tests/harness/fakegpu): each choice's self-attention launches
the kernel it names, in the layout that kernel takes, with a quiet loop (no host read or copy)
— a whole tiny bf16 generation each. No numbers (fake tensors carry none): sage's are
tests/parallel/test_sage_attention.py's, the others' tests/unit/test_attention.py's and the GPU
acceptance run's."""

import sys
import types

import pytest
import torch
from harness.fakegpu.checks import all_problems, attention_kernels
from harness.fakegpu.simulate import simulate

SDPA = "sdpa (torch chooses on the GPU)"  # cross-attention: torch's own SDPA, whatever the setting


@pytest.fixture(scope="module")
def files(fake_gpu_checkpoints):
    return fake_gpu_checkpoints  # the session's tiny checkpoints (conftest.py), read-only


_RUNS: dict = {}  # impl → its simulation: two tests read the sdpa run (each run is a whole video)


def _run(files, impl):
    if impl not in _RUNS:
        sim = simulate([f"attention_impl={impl}", "steps=2"], 1, files, decode=False)
        problems = all_problems(sim)  # device/dtype mismatches, host reads and copies in the loop
        assert not problems, "\n".join(problems[:8])
        _RUNS[impl] = sim
    return _RUNS[impl]


@pytest.mark.parametrize("impl, kernel", [("auto", "cuda_cudnn"), ("sdpa", "cuda_flash"), ("cudnn", "cuda_cudnn")])
def test_torch_kernels(files, impl, kernel):
    sim = _run(files, impl)
    assert attention_kernels(sim) == {SDPA, kernel}
    assert sim.ranks[0].info["attention"] == {"attention_impl": impl, "kernel": kernel}


def _layout(seen, q, k, v):
    """Record what a kernel was handed: (B, L, H, D) tensors on the GPU, last dim contiguous."""
    assert all(t.device.type == "cuda" and t.dim() == 4 and t.stride(-1) == 1 for t in (q, k, v))
    seen.append((q.dtype, k.dtype, v.dtype, tuple(q.shape), tuple(k.shape)))


def test_flash_calls_flash_attn_3_on_hopper(files, monkeypatch):
    seen = []

    def flash_attn_func(q, k, v, softmax_scale=None, return_attn_probs=False):
        _layout(seen, q, k, v)  # flash-attn takes (B, L, H, D) as they come: no transpose
        return torch.empty_like(q), torch.empty(q.shape[0], q.shape[2], q.shape[1], device=q.device)

    monkeypatch.setitem(sys.modules, "flash_attn_interface", types.SimpleNamespace(flash_attn_func=flash_attn_func))
    sim = _run(files, "flash")
    assert attention_kernels(sim) == {SDPA}  # no torch attention kernel besides cross-attention's
    assert seen and {s[:3] for s in seen} == {(torch.bfloat16,) * 3}
    assert sim.ranks[0].info["attention"]["kernel"] == "flash_attn3"


def test_sage_quantizes_then_runs_its_int8_kernel(files, monkeypatch):
    from sageattention import quant_per_block

    from parallel_wan.backends.torch import sage_kernel

    quantized, launched = [], []

    def per_block_int8(q, k, BLKQ, BLKK, sm_scale, tensor_layout):
        _layout(quantized, q, k, k)
        assert tensor_layout == "NHD" and (BLKQ, BLKK) == (sage_kernel.BLOCK_M, sage_kernel.BLOCK_N)
        b, s, h, _ = q.shape
        scales = [torch.empty(b, h, -(-n // blk), 1, device=q.device) for n, blk in ((s, BLKQ), (k.shape[1], BLKK))]
        return (
            torch.empty(q.shape, dtype=torch.int8, device=q.device),
            scales[0],
            torch.empty(k.shape, dtype=torch.int8, device=k.device),
            scales[1],
        )

    def launch_attention(q_int8, k_int8, v, q_scale, k_scale, out_dtype):
        _layout(launched, q_int8, k_int8, v)
        assert q_scale.dtype == k_scale.dtype == torch.float32
        b, s, h, d = q_int8.shape
        return torch.empty(b, s, h, d, dtype=out_dtype, device=q_int8.device), torch.empty(
            b, s, h, device=q_int8.device
        )

    monkeypatch.setattr(quant_per_block, "per_block_int8", per_block_int8)
    monkeypatch.setattr(sage_kernel, "launch_attention", launch_attention)
    sim = _run(files, "sage")
    assert attention_kernels(sim) == {SDPA}
    # bf16 q/k quantized, then int8 QKᵀ with fp16 values (Sage's PV), once per block per step
    assert quantized and {s[:2] for s in quantized} == {(torch.bfloat16, torch.bfloat16)}
    assert len(launched) == len(quantized) and {s[:3] for s in launched} == {(torch.int8, torch.int8, torch.float16)}
    assert sim.ranks[0].info["attention"]["kernel"] == "sage"


def test_fp8_quantizes_on_the_gpu_then_runs_its_e4m3_kernel(files, monkeypatch):
    """The quantizer is torch code, so it runs on the fake GPU for real (its dtypes, devices and
    any host copy are checked); the Triton launch is recorded instead."""
    from parallel_wan.backends.torch import fp8_kernel

    launched = []

    def launch_attention(q8, k8, vt8, q_scale, k_scale, v_scale, out_dtype):
        _layout(launched, q8, k8, k8)
        b, s, h, d = q8.shape
        assert vt8.shape == (b, h, d, k8.shape[1]) and vt8.stride(-1) == 1  # keys contiguous: K-major for wgmma
        assert q_scale.shape == (b, h, -(-s // fp8_kernel.BLOCK_M)) and k_scale.shape == (
            b,
            h,
            -(-k8.shape[1] // fp8_kernel.BLOCK_N),
        )
        assert v_scale.shape == (b, h, d)
        assert {t.dtype for t in (q_scale, k_scale, v_scale)} == {torch.float32} and vt8.dtype == torch.float8_e4m3fn
        return torch.empty(b, s, h, d, dtype=out_dtype, device=q8.device), torch.empty(b, s, h, device=q8.device)

    monkeypatch.setattr(fp8_kernel, "launch_attention", launch_attention)
    sim = _run(files, "fp8")
    assert attention_kernels(sim) == {SDPA}
    assert launched and {s[:2] for s in launched} == {(torch.float8_e4m3fn, torch.float8_e4m3fn)}
    assert sim.ranks[0].info["attention"] == {"attention_impl": "fp8", "kernel": "fp8"}


def test_the_blocks_elementwise_work_runs_as_fused_kernels_on_the_gpu(files):
    """Eager CUDA runs the fused Triton ops (backends/torch/fused_kernels.py) around every block:
    per block and forward, 2 LayerNorm-modulations, 2 gated residuals and the q and k
    norm-and-RoPE, each one op on the GPU in bf16."""
    import collections

    sim = _run(files, "sdpa")
    fused = collections.Counter()
    for op, device, dtype, phase in sim.ranks[0].recorder.ops:
        if op.startswith("parallel_wan.") and sim.ranks[0].recorder.in_loop(phase):
            fused[op.split(".")[1]] += sim.ranks[0].recorder.ops[(op, device, dtype, phase)]
            assert device.startswith("cuda") and dtype == "bfloat16", (op, device, dtype)
    assert set(fused) == {"norm_modulate", "gated_residual", "rms_norm_rope"}
    assert fused["norm_modulate"] == fused["gated_residual"] == fused["rms_norm_rope"]


@pytest.mark.parametrize("kind, world", [("radial", 1), ("svg", 1), ("svg", 2)], ids=["radial", "svg", "svg-cp2"])
def test_sparse_attention_runs_its_block_sparse_kernel_on_the_gpu(files, kind, world):
    """sparse=radial and sparse=svg on a fake H100: after the dense first step, every block's
    self-attention launches the block-sparse kernel (one op, on the GPU, in bf16) with the visit
    tables uploaded once from pinned memory, and the loop stays quiet (no host read, no blocking
    copy) — svg's profile, its head placement and its tally included: each head's order is
    chosen on the GPU and never read by the host in the loop. svg on two fake H100s (Ulysses 2:
    each rank places its own heads' whole sequences; its tally meets over the world after the
    loop), every rank alike and NCCL's rules kept."""
    import collections

    sim = simulate(
        [
            "attention_impl=sdpa",
            "steps=2",
            f"sparse={kind}",
            "sparse_dense_steps=1",
            "sparse_dense_layers=0",
            "sparse_block=16",
            *(["mesh=cp2"] if world == 2 else []),
        ],
        world,
        files,
        decode=False,
    )
    problems = all_problems(sim)
    assert not problems, "\n".join(problems[:8])
    for rank in sim.ranks:
        launched = collections.Counter()
        for op, device, dtype, phase in rank.recorder.ops:
            if op.startswith("parallel_wan.block_sparse") and rank.recorder.in_loop(phase):
                launched[phase] += rank.recorder.ops[(op, device, dtype, phase)]
                assert device.startswith("cuda") and dtype == "bfloat16", (op, device, dtype)
        # step 0 dense (sparse_dense_steps=1); step 1: one launch per block (the tiny model's 2),
        # the CFG halves rows of the same call
        assert dict(launched) == {"step 1": 2}
        if kind == "svg":  # the placement: q, k, v gathered into each head's order, out and lse back
            ops = rank.recorder.ops
            gathers = {key: n for key, n in ops.items() if key[0] == "aten.gather" and key[3] == "step 1"}
            assert all(device.startswith("cuda") for _, device, _, _ in gathers), gathers
            assert sum(gathers.values()) == 2 * 5, gathers  # per block: q, k, v, out, lse
    record = sim.ranks[0].info["sparse"]
    assert record["sparse"] == kind and record["sparse_attention_calls"] == 2
    assert ("temporal_head_fraction" in record) == (kind == "svg")
