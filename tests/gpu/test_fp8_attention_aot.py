"""attention_impl=fp8's Triton kernel built into cubins for Hopper (sm_90a) and Blackwell
(sm_100a) at A14B's attention shape (head_dim 128, 40 heads, bf16 out), on a machine without a
GPU. What this checks: both products run on the FP8 tensor cores (wgmma with e4m3 operands on
Hopper, tcgen05's f8f6f4 MMA on Blackwell — not a widened fallback), the probabilities are
rounded by the hardware's round-to-nearest cast (the interpreter's tests round by hand to the
same values: fp8_kernel.ROUND_BY_HAND), and the kernel fits a block's shared memory. Its
numbers are tests/parallel/test_fp8_attention.py's (the same kernel in Triton's interpreter)."""

import pytest
from harness.triton_aot import compile_for

pytestmark = pytest.mark.aot

HEADS, HEAD_DIM = 40, 128  # A14B (and TI2V-5B's head_dim)


@pytest.mark.parametrize("arch", [90, 100], ids=["sm_90a", "sm_100a"])
def test_fp8_attention_compiles_to_fp8_tensor_core_cubins(arch):
    from parallel_wan.backends.torch import fp8_kernel

    fp8, f32 = "*fp8e4nv", "*fp32"
    kernel = compile_for(
        fp8_kernel._fp8_attention,
        {"Q": fp8, "K": fp8, "Vt": fp8, "Q_scale": f32, "K_scale": f32, "V_scale": f32, "Out": "*bf16", "Lse": f32},
        {
            "H": HEADS,
            "HEAD_DIM": HEAD_DIM,
            "BLOCK_M": fp8_kernel.BLOCK_M,
            "BLOCK_N": fp8_kernel.BLOCK_N,
            "ROUND_BY_HAND": False,  # compiled code casts directly
            "P_SCALE": 448.0,
        },
        arch,
        num_warps=8,
        num_stages=3,
    )  # launch_attention's settings at head_dim 128
    ptx = kernel.asm["ptx"]
    assert f".target sm_{arch}a" in ptx and len(kernel.asm["cubin"]) > 0
    mma = (
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3"
        if arch == 90
        else "tcgen05.mma.cta_group::1.kind::f8f6f4"
    )
    assert mma in ptx, f"no {mma} in the fp8 attention kernel's PTX"
    assert "cvt.rn.satfinite.e4m3x2.f32" in ptx  # P's cast: round to nearest even
    assert kernel.metadata.shared <= 232448  # fits a block's shared memory on both GPUs
