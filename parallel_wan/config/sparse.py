"""Block-sparse self-attention (README "Sparse attention"), checked before anything loads (no
torch import):

    sparse=none|radial|svg     radial: Radial Attention's static spatiotemporal mask (Li et al.
                               2025; parallel/radial_mask.py) — each frame sees its neighbours
                               whole, farther frames through a band that halves as the distance
                               doubles, and frame 0 (a sink); training-free, so it changes the video
                               svg: Sparse-VideoGen's (Xi et al. 2025; parallel/svg_mask.py) — per
                               layer and head, a few sampled queries decide whether the head is
                               spatial (a band around its own frame) or temporal (the same place
                               in every frame: its tokens reordered), and both run one band mask
    sparse_dense_steps=11      the first steps run dense (Radial's Wan 2.2 script: 11 of 40)
    sparse_dense_layers=1      and every step's first blocks (Radial's dense_layers; Wan 2.2: 1)
    sparse_decay_factor=0.8    Radial's decay_factor: scales the far frames' band (Wan 2.2: 0.8;
                               their Wan 2.1 script: 0.2); larger is denser
    sparse_density=0.3         svg: the fraction of query-key pairs the band keeps (SVG's
                               `sparsity`, which is the fraction kept; their Wan 720p scripts: 0.3)
    sparse_block=64            tokens per mask block and per kernel tile (Radial's Wan 2.2: 64;
                               Wan 2.1: 128)

Refused where it cannot run: on JAX (the kernel is the PyTorch backend's), with xDiT's sequence
parallelism (its own attention), on Animate and S2V (their segment loops build no mask), and
when sparse_dense_steps leaves no sparse step; svg also on a ring (it reorders a head's whole
sequence, which a ring splits: Ulysses holds whole sequences and serves it). The sparse_*
settings without the sparse= that reads them are refused too: they would change nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from ..backends.capabilities import capabilities
from ..errors import ConfigError
from ..models.registry import architecture

KINDS = ("none", "radial", "svg")
BLOCKS = (16, 32, 64, 128)  # a tl.dot tile is at least 16; 128 is Radial's Wan 2.1 block
# conf/config.yaml's values
DEFAULTS = {
    "sparse": "none",
    "sparse_dense_steps": 11,
    "sparse_dense_layers": 1,
    "sparse_decay_factor": 0.8,
    "sparse_density": 0.3,
    "sparse_block": 64,
}
# the settings only one kind reads (the others are shared)
OWN = {"radial": ("sparse_decay_factor",), "svg": ("sparse_density",)}


@dataclass(frozen=True)
class SparseSettings:
    kind: str  # none | radial | svg
    dense_steps: int  # the first steps the loop runs dense
    dense_layers: int  # the first blocks of every step that run dense
    decay_factor: float  # radial
    block: int
    density: float = DEFAULTS["sparse_density"]  # svg

    @property
    def on(self) -> bool:
        return self.kind != "none"

    def settings(self) -> dict:
        """Every sparse_* setting under its command-line name."""
        return {
            "sparse": self.kind,
            "sparse_dense_steps": self.dense_steps,
            "sparse_dense_layers": self.dense_layers,
            "sparse_decay_factor": self.decay_factor,
            "sparse_density": self.density,
            "sparse_block": self.block,
        }

    def record(self) -> dict:
        """The settings this kind reads (the sidecar, the result keys: a radial run's are the
        names it had before svg existed)."""
        others = {key for kind, keys in OWN.items() if kind != self.kind for key in keys}
        return {key: value for key, value in self.settings().items() if key not in others}


NO_SPARSE = SparseSettings(
    "none",
    DEFAULTS["sparse_dense_steps"],
    DEFAULTS["sparse_dense_layers"],
    DEFAULTS["sparse_decay_factor"],
    DEFAULTS["sparse_block"],
)


def sparse_settings(cfg: Mapping, backend: str, sequence_parallel: str) -> SparseSettings:
    kind = _value(cfg, "sparse")
    if kind not in KINDS:
        raise ConfigError(f"sparse={kind!r} is not known; choose one of: {', '.join(KINDS)}", setting="sparse")
    dense_steps = _count(cfg, "sparse_dense_steps", "steps")
    dense_layers = _count(cfg, "sparse_dense_layers", "blocks")
    decay = _value(cfg, "sparse_decay_factor")
    if isinstance(decay, bool) or not isinstance(decay, int | float) or not math.isfinite(decay) or decay <= 0:
        raise ConfigError(
            f"sparse_decay_factor={decay!r} is not a positive number; set e.g. sparse_decay_factor=0.8 "
            "(Radial Attention's decay_factor; larger is denser)",
            setting="sparse_decay_factor",
        )
    block = _value(cfg, "sparse_block")
    if block not in BLOCKS or isinstance(block, bool):
        raise ConfigError(
            f"sparse_block={block!r} is not a block size the kernel tiles by; choose one of: "
            f"{', '.join(map(str, BLOCKS))} (Radial's Wan 2.2 uses 64)",
            setting="sparse_block",
        )
    density = _value(cfg, "sparse_density")
    if isinstance(density, bool) or not isinstance(density, int | float) or not 0 < density < 1:
        raise ConfigError(
            f"sparse_density={density!r} is not a fraction between 0 and 1; set e.g. sparse_density=0.3 "
            "(the fraction of query-key pairs sparse=svg's band keeps; larger is denser)",
            setting="sparse_density",
        )
    settings = SparseSettings(kind, dense_steps, dense_layers, float(decay), block, float(density))
    for key, value in settings.settings().items():
        readers = [k for k, keys in OWN.items() if key in keys] or [k for k in KINDS if k != "none"]
        if key != "sparse" and kind not in readers and value != DEFAULTS[key]:
            raise ConfigError(
                f"{key}={value} shapes {' or '.join(f'sparse={k}' for k in readers)} but sparse={kind}; "
                f"add sparse={readers[0]} or drop {key}",
                setting=(key, "sparse"),
            )
    if kind == "none":
        return NO_SPARSE
    if not capabilities(backend).attention_kernels:
        raise ConfigError(
            f"sparse={kind} is the PyTorch backend's block-sparse kernel but backend={backend}; "
            "use backend=torch, or sparse=none",
            setting=("sparse", "backend"),
        )
    if sequence_parallel == "xfuser":
        raise ConfigError(
            f"sparse={kind} runs in our sequence parallelism but sequence_parallel=xfuser runs xDiT's attention; "
            "use sequence_parallel=ours, or sparse=none",
            setting=("sparse", "sequence_parallel"),
        )
    return settings


def check_sparse_run(spec) -> None:
    """What the whole spec decides: a segmented model, a ring under svg, or no sparse step left."""
    sparse = spec.sparse_attention
    if not sparse.on:
        return
    if sparse.kind == "svg" and spec.mesh.ring > 1:
        raise ConfigError(
            f"sparse=svg reorders each temporal head's whole sequence, but mesh={spec.mesh.name} splits it over a "
            f"ring of {spec.mesh.ring}; use Ulysses for the sequence (mesh.ulysses={spec.mesh.cp}, mesh.ring=1: "
            "each rank holds whole sequences of some heads), or sparse=radial",
            setting=("sparse", "mesh"),
        )
    if spec.video.animate is not None or spec.video.s2v is not None:
        raise ConfigError(
            f"sparse={sparse.kind} builds its mask for one denoising loop, but model={spec.model.name} runs "
            "segment by segment; use sparse=none",
            setting=("sparse", "model"),
        )
    layers = architecture(spec.model.architecture).transformer.num_layers
    if sparse.dense_layers >= layers:
        raise ConfigError(
            f"sparse={sparse.kind} with sparse_dense_layers={sparse.dense_layers} keeps all {layers} blocks of "
            f"model={spec.model.name} dense; set sparse_dense_layers below {layers} (Radial's: 1), or sparse=none",
            setting=("sparse_dense_layers", "model"),
        )
    steps = spec.sampling.steps
    runs = int(steps * spec.video.strength) if spec.video.video is not None else steps  # video-to-video: the last ones
    if sparse.dense_steps >= runs:
        ran = f"steps={steps}" if runs == steps else f"the {runs} steps strength={spec.video.strength} runs"
        raise ConfigError(
            f"sparse={sparse.kind} with sparse_dense_steps={sparse.dense_steps} runs all {ran} dense; set "
            f"sparse_dense_steps={runs // 4} (below the steps run), or sparse=none",
            setting=("sparse_dense_steps", "steps"),
        )


def _count(cfg: Mapping, key: str, what: str) -> int:
    value = _value(cfg, key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(
            f"{key}={value!r} is not a count of {what}; set a whole number ≥ 0, e.g. {key}={DEFAULTS[key]} "
            f"(the first {what} run dense)",
            setting=key,
        )
    return value


def _value(cfg: Mapping, key: str):
    if key not in cfg:
        raise ConfigError(
            f"{key} is missing from the settings; compose them with parallel_wan.config.compose "
            "(conf/config.yaml holds every default)"
        )
    return cfg[key]
