"""Weights with NaN or ±inf are refused as they load, naming the file, the tensor and the count.

Why not rely on the run's finite-latents check: a NaN key makes torch's CPU flash-attention
kernel return 0, not NaN, so a checkpoint with NaN in `attn1.to_k` renders a finite, wrong
video with exit 0 (measured: 62 uint8 levels from the clean checkpoint's frames). Every weight
is therefore checked where its bytes are copied anyway.

The check rides on the loader's one casting copy: right after a tensor is written (in chunks of
`CHUNK_BYTES`, 1 GiB: every weight of a Wan model is one chunk) it is summed. A sum is
non-finite when any term is NaN or ±inf (NaN propagates; inf + -inf is NaN); only then are the
values counted one by one — a sum can also overflow on huge finite values, which the exact count
then clears. The sum runs in the tensor's own dtype: torch's bf16 reduction with a float32
result is 10× slower than the native one on CPU, and the native one accumulates in float32
inside anyway. Integer tensors hold no NaN and are not summed.
Why whole tensors and not small chunks summed while still in the CPU cache: measured with
torch 2.13 on the 2-core machine (`python -m benchmarks.load --layers 1 --source-dtype float32
--repeats 5`), 4 MiB chunks made the checked load 1.36× the unchecked one (medians), whole
tensors 1.13×: two torch calls per 4 MiB cost more in dispatch and thread start-up than the
cache saves (BENCHMARKS.md "What the NaN/inf check costs").
Cost, measured against the same load without the check by `python -m benchmarks.load`:
BENCHMARKS.md "Weight loading".
"""

from __future__ import annotations

import math

import torch
from torch._subclasses.fake_tensor import is_fake

from ..errors import BadWeights

CHUNK_BYTES = 1 << 30  # larger than any one weight of a Wan model: a tensor is copied, then summed


def non_finite(tensor: torch.Tensor) -> int:
    """How many values of `tensor` are NaN or ±inf (0 for integer tensors, and for tensors with no
    values to read: meta tensors, and the fake tensors the fake-GPU tests and the planner load)."""
    if not tensor.is_floating_point() or tensor.numel() == 0 or tensor.is_meta or is_fake(tensor):
        return 0
    if tensor.dtype is torch.float8_e4m3fn:
        return _fp8_nan(tensor)
    if tensor.dtype is torch.float8_e5m2:
        tensor = tensor.to(torch.float16)  # every e5m2 value, inf and NaN included, is an fp16 value
    if math.isfinite(float(tensor.sum())):
        return 0
    return int(tensor.numel() - torch.isfinite(tensor).sum())


def _fp8_nan(tensor: torch.Tensor) -> int:
    """NaN count of a float8_e4m3fn tensor (it has no inf). Its NaNs are the bytes 0x7F and 0xFF:
    the largest int8 and the largest uint8, so two max passes (fast: no temporaries) find
    whether there are any, and only then are they counted. A quantized expert's weight is
    checked this way as stored: its scale was checked finite (and finite × 448) before loading
    (weights/expert_file.py), so the widened weight q · s is finite exactly where q is."""
    flat = tensor.reshape(-1)
    if int(flat.view(torch.int8).max()) != 127 and int(flat.view(torch.uint8).max()) != 255:
        return 0
    return int(((flat.view(torch.uint8) & 0x7F) == 0x7F).sum())


def copy_checked(destination: torch.Tensor, source: torch.Tensor) -> int:
    """destination ← source (the cast fused in), chunk by chunk, each chunk checked right after
    it is written; returns the number of non-finite values written (0: all finite)."""
    if not destination.is_floating_point() or destination.is_meta or is_fake(destination):
        destination.copy_(source)  # nothing to check: no values (the fake-GPU tests, the planner), or integers
        return 0
    if not destination.is_contiguous() or not source.is_contiguous() or destination.numel() != source.numel():
        destination.copy_(source)
        return non_finite(destination)
    flat_destination, flat_source = destination.view(-1), source.reshape(-1)
    step = max(1, CHUNK_BYTES // destination.element_size())
    bad = 0
    for begin in range(0, flat_destination.numel(), step):
        chunk = flat_destination[begin : begin + step]
        chunk.copy_(flat_source[begin : begin + step])
        bad += non_finite(chunk)
    return bad


def refuse(where: str, name: str, bad: int, total: int) -> BadWeights:
    """The one-line error for `bad` non-finite values of `total` in tensor `name` of `where`."""
    return BadWeights(
        f"{where}: tensor {name} holds {bad} non-finite value{'s' if bad != 1 else ''} (NaN or ±inf) "
        f"of {total}; the file is damaged or was saved from a diverged model — download or export it "
        "again (nothing was written)"
    )
