"""sparse=radial's Triton kernel (backends/torch/sparse_kernel.py) built into cubins for Hopper
(sm_90a) and Blackwell (sm_100a) at A14B's attention shape (head_dim 128, 40 heads, bf16), on
a machine without a GPU: Triton compiles to PTX and, with the ptxas its wheel ships, to a
cubin; nothing runs. Both block sizes Radial Attention uses (64: its Wan 2.2 setting, our
default; 128: its Wan 2.1 one), with the launch options the wrapper uses, and float32 (the
tests' dtype: IEEE products). What this checks: the kernel lowers for the architecture's
tensor cores within its limits (registers, shared memory). Its numbers are
tests/parallel/test_sparse_attention.py's (the same kernel in Triton's interpreter)."""

import pytest
from harness.triton_aot import compile_for

pytestmark = pytest.mark.aot

HEADS, HEAD_DIM = 40, 128  # A14B (and TI2V-5B's head_dim)
POINTERS = {"Lse": "*fp32", "Table": "*i32", "Counts": "*i32", "scale_log2": "fp32"}


def _compile(arch: int, dtype: str, block: int):
    from parallel_wan.backends.torch import sparse_kernel

    precision = "ieee" if dtype == "fp32" else "tf32"
    types = {**POINTERS, **{name: f"*{dtype}" for name in ("Q", "K", "V", "Out")}}
    constants = {"H": HEADS, "HEAD_DIM": HEAD_DIM, "DIM": HEAD_DIM, "BLOCK": block, "PRECISION": precision}
    options = sparse_kernel.launch_options(block, HEAD_DIM)
    return compile_for(sparse_kernel._block_sparse_attention, types, constants, arch, **options)


@pytest.mark.parametrize("block", [64, 128])
@pytest.mark.parametrize("arch", [90, 100], ids=["sm_90a", "sm_100a"])
def test_the_sparse_kernel_compiles_to_cubins_in_bf16(arch, block):
    kernel = _compile(arch, "bf16", block)
    assert f".target sm_{arch}a" in kernel.asm["ptx"]
    assert len(kernel.asm["cubin"]) > 0
    # QKᵀ and PV on the tensor cores: wgmma on Hopper, tcgen05 MMA on Blackwell (not a CUDA-core fallback)
    mma = "wgmma.mma_async" if arch == 90 else "tcgen05.mma"
    assert mma in kernel.asm["ptx"], f"no {mma} in the sparse kernel's PTX"
    assert kernel.metadata.shared <= 232448  # fits a block's shared memory on both GPUs (measured 49–131 kB)


@pytest.mark.parametrize("arch", [90, 100], ids=["sm_90a", "sm_100a"])
def test_the_sparse_kernel_compiles_in_float32(arch):
    # IEEE float32 products run on the CUDA cores (no tensor-core instruction takes them): slow, exact
    kernel = _compile(arch, "fp32", 64)
    assert len(kernel.asm["cubin"]) > 0
    assert kernel.metadata.shared <= 232448
