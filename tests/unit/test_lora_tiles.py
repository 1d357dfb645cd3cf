"""The LoRA merge by row tiles (lora/merge.py `merge_into`): its numbers are the float32 merge's
(W + s·(α/r)·up·down, rounded once to the run's dtype) within float32's error bound for a rank-r
sum, and the bits of the whole-weight path (what a bias, a delta or a quantized weight takes),
whatever the tile size, for float32 and bf16 stored weights and destinations and two LoRAs on
one weight; a row's bits do not depend on the tile it falls in (a sharded load equals the whole
load's rows); NaN/inf anywhere — the first row of a middle tile, the last row of a tile, a short
last tile — is counted and refused naming the tensor; and what the tiles do not take (a bias)
still merges whole."""

import pytest
import torch
from harness.lora_files import write_lora

from parallel_wan.errors import BadWeights
from parallel_wan.lora import merge
from parallel_wan.lora.merge import expert_lora

NAME = "blocks.0.attn1.to_q.weight"
OUT, IN = 200, 96
# Two LoRAs on one weight, alpha ≠ rank and a strength ≠ 1 in each: every scale is exercised.
LORAS = ((8, 3.0, 0.7, 1), (4, 4.0, 1.0, 2))  # (rank, alpha, strength, seed)


@pytest.fixture
def lora(tmp_path):
    sources = []
    for rank, alpha, strength, seed in LORAS:
        g = torch.Generator().manual_seed(seed)
        # bf16-valued factors, as LoRA files hold them: their products are exact in float32
        down = (torch.randn((rank, IN), generator=g) * 0.2).bfloat16().float()
        up = (torch.randn((OUT, rank), generator=g) * 0.2).bfloat16().float()
        path = write_lora(
            tmp_path / f"{seed}.safetensors", {NAME.removesuffix(".weight"): (down, up)}, "comfyui", alpha
        )
        sources.append((path, strength, "lora"))
    return expert_lora("high_noise", sources, {NAME: (OUT, IN), "blocks.0.attn1.to_q.bias": (OUT,)})


def base(dtype=torch.float32):
    return (torch.randn((OUT, IN), generator=torch.Generator().manual_seed(0)) * 0.5).to(dtype)


def reference_and_bound(lora, w):
    """The float64 merge and float32's error bound for it: each product is exact, a sum of r of
    them and the add of W and of s·Δ round at most r + 2 times, each by ≤ 2⁻²⁴ of the running
    magnitude ≤ |W| + Σ|s|·|up|·|down|."""
    ref, magnitude, terms = w.double(), w.double().abs(), 0
    for c in lora.targets[NAME]:
        up, down = (c.file.tensor(k).double() for k in c.keys)
        ref = ref + c.scale * (up @ down)
        magnitude = magnitude + abs(c.scale) * (up.abs() @ down.abs())
        terms += down.shape[0] + 2
    return ref, terms * 2.0**-24 * magnitude


def tiled(lora, w, dtype, tile_rows=None, rows=None, monkeypatch=None):
    if tile_rows is not None:
        monkeypatch.setattr(merge, "TILE_BYTES", 4 * IN * tile_rows)
    out = torch.empty(w.shape, dtype=dtype)
    assert lora.merge_into(out, NAME, w, rows) == 0
    return out


@pytest.mark.parametrize("stored", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tiles_give_the_float32_merge_within_its_error_bound(lora, monkeypatch, stored, dtype):
    w = base(stored)
    ref, bound = reference_and_bound(lora, w)
    # A bf16 result adds its one rounding: half a unit in the last place, ≤ 2⁻⁸ of the value.
    allowed = bound + (2.0**-8 * ref.abs() if dtype == torch.bfloat16 else 0)
    whole = torch.empty(w.shape, dtype=dtype)
    merge.copy_checked(whole, lora.merged_source(NAME, lambda: w, None)())  # the whole-weight merge
    for tile_rows in (64, 5):  # 64: tiles of 64, 64, 64 and 8 rows; 5: forty tiles
        got = tiled(lora, w, dtype, tile_rows, monkeypatch=monkeypatch)
        assert ((got.double() - ref).abs() <= allowed).all(), tile_rows
        assert torch.equal(got, whole), tile_rows  # the whole-weight path adds the same Δ the same way


def test_a_rows_bits_do_not_depend_on_its_tile(lora, monkeypatch):
    w = base()
    one_tile = tiled(lora, w, torch.float32, OUT, monkeypatch=monkeypatch)
    assert torch.equal(tiled(lora, w, torch.float32, 7, monkeypatch=monkeypatch), one_tile)
    # Rows [67, 134) as a sharded load merges them: its own tiles, this rank's rows of `up`.
    shard = tiled(lora, w[67:134], torch.float32, 64, rows=(67, 134), monkeypatch=monkeypatch)
    assert torch.equal(shard, one_tile[67:134])
    # and no tile of one row (a GEMV's sums), but where the weight has one
    monkeypatch.setattr(merge, "TILE_BYTES", 4 * IN * 64)
    assert merge._tiles(129, IN) == [(0, 64), (64, 129)] and merge._tiles(1, IN) == [(0, 1)]


def test_non_finite_values_in_any_tile_are_counted_and_named(lora, monkeypatch):
    monkeypatch.setattr(merge, "TILE_BYTES", 4 * IN * 64)  # tiles [0, 64) [64, 128) [128, 192) [192, 200)
    w = base()
    w[63, 5], w[64, 0], w[199, IN - 1] = float("inf"), float("nan"), float("-inf")
    out = torch.empty(w.shape, dtype=torch.bfloat16)
    assert lora.merge_into(out, NAME, w, None) == 3
    task = lora.merging_copy(out, NAME, lambda: w, None, ("/ckpt/model.safetensors (with its LoRA merged)", NAME))
    with pytest.raises(BadWeights, match=rf"tensor {NAME} holds 3 non-finite values \(NaN or ±inf\) of {OUT * IN}"):
        task()


def test_what_the_tiles_do_not_take_merges_whole(lora):
    """A 1-D bias (a PEFT lora_B bias or a ComfyUI .diff_b would be one) is not tiled."""
    bias = torch.zeros(OUT)
    assert not merge._tileable(bias, bias, lora.targets[NAME])
    assert merge._tileable(torch.empty(OUT, IN), base(), lora.targets[NAME])
    assert not merge._tileable(torch.empty(OUT, IN), base().to(torch.float8_e4m3fn), lora.targets[NAME])
