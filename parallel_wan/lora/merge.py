"""An expert's LoRAs, checked against the model and merged into its weights while they load.

W ← W + s·(α/r)·up·down for every LoRA pair (s the file's scale, α its alpha, r its rank),
bias ← bias + s·(α/r)·b for a PEFT lora_B bias, and W ← W + s·Δ for ComfyUI's full deltas
(`.diff`, `.diff_b`, `.diff_m`, scaled by the strength only, as ComfyUI and LightX2V apply
them). The merge happens inside the loader's one copy of each changed tensor: its source is
read, widened to float32, the float32 delta added, and the copy casts the sum to the run's
dtype — no second pass over the expert, no unmerged LoRA layers left for FSDP or compile to
trip over. A sharded load (rows [b, e) of each tensor) reads only those rows of `up`, of a
bias and of a delta, and merges only its rows.

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

from ..errors import ConfigError
from . import names
from .read import LoraFile

log = logging.getLogger("parallel_wan")


_local = threading.local()


def _scratch(numel: int) -> torch.Tensor:
    """This thread's float32 scratch of at least `numel` elements."""
    buffer = getattr(_local, "buffer", None)
    if buffer is None or buffer.numel() < numel:
        buffer = _local.buffer = torch.empty(numel, dtype=torch.float32)
    return buffer[:numel]


@dataclass
class Contribution:
    file: LoraFile
    kind: str  # pair | bias | delta
    scale: float  # everything the tensor product is multiplied by: s·α/r, or s
    keys: tuple[str, ...]  # pair: (up, down); bias and delta: (tensor,)

    def add_to(self, acc: torch.Tensor, rows: tuple[int, int] | None) -> None:
        """acc += the change, in place (float32): no tensor of the weight's size is allocated."""
        if self.kind == "pair":
            up = self.file.tensor(self.keys[0], rows)
            down = self.file.tensor(self.keys[1])
            acc.view(up.shape[0], down.shape[1]).addmm_(up, down, alpha=self.scale)
        else:
            acc.add_(self.file.tensor(self.keys[0], rows).view(acc.shape), alpha=self.scale)


@dataclass
class ExpertLora:
    """The LoRAs of one expert: target parameter (diffusers name) → its contributions."""

    expert: str
    files: list[tuple[LoraFile, float]]
    formats: list[str] = field(default_factory=list)  # each file's key format (names.detect_format)
    targets: dict[str, list[Contribution]] = field(default_factory=dict)
    dropped: int = 0

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
