"""attention_impl=sage's Triton kernels built into cubins for Hopper (sm_90a) and Blackwell
(sm_100a) at A14B's attention shape (head_dim 128, 40 heads, bf16 out), on a machine without a
GPU: Triton compiles to PTX and, with the ptxas its wheel ships, to a cubin; nothing runs.

The two kernels a sage attention launches: Sage's own int8 quantizer
(sageattention.quant_per_block) and our attention kernel (backends/torch/sage_kernel.py: Sage's
scheme, int8 QKᵀ / fp16 PV, with padding masked and the lse written), one compile each per
architecture, with the launch settings the wrapper uses at head_dim 128. What this checks: both lower for the
architecture's tensor cores within its limits (registers, shared memory). Their numbers are
tests/parallel/test_sage_attention.py's (the same kernels in Triton's interpreter)."""

import pytest
from harness.triton_aot import compile_for as _compile

pytestmark = pytest.mark.aot

HEADS, HEAD_DIM = 40, 128  # A14B (and TI2V-5B's head_dim)


@pytest.mark.parametrize("arch", [90, 100], ids=["sm_90a", "sm_100a"])
def test_sage_kernels_compile_to_cubins(arch):
    from sageattention.quant_per_block import quant_per_block_int8_kernel

    from parallel_wan.backends.torch import sage_kernel

    attention = _compile(
        sage_kernel._int8_attention,
        {"Q": "*i8", "K": "*i8", "V": "*fp16", "Q_scale": "*fp32", "K_scale": "*fp32", "Out": "*bf16", "Lse": "*fp32"},
        {"H": HEADS, "HEAD_DIM": HEAD_DIM, "BLOCK_M": sage_kernel.BLOCK_M, "BLOCK_N": sage_kernel.BLOCK_N},
        arch,
        num_warps=8,
        num_stages=4,
    )  # launch_attention's settings at head_dim 128
    quantize = _compile(
        quant_per_block_int8_kernel,
        {"Input": "*bf16", "Output": "*i8", "Scale": "*fp32", "sm_scale": "fp32"},
        {"C": HEAD_DIM, "BLK": sage_kernel.BLOCK_M},
        arch,
    )
    for kernel in (attention, quantize):
        assert f".target sm_{arch}a" in kernel.asm["ptx"]
        assert len(kernel.asm["cubin"]) > 0
    # the int8 QKᵀ on the tensor cores: wgmma on Hopper, tcgen05 MMA on Blackwell (not a CUDA-core fallback)
    mma = "wgmma.mma_async" if arch == 90 else "tcgen05.mma"
    assert mma in attention.asm["ptx"], f"no {mma} in the attention kernel's PTX"
    assert attention.metadata.shared <= 232448  # fits a block's shared memory on both GPUs
