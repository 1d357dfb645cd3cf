"""A LoRA file's alphas (lora/read.py `LoraFile.scalar`): decoded from the file's bytes
(weights/safetensors_io.py `MappedFile.number`, no tensor made, so the fake-GPU harness can read
them) — the value torch reads, in every float dtype LoRA files store them in and as shape () or
(1,); a NaN/inf alpha, or one of more than one value, is refused naming the file and the key."""

import pytest
import torch
from safetensors.torch import save_file

from parallel_wan.errors import ConfigError
from parallel_wan.lora.read import LoraFile


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(), (1,)])
def test_an_alpha_is_the_value_torch_reads(tmp_path, dtype, shape):
    values = {"a": 16.0, "b": 0.3, "c": -2.75, "d": 1e-3}
    path = str(tmp_path / "lora.safetensors")
    save_file({f"m.{k}.alpha": torch.tensor(v, dtype=dtype).reshape(shape) for k, v in values.items()}, path)
    lora = LoraFile(path)
    for k, v in values.items():
        assert lora.scalar(f"m.{k}.alpha") == float(torch.tensor(v, dtype=dtype)), (k, dtype)


@pytest.mark.parametrize("value, words", [(float("nan"), "nan"), (float("inf"), "inf")])
def test_a_non_finite_alpha_is_refused(tmp_path, value, words):
    path = str(tmp_path / "lora.safetensors")
    save_file({"m.alpha": torch.tensor(value, dtype=torch.bfloat16)}, path)
    with pytest.raises(ConfigError, match=f"m.alpha is {words}"):
        LoraFile(path, "lora_high").scalar("m.alpha")


def test_an_alpha_of_two_values_is_refused(tmp_path):
    path = str(tmp_path / "lora.safetensors")
    save_file({"m.alpha": torch.tensor([1.0, 2.0])}, path)
    with pytest.raises(ConfigError, match=r"should hold one number \(an alpha\), not shape \(2,\)"):
        LoraFile(path).scalar("m.alpha")
