"""A LoRA on a fake H100 (tests/harness/fakegpu): an expert placed whole on the GPU takes its LoRA
merged there (lora/merge.py `merge_on_device`) — the host runs none of the merge's GEMMs, the
GPU runs one float32 GEMM per LoRA pair as the expert is placed, and the placed weights are bf16
on the GPU; memory=swap's low-noise expert, which waits in host memory, merges as it loads. The
numbers of the device merge are tests/unit/test_lora_device_merge.py's."""

import collections

import pytest
from harness.fakegpu.checks import all_problems
from harness.fakegpu.simulate import simulate
from harness.lora_files import lora_pairs, write_lora

from parallel_wan.builtin.tiny import transformer_config
from parallel_wan.lora import merge

PAIRS = 2 * 10  # the tiny model's 2 blocks × 10 linear layers


@pytest.fixture(scope="module")
def lora_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("fake_gpu_lora") / "lora.safetensors"
    return write_lora(path, lora_pairs(transformer_config("t2v"), rank=4, seed=1), "comfyui", alpha=2.0)


def _run(files, lora_file, monkeypatch, *extra):
    host_gemms = collections.Counter()
    product = merge._product

    def counted(up, down_t):
        host_gemms[up.device.type] += 1
        return product(up, down_t)

    monkeypatch.setattr(merge, "_product", counted)
    sim = simulate([f"lora={lora_file}", "steps=1", *extra], 1, files, decode=False)
    problems = all_problems(sim)
    assert not problems, "\n".join(problems[:8])
    return sim, host_gemms


def _float32_gemms_before_the_loop(sim):
    return sum(
        n
        for (op, device, dtype, phase), n in sim.ranks[0].recorder.ops.items()
        if op == "aten.mm" and device.startswith("cuda") and dtype == "float32" and phase == "before"
    )


def test_a_resident_expert_takes_its_lora_merged_on_the_gpu(fake_gpu_checkpoints, lora_file, monkeypatch):
    sim, host_gemms = _run(fake_gpu_checkpoints, lora_file, monkeypatch)
    assert host_gemms == {}  # nothing of the merge on the host
    assert _float32_gemms_before_the_loop(sim) == 2 * PAIRS  # both experts, one GEMM per pair, on the GPU


def test_swaps_waiting_expert_merges_as_it_loads(fake_gpu_checkpoints, lora_file, monkeypatch):
    sim, host_gemms = _run(fake_gpu_checkpoints, lora_file, monkeypatch, "memory=swap")
    assert host_gemms["cpu"] >= PAIRS  # the low-noise expert on the host (by tiles: one GEMM or more a pair)
    assert _float32_gemms_before_the_loop(sim) == PAIRS  # the high-noise expert on the GPU
