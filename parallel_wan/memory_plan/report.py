"""The memory plan of a run: every phase's peak per device, the printed report and what to try
when it does not fit."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..backends.capabilities import capabilities
from ..config import RunSpec
from ..models.latent import decoded_shape
from ..report.words import counted
from .architecture import architecture, transformer_shapes
from .audio_encoder_bytes import audio_encoder_bytes
from .denoise_bytes import DenoiseBytes, RankShapes, denoise_bytes, rank_shapes
from .image_encoder_bytes import image_encoder_bytes
from .text_encoder_bytes import text_encoder_bytes
from .vae_bytes import VaeBytes, vae_decode_bytes
from .weight_bytes import ExpertBytes, expert_bytes, weight_bytes

GB = 1e9


@dataclass
class MemoryPlan:
    spec: RunSpec
    shapes: RankShapes
    expert: ExpertBytes
    weights: dict
    denoise: DenoiseBytes
    text: tuple[int, int]
    vae: VaeBytes
    kept_for_decode: int  # what generate still holds while it decodes (see `plan`)

    @property
    def activations(self) -> int:
        return self.denoise.total

    @property
    def phases(self) -> dict:
        """Peak bytes of each phase on the most loaded rank (rank 0: it also holds the text
        encoder while it encodes; the encoder is released before the loop)."""
        vae = self.vae
        return {
            "text encode (rank 0)": self.weights["encode"] + vae.weights + sum(self.text),
            "denoise": self.weights["denoise"] + vae.weights + self.denoise.total,
            "vae decode": self.weights["decode"] + vae.weights + vae.held + vae.peak + self.kept_for_decode,
        }

    @property
    def peak(self) -> int:
        return max(self.phases.values())


def plan(spec: RunSpec) -> MemoryPlan:
    tcfg, vcfg, text_cfg = architecture(spec)
    shapes = rank_shapes(spec, tcfg, vcfg)
    eb = expert_bytes(transformer_shapes(tcfg), spec.execution.dtype, spec.mesh.world_size, spec.quantization.quantize)
    dn = denoise_bytes(spec, tcfg, shapes, vcfg)
    prompts = len(spec.video.prompts)
    # generate keeps, while the VAE decodes: the predictor (context, RoPE tables, condition)
    # and the initial noise (dn.held), the loop's final sample, and off a single process the
    # gathered tokens of every prompt (fp32; one process slices the final sample instead).
    token_features = math.prod(tcfg.patch_size) * tcfg.out_channels
    kept = dn.held + shapes.batch * shapes.local * token_features * 4
    if spec.mesh.world_size > 1:
        kept += prompts * shapes.tokens * token_features * 4
    return MemoryPlan(
        spec,
        shapes,
        eb,
        weight_bytes(spec, eb),
        dn,
        _encoders(spec, text_encoder_bytes(text_cfg, prompts, spec.uses_guidance)),
        vae_decode_bytes(
            vcfg,
            decoded_shape(tcfg, shapes.latent_shape, spec.model.variant.reference_frames),
            prompts,
            spec.mesh.world_size,
        ),
        kept,
    )


def _encoders(spec, text: tuple[int, int]) -> tuple[int, int]:
    """The main rank's encoders while they encode: the text encoder's, and Animate's CLIP image
    encoder's or S2V's wav2vec2 beside it (loaded together, released together)."""
    image, audio = image_encoder_bytes(spec), audio_encoder_bytes(spec)
    return text[0] + image[0] + audio[0], text[1] + image[1] + audio[1]


def _encoders_line(spec) -> str:
    if image_encoder_bytes(spec)[0]:
        return "encoders: text + CLIP, rank 0"
    if audio_encoder_bytes(spec)[0]:
        return "encoders: text + wav2vec2"
    return "text encoder (rank 0, encode)"


def _gb(n: int) -> str:
    return f"{n / GB:8.2f} GB"


def report(p: MemoryPlan, device_memory_gb: float) -> tuple[str, bool]:
    spec, s = p.spec, p.shapes
    lines = [
        f"model={spec.model.name} {spec.video.width}x{spec.video.height}x{spec.video.num_frames} "
        f"dtype={spec.execution.dtype} backend={spec.execution.backend} "
        f"mesh={spec.mesh.name} (dp={spec.mesh.dp} cp={spec.mesh.cp} = ulysses {spec.mesh.ulysses} × ring "
        f"{spec.mesh.ring}, "
        f"{counted(spec.mesh.world_size, 'device')}) memory={spec.memory.mode}",
        f"tokens {s.tokens:,} → {s.local:,} per rank; {s.rows} forward row(s) per rank "
        f"({'CFG halves split over dp' if s.cfg_branch is not None else 'prompts × CFG halves'})",
        "per device:",
        f"  one expert, whole              {_gb(p.expert.whole)}",
        f"  weights during denoise         {_gb(p.weights['denoise'])}   ({p.weights['note']})",
        f"  a LoRA switch (lora_dir=)      {_gb(p.weights['denoise'])}   read again from the page cache: the "
        "experts loaded with the job's LoRAs",
        f"  activations, denoise loop      {_gb(p.denoise.loop)}   (+ {_gb(p.denoise.held).strip()} context, RoPE, "
        "noise"
        f"{', step cache' if p.spec.cache.on else ''})",
        f"  {_encoders_line(spec):<29}  "
        f"{_gb(p.text[0])} + {_gb(p.text[1]).strip()} activations; released before denoise",
        f"  VAE weights (fp32)             {_gb(p.vae.weights)}",
        f"  VAE decode activations         {_gb(p.vae.peak)}   (decode split by height over "
        f"{counted(p.vae.bands, 'rank')} of the job)",
        "peak per phase:",
    ]
    for phase, value in p.phases.items():
        lines.append(f"  {phase:<30} {_gb(value)}")
    budget = device_memory_gb * GB
    fits = p.peak <= budget
    lines.append(f"peak {_gb(p.peak).strip()} of {device_memory_gb:g} GB: {'FITS' if fits else 'DOES NOT FIT'}")
    if not fits:
        lines.append("try: " + "; ".join(suggestions(p, budget)))
    return "\n".join(lines), fits


def suggestions(p: MemoryPlan, budget: float) -> list[str]:
    """What to try, for what takes the memory: the weights (sharded, swap, quantized), the
    loop's activations (a larger cp), the VAE decode (more ranks split it by height)."""
    spec = p.spec
    out = []
    weighty = p.weights["denoise"] > 0.25 * budget
    if weighty and spec.memory.mode != "sharded" and spec.mesh.world_size > 1:
        out.append("memory=sharded (weights 1/world per device)")
    swappable = spec.model.experts == 2 and capabilities(spec.execution.backend).swap
    if weighty and spec.memory.mode == "resident" and swappable:
        out.append("memory=swap (one expert on the device; exchanged block by block at the switch)")
    if weighty and spec.quantization.quantize == "none":
        # block linears at one byte per weight (+ a float32 scale per row) instead of bf16's two
        out.append(
            "quantize=fp8 or quantize=int8 (the block weights at 1 byte each, about half of bf16's), or "
            'quantize=nvfp4 (0.56 bytes each, backend=torch; README "Quantized weights")'
        )
    if p.activations > 0.2 * budget or p.weights["denoise"] > budget:
        out.append(f"a larger cp (more devices share the tokens: now {p.shapes.local:,} per rank)")
    phases = p.phases
    if max(phases, key=phases.get) == "vae decode" and p.vae.peak > 0.2 * budget:
        out.append(f"more devices (the VAE decode is split by height over every rank of the job: now {p.vae.bands})")
    if spec.execution.dtype == "float32":
        out.append("dtype=bfloat16")
    out.append("smaller height/width/num_frames")
    return out
