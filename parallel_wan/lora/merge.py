"""An expert's LoRAs, checked against the model and merged into its weights while they load.

W ← W + s·(α/r)·up·down for every LoRA pair (s the file's scale, α its alpha, r its rank),
bias ← bias + s·(α/r)·b for a PEFT lora_B bias, and W ← W + s·Δ for ComfyUI's full deltas
(`.diff`, `.diff_b`, `.diff_m`, scaled by the strength only, as ComfyUI and LightX2V apply
them). The merge happens inside the loader's one copy of each changed tensor: its source is
read, widened to float32, the float32 delta added, and the copy casts the sum to the run's
dtype — no second pass over the expert, no unmerged LoRA layers left for FSDP or compile to
trip over. A sharded load (rows [b, e) of each tensor) reads only those rows of `up`, of a
bias and of a delta, and merges only its rows.

A weight changed only by pairs (every LoRA users have: Lightning's, trained ones) is merged in
tiles of rows (`merge_into`): per tile, Δ = up·down (one GEMM), W + s·Δ added into Δ's memory
(W read once, straight from the mapped file), then cast into the destination and checked for
NaN/inf while the tile is still in the CPU cache. Merging whole weights wrote and re-read a
float32 copy of each (up to 280 MB: the widened W, the GEMM's accumulator, the cast's input) out
of cache; and the GEMM goes to oneDNN where torch has it (`_product`). The GEMM's arithmetic is
what is left (BENCHMARKS.md "The LoRA merge in cached tiles"). What is merged whole — a bias, a
full delta, a quantized weight's dequantized values — computes Δ by the same tiles and adds it
the same way, so every path gives the same bits (addmm's alpha·(up·down) + W, before, could
differ from W + s·Δ in the last float32 bit at s ≠ 1: tests/unit/test_lora_tiles.py holds both
to float32's error bound).

On a GPU the merge runs where the weight lands instead (`merge_on_device`): for an expert placed
whole on a CUDA device (memory=resident, swap's high-noise expert), without the weights cache or
quantize=, the loader leaves each changed tensor as stored in the mapped file (no host copy, cast
or check: `load_transformer(lora_on_device=True)` names them in `deferred`) and the backend's
placement uploads it as stored and merges there: W widened to float32, + s·Δ per contribution
in the same order, Δ by the device's float32 GEMM, cast to the run's dtype and checked for
NaN/inf on the device. The arithmetic is the host merge's (the GEMM's summation order aside);
the host's 45 GFLOP per A14B block (rank 64) become about a millisecond of the GPU's, and the
host does less than for a plain load (BENCHMARKS.md "The LoRA merge on the device").

Every file is untrusted: a key that names nothing in the model, a pair whose ranks disagree or
whose product does not fit its weight (a 5B LoRA on A14B), a missing half of a pair — each
stops the run before anything loads, naming the file and the key.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch._subclasses.fake_tensor import is_fake

from ..errors import ConfigError
from ..weights.finite import copy_checked, non_finite, refuse
from . import names
from .read import LoraFile

log = logging.getLogger("parallel_wan")


_local = threading.local()

# float32 bytes of W's rows merged at once (a multiple of 64 rows): a tile and its product
# stay in the CPU cache (2 MiB of L2 per core, 32 MiB of L3 here) from the GEMM to the NaN/inf
# check, and a GEMM of 128–384 rows runs at the GEMM's full rate.
TILE_BYTES = 8 << 20


def _scratch(numel: int) -> torch.Tensor:
    """This thread's float32 scratch of at least `numel` elements. Under a fake mode (the
    fake-GPU harness, the planner) a fresh fake one each time: a fake buffer kept for the thread
    would hand its garbage to the next real merge."""
    if is_fake(torch.empty(0)):
        return torch.empty(numel, dtype=torch.float32)
    buffer = getattr(_local, "buffer", None)
    if buffer is None or buffer.numel() < numel:
        buffer = _local.buffer = torch.empty(numel, dtype=torch.float32)
    return buffer[:numel]


def _keep_freed_tiles() -> None:
    """Once per thread: free one 31 MiB buffer, so that glibc keeps the tiles' products in this
    thread's heap. Each product is a fresh allocation (oneDNN's op takes no `out=`); glibc hands
    freed memory back to the kernel once its heap top exceeds a trim threshold that follows the
    largest mmap'ed chunk freed so far, up to 32 MiB (mallopt(3), M_MMAP_THRESHOLD's dynamic
    adjustment) — and then every tile faults in fresh pages, which first touches on a VM make
    slow. Measured in the load benchmark's process: 40–50k page faults more per A14B block and
    loads 2–3× as long now and then, none once one such buffer was freed. Nothing is touched:
    the buffer is an mmap and a munmap. Other allocators ignore it."""
    if not getattr(_local, "kept", False) and not is_fake(torch.empty(0)):
        torch.empty(31 << 20, dtype=torch.uint8)
        _local.kept = True


def _onednn_linear():
    """oneDNN's float32 linear (x·wᵀ), or None where torch lacks it. Inductor's CPU fusion calls
    the same op. oneDNN JITs for the CPU it finds; torch.mm goes to MKL, whose sgemm ran 2.3×
    slower on this project's AMD CPUs (rank 64 into 5120 columns, one core: 85 against 195
    GFLOP/s). Its fused-add variant was slower than a separate add, so it is not used."""
    if not torch.backends.mkldnn.is_available():
        return None
    try:
        return torch.ops.mkldnn._linear_pointwise.default
    except (AttributeError, RuntimeError):  # a build without the op: MKL's GEMM, the same numbers
        return None


_LINEAR = _onednn_linear()


def _product(up: torch.Tensor, down_t: torch.Tensor) -> torch.Tensor:
    """up·down as a new float32 tensor (down_t: downᵀ, contiguous)."""
    if _LINEAR is not None:
        return _LINEAR(up, down_t, None, "none", [], "")
    return torch.mm(up, down_t.t())


# The stored dtypes `torch.add` widens to float32 as it adds (float8 does not promote).
_WIDENS_EXACTLY = (torch.float32, torch.bfloat16, torch.float16)


def _tiles(rows: int, columns: int) -> list[tuple[int, int]]:
    """[begin, end) of each tile of a (rows, columns) weight. No tile has one row unless the weight
    has: oneDNN multiplies a single row with another kernel (a GEMV) whose sums can differ in the
    last bit from its GEMM's, and a row's numbers must not depend on the tile it falls in (a
    sharded load's rows equal the whole load's; measured: tiles of 2 rows and more give the
    same bits, with 1 or 2 threads)."""
    step = TILE_BYTES // (4 * max(1, columns))
    step = max(2, step // 64 * 64 if step >= 64 else step)
    begins = list(range(0, rows, step))
    if len(begins) > 1 and rows - begins[-1] == 1:
        begins.pop()
    return list(zip(begins, [*begins[1:], rows]))


@dataclass
class Contribution:
    file: LoraFile
    kind: str  # pair | bias | delta
    scale: float  # everything the tensor product is multiplied by: s·α/r, or s
    keys: tuple[str, ...]  # pair: (up, down); bias and delta: (tensor,)

    def add_to(self, acc: torch.Tensor, rows: tuple[int, int] | None) -> None:
        """acc += the change, in place (float32): no tensor of the weight's size is allocated."""
        if self.kind == "pair":  # Δ by the tiles of `merge_into`, added as it adds: the same bits
            up, down_t = self.factors(rows)
            acc = acc.view(up.shape[0], down_t.shape[0])
            for begin, end in _tiles(*acc.shape):
                acc[begin:end].add_(_product(up[begin:end], down_t), alpha=self.scale)
        else:
            acc.add_(self.file.tensor(self.keys[0], rows).view(acc.shape), alpha=self.scale)

    def factors(self, rows: tuple[int, int] | None) -> tuple[torch.Tensor, torch.Tensor]:
        """A pair's (up rows, downᵀ), float32, ready for `_product` tile by tile."""
        return self.file.tensor(self.keys[0], rows), self.file.tensor(self.keys[1]).t().contiguous()


@dataclass
class ExpertLora:
    """The LoRAs of one expert: target parameter (diffusers name) → its contributions."""

    expert: str
    files: list[tuple[LoraFile, float]]
    formats: list[str] = field(default_factory=list)  # each file's key format (names.detect_format)
    targets: dict[str, list[Contribution]] = field(default_factory=dict)
    dropped: int = 0
    # name → (file, tensor) of each weight the loader left as stored for `merge_on_device`
    deferred: dict[str, tuple[str, str]] = field(default_factory=dict)

    def __contains__(self, name: str) -> bool:
        return name in self.targets

    def merged_source(
        self, name: str, source: Callable[[], torch.Tensor], rows: tuple[int, int] | None
    ) -> Callable[[], torch.Tensor]:
        """A loader copy source that yields the weight with its LoRA change, in float32 (the
        loader's copy casts it). The float32 sum lives in a scratch buffer kept per copy
        thread: the copy consumes it before the thread takes its next tensor, and fresh memory
        for every weight would cost more in page faults than the merge's arithmetic."""

        def merged() -> torch.Tensor:
            base = source()
            acc = _scratch(base.numel()).view(base.shape)
            acc.copy_(base)  # widened to float32 in the copy
            for contribution in self.targets[name]:
                contribution.add_to(acc, rows)  # W + s·(α/r)·up·down as one GEMM into acc
            return acc

        return merged

    def merging_copy(
        self,
        destination: torch.Tensor,
        name: str,
        source: Callable[[], torch.Tensor],
        rows: tuple[int, int] | None,
        origin: tuple[str, str],
    ) -> Callable[[], None]:
        """A task for the loader's copy pool (`copy_pool.run_all`): destination ← the weight with
        its LoRA change, cast and checked for NaN/inf, which names `origin` (file, tensor)."""

        def run() -> None:
            bad = self.merge_into(destination, name, source(), rows)
            if bad:
                raise refuse(*origin, bad, destination.numel())

        return run

    def merge_into(self, destination: torch.Tensor, name: str, base: torch.Tensor, rows: tuple[int, int] | None) -> int:
        """destination ← base + its LoRA change, cast, tile by tile of rows (module docstring);
        returns how many values written are NaN or ±inf. Anything but a plain 2-D weight changed
        by pairs only (a bias, a full delta, a fake tensor) is merged whole (`merged_source`)."""
        contributions = self.targets[name]
        if not _tileable(destination, base, contributions):
            return copy_checked(destination, self.merged_source(name, lambda: base, rows)())
        factors = [(c.factors(rows), c.scale) for c in contributions]
        _keep_freed_tiles()
        bad = 0
        for begin, end in _tiles(*base.shape):
            acc = base[begin:end]  # W as stored, only read: it may be the mapped file
            if acc.dtype != torch.float32:  # widened first, so the adds below are float32 + float32
                acc = _scratch(acc.numel()).view(acc.shape).copy_(acc)
            for i, ((up, down_t), scale) in enumerate(factors):
                delta = _product(up[begin:end], down_t)
                if i == 0:  # W + s·Δ into Δ's fresh memory, as `add_to` adds into its accumulator
                    acc = torch.add(acc, delta, alpha=scale, out=delta)
                else:  # (W + s₁·Δ₁) + s₂·Δ₂: the order of the whole-weight merge
                    acc.add_(delta, alpha=scale)
            bad += copy_checked(destination[begin:end], acc)
        return bad

    def merge_on_device(self, name: str, stored: torch.Tensor, device, dtype: torch.dtype) -> torch.Tensor:
        """The weight `name` with its LoRA change, made on `device` (module docstring): `stored`
        (as the file holds it) copied there as is, widened, W + s·Δ added contribution by
        contribution as `merge_into` adds them, cast to `dtype`, checked. Raises BadWeights
        naming the file and the tensor when a value written is NaN or ±inf."""
        acc = torch.empty(stored.shape, dtype=torch.float32, device=device)
        # the bytes as stored cross once, widened where they land (float32: straight into acc)
        acc.copy_(stored if stored.dtype == torch.float32 else stored.to(device))
        for contribution in self.targets[name]:
            if contribution.kind == "pair":
                up, down_t = contribution.factors(None)
                up, down_t = up.to(device), down_t.to(device)
                delta = _product(up, down_t) if acc.device.type == "cpu" else torch.mm(up, down_t.t())
                acc.add_(delta.view(acc.shape), alpha=contribution.scale)
            else:
                change = contribution.file.tensor(contribution.keys[0]).to(device)
                acc.add_(change.view(acc.shape), alpha=contribution.scale)
        merged = acc.to(dtype)
        bad = non_finite(merged)
        if bad:
            raise refuse(*self.deferred[name], bad, merged.numel())
        return merged

    def record(self) -> dict:
        """For the sidecar: the files (identity, scale, format), what changed, what was dropped."""
        files = [{**f, "format": fmt} for f, fmt in zip(self.identity(), self.formats)]
        return {"files": files, "tensors_changed": len(self.targets), "keys_dropped": self.dropped}

    def identity(self) -> list:
        """Each file's identity and scale: part of the converted-weights cache key."""
        return [{**f.identity(), "scale": s} for f, s in self.files]

    @property
    def bytes_read(self) -> int:
        return sum(f.bytes_read for f, _ in self.files)


def _tileable(destination: torch.Tensor, base: torch.Tensor, contributions: list[Contribution]) -> bool:
    """Whether `merge_into` can merge by row tiles: real CPU float tensors of one 2-D shape,
    contiguous, changed by pairs only."""
    return (
        destination.ndim == 2
        and base.shape == destination.shape
        and destination.is_floating_point()
        and base.dtype in _WIDENS_EXACTLY
        and destination.device.type == base.device.type == "cpu"
        and not is_fake(destination)
        and not is_fake(base)
        and destination.is_contiguous()
        and base.is_contiguous()
        and all(c.kind == "pair" for c in contributions)
    )


def expert_lora(expert: str, sources: list[tuple[str, float, str]], shapes: dict[str, tuple]) -> ExpertLora | None:
    """Open and check `sources` ((path, scale, setting) each) against the expert's parameter
    `shapes` (diffusers names). Headers only: nothing but a few alphas is read."""
    if not sources:
        return None
    result = ExpertLora(expert, [])
    official = names.official_module_names(shapes)
    image_branch = any(".add_k_proj." in name for name in shapes)  # Animate: its image keys apply
    for path, scale, setting in sources:
        lora = LoraFile(path, setting)
        result.files.append((lora, scale))
        where = f"{setting}={path}"
        fmt, entries, dropped = names.parse_keys(list(lora.shapes), where, official, image_branch)
        result.formats.append(fmt)
        result.dropped += len(dropped)
        if dropped:
            log.warning(
                "%s: dropped %d keys of Wan 2.1's image branch (k_img, v_img, norm_k_img, img_emb), which "
                "Wan 2.2 does not have",
                where,
                len(dropped),
            )
        for target, contribution in _contributions(lora, fmt, entries, scale, shapes, where):
            result.targets.setdefault(target, []).append(contribution)
    return result


def _contributions(lora: LoraFile, fmt: str, entries: list, scale: float, shapes: dict, where: str):
    by_module: dict[str, dict[str, str]] = defaultdict(dict)
    for e in entries:
        if e.part in (names.DIFF, names.DIFF_B, names.DIFF_M):
            if e.target not in shapes:
                raise ConfigError(f"{where}: {e.key} changes {e.target}, which this model does not have")
            if lora.shapes[e.key] != tuple(shapes[e.target]):
                raise ConfigError(
                    f"{where}: {e.key} has shape {lora.shapes[e.key]} but {e.target} is "
                    f"{tuple(shapes[e.target])} (a LoRA for another model size?)"
                )
            yield e.target, Contribution(lora, "delta", scale, (e.key,))
            continue
        if e.part in by_module[e.target]:
            raise ConfigError(f"{where}: {e.key} repeats the {e.part} of {e.target}")
        by_module[e.target][e.part] = e.key
    adapter = lora.adapter_config() if fmt == "peft" else {}
    for module, parts in by_module.items():
        down, up = parts.get(names.DOWN), parts.get(names.UP)
        if down is None or up is None:
            have = next(iter(parts.values()))
            raise ConfigError(
                f"{where}: {have} has no {'lora_A/lora_down' if down is None else 'lora_B/lora_up'} "
                f"partner for {module}; the file is incomplete"
            )
        weight = module + ".weight"
        if weight not in shapes:
            raise ConfigError(f"{where}: {down} targets {module}, which this model does not have")
        d_shape, u_shape, w_shape = lora.shapes[down], lora.shapes[up], tuple(shapes[weight])
        if len(d_shape) != 2 or len(u_shape) != 2 or len(w_shape) != 2:
            raise ConfigError(
                f"{where}: {down} / {up} (shapes {d_shape}, {u_shape}) do not form a LoRA of the "
                f"linear layer {module} {w_shape}"
            )
        rank = d_shape[0]
        if u_shape[1] != rank:
            raise ConfigError(f"{where}: rank mismatch for {module}: {down} has rank {rank} but {up} has {u_shape[1]}")
        if (u_shape[0], d_shape[1]) != w_shape:
            raise ConfigError(
                f"{where}: {up} · {down} is {(u_shape[0], d_shape[1])} but {weight} is {w_shape} "
                "(a LoRA for another model size, e.g. TI2V-5B on A14B?)"
            )
        alpha = _alpha(lora, fmt, module, parts, adapter, rank, where)
        factor = scale * alpha / rank
        yield weight, Contribution(lora, "pair", factor, (up, down))
        if names.UP_BIAS in parts:
            bias = module + ".bias"
            if bias not in shapes or lora.shapes[parts[names.UP_BIAS]] != tuple(shapes[bias]):
                raise ConfigError(f"{where}: {parts[names.UP_BIAS]} does not fit {bias}")
            yield bias, Contribution(lora, "bias", factor, (parts[names.UP_BIAS],))


def _alpha(lora: LoraFile, fmt: str, module: str, parts: dict, adapter: dict, rank: int, where: str) -> float:
    """α such that the pair is scaled by α/r: the file's `.alpha` (ComfyUI, musubi), the PEFT
    adapter config's lora_alpha / r (with its per-module patterns), or r (scale 1) when none
    is given — what diffusers does with each."""
    if fmt != "peft":
        return lora.scalar(parts[names.ALPHA]) if names.ALPHA in parts else float(rank)
    if not adapter:
        return float(rank)
    r = _pattern(adapter.get("rank_pattern"), module, adapter.get("r", rank))
    alpha = _pattern(adapter.get("alpha_pattern"), module, adapter.get("lora_alpha", r))
    try:
        r, alpha = float(r), float(alpha)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: the adapter config's r={r!r} / lora_alpha={alpha!r} are not numbers") from None
    if not (math.isfinite(alpha) and r > 0):
        raise ConfigError(f"{where}: the adapter config's r={r} / lora_alpha={alpha} give no usable scale")
    # PEFT scales a pair by lora_alpha / r of its config; expressed here as α over the pair's rank.
    return alpha / r * rank


def _pattern(patterns, module: str, default):
    """PEFT's rank_pattern / alpha_pattern: a key matches a module name ending in it."""
    for key, value in (patterns or {}).items():
        if re.match(rf"(.*\.)?({key})$", module):
            return value
    return default
