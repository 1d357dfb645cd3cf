"""quantize=fp8 (and nvfp4) on fake H100 (sm_90) and B200 (sm_100) GPUs: quant_compute=fp8 (and auto under
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


@pytest.mark.parametrize(
    "capability, compute, chosen, gemms",
    [
        (BLACKWELL, "fp4", "fp4", LAYERS * LINEARS_PER_BLOCK),
        (BLACKWELL, "auto", "dequant", 0),
        (HOPPER, "auto", "dequant", 0),
    ],
)
def test_nvfp4_multiplies_in_fp4_on_blackwell_only_when_asked(files, capability, compute, chosen, gemms):
    """quantize=nvfp4 with quant_compute=fp4: on sm_100 every block linear is one FP4
    aten._scaled_mm (the meta kernel enforces float4_e2m1fn_x2 operands, A row-major, B
    column-major, swizzled e4m3 block scales of the padded sizes — backends/torch/fp4_gemm.py; its
    numbers: tests/unit/test_nvfp4.py). Without it (auto: W4A16, the activations kept wide) and on
    sm_90 (no FP4 tensor cores) each is widened as it runs. Either way the loop stays quiet."""
    sim = simulate(
        ["quantize=nvfp4", f"quant_compute={compute}", "steps=2"], 1, files, capability=capability, decode=False
    )
    assert not all_problems(sim, bf16=False), all_problems(sim, bf16=False)[:5]
    assert sim.ranks[0].info["quantization"] == {"quantize": "nvfp4", "quant_compute": compute, "chosen": chosen}
    assert _scaled_mm_per_step(sim) == ({f"step {i}": gemms for i in range(2)} if gemms else {})


@pytest.mark.slow  # two fake ranks
def test_sharded_fp8_gathers_quantized_bytes_and_multiplies_in_fp8(files):
    sim = simulate(
        ["quantize=fp8", "quant_compute=fp8", "steps=2", "mesh=cp2", "memory=sharded"], 2, files, decode=False
    )
    assert not all_problems(sim, bf16=False), all_problems(sim, bf16=False)[:5]
    for rank in range(2):
        assert _scaled_mm_per_step(sim, rank) == {f"step {i}": LAYERS * LINEARS_PER_BLOCK for i in range(2)}


@pytest.mark.slow  # over 5 s (torch.compile's capture)
@pytest.mark.parametrize("kind, capability", [("fp8", HOPPER), ("nvfp4", BLACKWELL)])
def test_compiled_block_with_fp8_weights(files, kind, capability):
    """compile=true fuses q‖k‖v (and their scales) and compiles the block: the fp8 GEMMs — and on
    a B200 the NVFP4 layers' FP4 GEMMs — stay in the graph (aot_eager: graph capture on the fake
    GPU), one fewer pair per attention."""
    sim = simulate(
        [f"quantize={kind}", "steps=2", "compile=true", f"quant_compute={'fp4' if kind == 'nvfp4' else 'auto'}"],
        1,
        files,
        capability=capability,
        compile_backend="aot_eager",
        decode=False,
    )
    assert not all_problems(sim, bf16=False), all_problems(sim, bf16=False)[:5]
    counts = _scaled_mm_per_step(sim)
    assert counts == {f"step {i}": LAYERS * (LINEARS_PER_BLOCK - 2) for i in range(2)}, counts
    compute = "fp4" if kind == "nvfp4" else "auto"
    assert sim.ranks[0].info["quantization"] == {
        "quantize": kind,
        "quant_compute": compute,
        "chosen": "fp4" if kind == "nvfp4" else "fp8",
    }
