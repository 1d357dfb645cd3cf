"""compile=true's transformer block through Inductor to Triton kernels, built into cubins for
Hopper (sm_90, H100/H200) and Blackwell (sm_100, B200), on a machine without a GPU.

The block is the model's own `models.transformer.transformer_block`, compiled the way the torch
backend's compiled block runner compiles it (`torch.compile(transformer_block, dynamic=False)`,
self-attention outside the graph), at T2V-A14B's real widths (dim 5120, 40 heads, FFN 13824)
in bf16, on fake cuda tensors (tests/aot_triton.py). Triton compiles every generated kernel
to PTX and then, with the ptxas its wheel ships, to a cubin for the target; nothing is loaded
or launched.

What this checks: Inductor can lower the block for CUDA (no op it refuses, no graph break
inside the block), and every kernel it generates compiles for both architectures within their
limits (registers, shared memory). What it cannot: the kernels' numbers or speed, autotuning
(off here: it needs the GPU to time candidates), and what a real GPU build would route to
cuBLAS/cuDNN instead (the matmuls are extern calls either way; fake SDPA takes the math path).
"""

from __future__ import annotations

import time

import harness.aot_triton as aot_triton
import pytest
import torch

from parallel_wan.backends.torch import fp4_gemm, fp8_gemm, ops as torch_ops
from parallel_wan.backends.torch.attention import attention_with_lse
from parallel_wan.memory_plan import transformer_shapes
from parallel_wan.models import transformer as dit
from parallel_wan.models.transformer_config import TransformerConfig
from parallel_wan.weights.quantized.names import quantizable, scale_name
from parallel_wan.weights.tree import unflatten

pytestmark = pytest.mark.aot

A14B = TransformerConfig(num_layers=1)  # the A14B expert's widths; one block is all that compiles
TOKENS = 18_900  # 720p×81 on dp2_cp4: tokens per rank
ARCH = {aot_triton.H100: "sm_90a", aot_triton.B200: "sm_100a"}


def compile_block(gpu: aot_triton.Gpu, fp8: bool = False):
    """Compile one A14B block for `gpu`; returns (output, the compiled kernels). fp8: the block
    linears stored as float8 with per-channel scales and multiplied by quant_compute=fp8's W8A8
    path (backends/torch/fp8_gemm.py): the per-token activation quantization is generated code."""
    cfg = A14B
    shapes = {n[len("blocks.0.") :]: s for n, s in transformer_shapes(cfg).items() if n.startswith("blocks.0.")}
    with aot_triton.compiling_for(gpu) as kernels:
        bf16 = torch.bfloat16

        def weight(name, shape):
            return torch.empty(shape, dtype=torch.float32 if dit.keeps_fp32(name) else bf16, device="cuda")

        tensors = {name: weight(name, shape) for name, shape in shapes.items()}
        if fp8:
            for name, shape in shapes.items():
                if quantizable("blocks.0." + name):
                    tensors[name] = torch.empty(shape, dtype=torch.float8_e4m3fn, device="cuda")
                    tensors[scale_name(name)] = torch.empty((shape[0], 1), dtype=torch.float32, device="cuda")
        block = unflatten(tensors)
        x = torch.empty((1, TOKENS, cfg.dim), dtype=bf16, device="cuda")
        context = torch.empty((1, cfg.text_len, cfg.dim), dtype=bf16, device="cuda")
        proj = torch.empty((1, 6, cfg.dim), dtype=torch.float32, device="cuda")
        rope = tuple(torch.empty((TOKENS, cfg.attention_head_dim // 2), device="cuda") for _ in range(2))
        attention = torch.compiler.disable(lambda q, k, v: attention_with_lse(q, k, v)[0])
        compiled = torch.compile(dit.transformer_block, dynamic=False, backend="inductor", fullgraph=False)
        out = compiled(
            block,
            x,
            context,
            proj,
            rope,
            cfg,
            fp8_gemm.ops_for("fp8") if fp8 else torch_ops,
            attention,
        )
    return out, kernels


@pytest.fixture(scope="module", params=list(ARCH), ids=lambda gpu: gpu.name)
def compiled(request):
    t0 = time.perf_counter()
    out, kernels = compile_block(request.param)
    print(
        f"\n{request.param.name}: {len(kernels)} Triton kernels, {sum(k.cubin_bytes for k in kernels) / 1e3:.0f} kB "
        f"of cubin, in {time.perf_counter() - t0:.0f} s"
    )
    return request.param, out, kernels


def test_block_compiles_to_cubins_for_the_gpu(compiled):
    gpu, out, kernels = compiled
    assert (out.shape, out.dtype, out.device.type) == ((1, TOKENS, A14B.dim), torch.bfloat16, "cuda")
    # Inductor fuses the norms, modulation, RoPE, GELU and casts around the GEMMs: many kernels.
    assert len(kernels) >= 10
    major, minor = gpu.capability
    assert {k.target for k in kernels} == {f"cuda:{major * 10 + minor}"}
    assert {k.arch for k in kernels} == {ARCH[gpu]}
    assert all(k.cubin_bytes > 0 for k in kernels)


@pytest.mark.parametrize("gpu", list(ARCH), ids=lambda gpu: gpu.name)
def test_block_with_fp8_weights_compiles_to_cubins(gpu):
    """quantize=fp8 + quant_compute=fp8 compiled: the activation quantization (absmax, scale,
    cast to e4m3 — a conversion sm_89+ has) fuses into Triton kernels that build for the GPU,
    and the GEMMs stay _scaled_mm calls (extern: cuBLASLt)."""
    t0 = time.perf_counter()
    out, kernels = compile_block(gpu, fp8=True)
    print(f"\n{gpu.name} fp8: {len(kernels)} Triton kernels in {time.perf_counter() - t0:.0f} s")
    assert (out.shape, out.dtype, out.device.type) == ((1, TOKENS, A14B.dim), torch.bfloat16, "cuda")
    assert len(kernels) >= 10 and {k.arch for k in kernels} == {ARCH[gpu]}
    assert all(k.cubin_bytes > 0 for k in kernels)
    # the activations' cast to e4m3 is generated code, compiled for this GPU
    assert any(k.fp8_converts for k in kernels), [k.name for k in kernels]


def test_nvfp4_linear_compiles_to_cubins_for_blackwell():
    """quantize=nvfp4 + quant_compute=fp4 compiled for a B200 (one block linear: the whole
    block's compile took 25 s for the same kernels per linear): the activations' NVFP4
    quantization (per-token global scale, e4m3 block scales, rounding to e2m1 and packing) and
    the weights' scale swizzle fuse into Triton kernels that build for sm_100a; the GEMMs stay
    FP4 _scaled_mm calls (extern: cuBLASLt's block-scaled kernel)."""
    with aot_triton.compiling_for(aot_triton.B200):  # the FP4 path is the one taken, not the widening
        assert fp4_gemm.fp4_supported(torch.device("cuda"))
    t0 = time.perf_counter()
    dim = A14B.dim
    with aot_triton.compiling_for(aot_triton.B200) as kernels:  # one block linear (the block's others alike)
        layer = {
            "weight": torch.empty((dim, dim // 2), dtype=torch.uint8, device="cuda"),
            "weight_scale": torch.empty((dim, dim // 16), dtype=torch.float8_e4m3fn, device="cuda"),
            "weight_scale_2": torch.empty((dim, 1), dtype=torch.float32, device="cuda"),
            "bias": torch.empty((dim,), dtype=torch.bfloat16, device="cuda"),
        }
        x = torch.empty((1, TOKENS, dim), dtype=torch.bfloat16, device="cuda")
        out = torch.compile(fp8_gemm.fp4_dense, dynamic=False, backend="inductor", fullgraph=False)(x, layer)
    print(f"\nB200 nvfp4 linear: {len(kernels)} Triton kernels in {time.perf_counter() - t0:.0f} s")
    assert (out.shape, out.dtype, out.device.type) == ((1, TOKENS, dim), torch.bfloat16, "cuda")
    assert len(kernels) >= 1 and {k.arch for k in kernels} == {"sm_100a"}
    assert all(k.cubin_bytes > 0 for k in kernels)
    assert any(k.fp8_converts for k in kernels), [k.name for k in kernels]  # the block scales' e4m3 casts


def test_nothing_leaks_out_of_the_fake_gpu(compiled):
    """After the context, torch is a CPU build again: no CUDA, no fake mode."""
    assert not torch.cuda.is_available()
    assert torch.empty(2).device.type == "cpu"
    with pytest.raises((RuntimeError, AssertionError, AttributeError)):
        torch.cuda.get_device_capability(0)
