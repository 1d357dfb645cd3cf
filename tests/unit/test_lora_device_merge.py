"""The LoRA merged where the weight lands (lora/merge.py `merge_on_device`): the loader leaves each
changed tensor as the file stores it (`load_transformer(lora_on_device=True)`, no host copy), and
the backend's placement merges it on the device — the same bits as the host merge when the device
is this CPU (the same GEMM; on a GPU its GEMM's summation order may move a bf16 value by one
rounding, see tests/gpu/test_fake_gpu_lora.py for the GPU's ops), for float32 and bf16 files;
NaN/inf is refused naming the file and the tensor; the combinations it cannot serve are refused."""

import pytest
import torch
from harness.lora_files import lora_pairs, write_lora

from parallel_wan.builtin.tiny import build_tiny, transformer_config, write_checkpoint
from parallel_wan.errors import BadWeights
from parallel_wan.lora.merge import expert_lora
from parallel_wan.models.transformer import keeps_fp32
from parallel_wan.models.transformer_shapes import param_shapes
from parallel_wan.weights.layout import describe_checkpoint
from parallel_wan.weights.loader import load_transformer
from parallel_wan.weights.tree import iter_leaves

EXPERT = "high_noise"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("device_merge")
    model = build_tiny("t2v", seed=0)
    ckpt = describe_checkpoint(write_checkpoint(model, root / "ckpt", "diffusers"))  # float32 files
    cfg = transformer_config("t2v")
    lora = write_lora(root / "lora.safetensors", lora_pairs(cfg, rank=4, seed=1), "comfyui", alpha=2.0)
    return ckpt, lora, cfg


def _lora(files, scale=0.7):
    ckpt, path, cfg = files
    return expert_lora(EXPERT, [(str(path), scale, "lora_high")], param_shapes(cfg))


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_the_device_merge_is_the_host_merge(files, dtype):
    ckpt = files[0]
    host = dict(iter_leaves(load_transformer(ckpt, EXPERT, dtype, keeps_fp32, None, _lora(files))))
    lora = _lora(files)
    deferred = dict(iter_leaves(load_transformer(ckpt, EXPERT, dtype, keeps_fp32, None, lora, lora_on_device=True)))
    assert set(lora.deferred) == set(lora.targets) and len(lora.deferred) == 2 * 10  # 10 linears a block
    for name in lora.deferred:  # left as the file stores them: float32, unmerged
        assert deferred[name].dtype == torch.float32
        assert not torch.equal(deferred[name].to(host[name].dtype), host[name])
    from parallel_wan.backends.torch.backend import TorchBackend

    backend = TorchBackend.__new__(TorchBackend)  # placement only: a CPU stands in for the device
    backend.device, backend.compile = torch.device("cpu"), False
    placed = dict(iter_leaves(backend.place(_tree(deferred), dtype, keeps_fp32, lora=lora)))
    for name, tensor in host.items():
        assert placed[name].dtype == tensor.dtype and torch.equal(placed[name], tensor), name


def _tree(flat):
    from parallel_wan.weights import tree

    return tree.unflatten(flat)


def test_nan_is_refused_naming_the_file_and_the_tensor(files, tmp_path):
    """A weight left as stored was never read on the host: the device's check of the merged
    weight catches its NaN (as the host copy's check would), naming the checkpoint's file and
    tensor. A NaN/inf factor is refused as the LoRA file is read, naming that file."""
    ckpt, _, cfg = files
    lora = _lora(files)
    stored = dict(iter_leaves(load_transformer(ckpt, EXPERT, "bfloat16", keeps_fp32, None, lora, lora_on_device=True)))
    name = "blocks.1.ffn.net.2.weight"
    damaged = stored[name].clone()
    damaged[3, 1] = float("nan")
    with pytest.raises(BadWeights) as err:
        lora.merge_on_device(name, damaged, torch.device("cpu"), torch.bfloat16)
    message = str(err.value)
    assert "(with its LoRA merged on the device)" in message and "1 non-finite value" in message, message
    assert str(ckpt.experts[EXPERT]) in message and "blocks.1.ffn.net.2.weight" in message, message
    # the stored tensor itself is untouched, and merges
    assert not torch.isnan(stored[name]).any()
    lora.merge_on_device(name, stored[name], torch.device("cpu"), torch.bfloat16)

    pairs = lora_pairs(cfg, rank=4, seed=1)
    pairs["blocks.1.ffn.net.2"][1][3, 1] = float("inf")
    path = write_lora(tmp_path / "bad.safetensors", pairs, "comfyui", alpha=2.0)
    bad = expert_lora(EXPERT, [(str(path), 1.0, "lora_high")], param_shapes(cfg))
    load_transformer(ckpt, EXPERT, "bfloat16", keeps_fp32, None, bad, lora_on_device=True)
    with pytest.raises(BadWeights, match="bad.safetensors: tensor diffusion_model.blocks.1.ffn.2.lora_up"):
        bad.merge_on_device(name, stored[name], torch.device("cpu"), torch.bfloat16)


@pytest.mark.parametrize(
    "kwargs", [{"shard": (0, 2)}, {"cache_dir": "/tmp/unused"}, {"quantize": "fp8"}], ids=["shard", "cache", "quantize"]
)
def test_what_merges_as_it_loads_is_refused(files, kwargs):
    shard = kwargs.pop("shard", None)
    with pytest.raises(ValueError, match="lora_on_device"):
        load_transformer(files[0], EXPERT, "bfloat16", keeps_fp32, shard, _lora(files), lora_on_device=True, **kwargs)
