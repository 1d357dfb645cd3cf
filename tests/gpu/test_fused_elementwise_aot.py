"""The fused elementwise kernels (backends/torch/fused_kernels.py) built into cubins for Hopper
(sm_90a) and Blackwell (sm_100a) at A14B's row (dim 5120 = 40 heads × 128, bf16), on a machine
without a GPU: each lowers within a block's limits with the launch settings the ops use (the
whole row in registers, 8 warps), without spilling to local memory. Their numbers are
tests/parallel/test_fused_elementwise.py's (the same kernels in Triton's interpreter)."""

import pytest
from harness.triton_aot import compile_for, spilled_bytes

pytestmark = pytest.mark.aot

DIM, HEADS = 5120, 40


@pytest.mark.parametrize("arch", [90, 100], ids=["sm_90a", "sm_100a"])
def test_fused_elementwise_kernels_compile_to_cubins(arch):
    import triton

    from parallel_wan.backends.torch import fused_kernels as fk

    bf16, f32 = "*bf16", "*fp32"
    block = triton.next_power_of_2(DIM)
    warps = fk._warps(block)
    kernels = {
        "norm_modulate": compile_for(
            fk._norm_modulate_kernel,
            {"X": bf16, "Scale": f32, "Shift": f32, "Out": bf16, "eps": "fp32"},
            {"BLOCK_D": block},
            arch,
            num_warps=warps,
        ),
        "gated_residual": compile_for(
            fk._gated_residual_kernel,
            {"X": bf16, "Y": bf16, "Gate": f32, "Out": bf16},
            {"BLOCK_D": block},
            arch,
            num_warps=warps,
        ),
        "rms_norm_rope": compile_for(
            fk._rms_norm_rope_kernel,
            {"X": bf16, "W": bf16, "Cos": f32, "Sin": f32, "Out": bf16, "eps": "fp32"},
            {"BLOCK_P": triton.next_power_of_2(DIM // 2)},
            arch,
            num_warps=fk._warps(triton.next_power_of_2(DIM // 2)),
        ),
    }
    for name, kernel in kernels.items():
        assert f".target sm_{arch}a" in kernel.asm["ptx"] and len(kernel.asm["cubin"]) > 0, name
        assert kernel.metadata.shared <= 232448, name
        assert spilled_bytes(kernel, arch) == 0, name  # the row stays in registers
