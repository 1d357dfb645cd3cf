"""quantize=fp8 on fake H100 (sm_90) and B200 (sm_100) GPUs: quant_compute=fp8 (and auto under
compile=true — eager W8A8 measured slower than bf16 on an H200, so auto widens then) runs every block linear of the
loop is one aten._scaled_mm on the GPU (torch's meta kernel,
what FakeTensorMode runs, enforces row-major A, column-major B and float32 scales, as cuBLASLt
does), the loop stays quiet (no host read or copy per layer) — eagerly, under memory=sharded, and
compiled. The layer's numbers are tests/unit/test_fp8_gemm.py's."""

import pytest
from harness.fakegpu.checks import all_problems
from harness.fakegpu.simulate import BLACKWELL, HOPPER, simulate

LINEARS_PER_BLOCK = 10  # q, k, v, out of self- and cross-attention, the FFN's two
LAYERS = 2  # the tiny model's blocks


@pytest.fixture(scope="module")
def files(fake_gpu_checkpoints):
    return fake_gpu_checkpoints  # the session's tiny checkpoints (conftest.py), read-only


def _scaled_mm_per_step(sim, rank=0):
    rec = sim.ranks[rank].recorder
    per_step = {}
    for (op, device, dtype, phase), n in rec.ops.items():
        if op == "aten._scaled_mm" and rec.in_loop(phase):
            assert device.startswith("cuda"), device
            per_step[phase] = per_step.get(phase, 0) + n
    return per_step


@pytest.mark.parametrize("capability", [HOPPER, BLACKWELL])
def test_fp8_runs_every_block_linear_as_an_fp8_gemm(files, capability):
    sim = simulate(["quantize=fp8", "quant_compute=fp8", "steps=2"], 1, files, capability=capability, decode=False)
    # bf16=False: the fp8 GEMMs' outputs are bf16 but their operands are float8 (the bf16 rule's matmul count)
    assert not all_problems(sim, bf16=False), all_problems(sim, bf16=False)[:5]
    assert sim.ranks[0].info["quantization"] == {"quantize": "fp8", "quant_compute": "fp8", "chosen": "fp8"}
    # one GEMM per linear per step: the CFG halves are rows of the same forward
    assert _scaled_mm_per_step(sim) == {f"step {i}": LAYERS * LINEARS_PER_BLOCK for i in range(2)}


@pytest.mark.slow  # two fake ranks
def test_sharded_fp8_gathers_quantized_bytes_and_multiplies_in_fp8(files):
    sim = simulate(
        ["quantize=fp8", "quant_compute=fp8", "steps=2", "mesh=cp2", "memory=sharded"], 2, files, decode=False
    )
    assert not all_problems(sim, bf16=False), all_problems(sim, bf16=False)[:5]
    for rank in range(2):
        assert _scaled_mm_per_step(sim, rank) == {f"step {i}": LAYERS * LINEARS_PER_BLOCK for i in range(2)}


@pytest.mark.slow  # over 5 s (torch.compile's capture)
def test_compiled_block_with_fp8_weights(files):
    """compile=true fuses q‖k‖v (and their scales) and compiles the block: the fp8 GEMMs stay in
    the graph (aot_eager: graph capture on the fake GPU), one fewer pair per attention."""
    sim = simulate(["quantize=fp8", "steps=2", "compile=true"], 1, files, compile_backend="aot_eager", decode=False)
    assert not all_problems(sim, bf16=False), all_problems(sim, bf16=False)[:5]
    counts = _scaled_mm_per_step(sim)
    assert counts == {f"step {i}": LAYERS * (LINEARS_PER_BLOCK - 2) for i in range(2)}, counts
    assert sim.ranks[0].info["quantization"] == {"quantize": "fp8", "quant_compute": "auto", "chosen": "fp8"}
