"""Per-device memory of a run, before it runs:

    python -m parallel_wan.plan model=wan2.2_t2v_a14b mesh=dp2_cp4 device_memory_gb=80 [memory=sharded height=… width=… num_frames=… dtype=…]

The same Hydra config and validation as `parallel_wan.run` (world size = the mesh's), the
model's architecture from its preset (or from checkpoint_dir's configs when given; no weights
are read), and the shapes the run uses: the SequenceShards token split, the CFG rows per rank,
the dtype policy of the loader. Weights are counted from the parameter list of the model
built on the meta device; the denoise forward's and the VAE decode's activations by running the
model code itself on meta tensors of one rank's shapes (`live_bytes.LiveBytes` counts what its
tensors would hold), with the sequence-parallel attention's buffers added as the kernels hold
them. Prints per device: weights, activations, text encoder, VAE decode, the peak of each
phase, and FITS / DOES NOT FIT with what to try. Exit status: 0 fits, 1 does not fit, 2 a bad
setting (one line, as the run reports it).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass

from .config import TASK_IN_CHANNELS, ConfigError, RunSpec, resolve
from .sharding import SequenceShards

GB = 1e9
# Wan 2.2's text encoder, umt5-xxl (google/umt5-xxl config), run in bf16 on the main rank.
UMT5_XXL = dict(vocab_size=256384, d_model=4096, d_kv=64, num_heads=64, d_ff=10240, num_layers=24,
                feed_forward_proj="gated-gelu", tie_word_embeddings=False)
TEXT_LEN = 512
SAMPLER_STATE = 4  # UniPC (order 2) keeps the last model outputs and the corrector's inputs: ≤ 4 token-sized fp32 arrays


# ---------------------------------------------------------------- architecture
def architecture(spec: RunSpec):
    """(TransformerConfig, VaeConfig, UMT5Config) of the run's model: from checkpoint_dir's
    configs when given, else the preset's architecture (REFERENCE.md "Models")."""
    from transformers import UMT5Config

    from .models.transformer_config import TransformerConfig
    from .models.vae_config import VaeConfig

    task = spec.model.task
    if spec.checkpoint_dir is not None:
        from .weights.layout import describe_checkpoint

        ckpt = describe_checkpoint(spec.checkpoint_dir)
        text = UMT5Config(**UMT5_XXL)
        if ckpt.text_encoder_format == "diffusers":
            text = UMT5Config.from_pretrained(str(ckpt.text_encoder_path))
        return next(iter(ckpt.transformers.values())), ckpt.vae_config, text
    if spec.model.builtin:
        from . import tiny

        vae = VaeConfig.wan2_2() if task == "ti2v" else VaeConfig.wan2_1()
        vae = dataclasses.replace(vae, **tiny._VAE_WIDTHS["wan2.2" if task == "ti2v" else "wan2.1"])
        text = UMT5Config(vocab_size=8 * math.ceil(len(tiny.build_tokenizer()) / 8), feed_forward_proj="gated-gelu",
                          tie_word_embeddings=False, **tiny._UMT5)
        return tiny.transformer_config(task), vae, text
    if task == "ti2v":  # TI2V-5B: dim 3072, ffn 14336, 24 heads, 30 layers; Wan 2.2 VAE
        tcfg = TransformerConfig(num_attention_heads=24, ffn_dim=14336, num_layers=30, in_channels=48, out_channels=48)
        return tcfg, VaeConfig.wan2_2(), UMT5Config(**UMT5_XXL)
    return TransformerConfig(in_channels=TASK_IN_CHANNELS[task]), VaeConfig.wan2_1(), UMT5Config(**UMT5_XXL)


def meta_module(build):
    import torch

    with torch.device("meta"):
        return build()


def transformer_shapes(tcfg) -> dict:
    """Diffusers name → shape of every parameter of one expert (the model built on the meta
    device: the names and shapes a checkpoint of this config holds)."""
    from diffusers import WanTransformer3DModel

    model = meta_module(lambda: WanTransformer3DModel(**tcfg.to_diffusers()))
    return {name: tuple(p.shape) for name, p in model.named_parameters()}


def _element(dtype: str) -> int:
    return 2 if dtype == "bfloat16" else 4


def tensor_bytes(name: str, shape, dtype: str) -> int:
    from .models.transformer import keeps_fp32

    return math.prod(shape) * (4 if keeps_fp32(name) else _element(dtype))


@dataclass(frozen=True)
class ExpertBytes:
    whole: int  # one expert, every tensor whole
    block: int  # one block whole (the largest)
    sharded_blocks: int  # this rank's padded dim-0 chunks of every block tensor
    rest: int  # the non-block tensors whole
    rest_chunk: int  # this rank's padded chunk of the non-block tensors (FSDP keeps it as well)


def expert_bytes(shapes: dict, dtype: str, world: int) -> ExpertBytes:
    """Byte counts of one expert on a rank of `world`. Chunks follow FSDP2: dim 0 padded to a
    multiple of the world, ceil(rows / world) rows per rank."""
    whole = block0 = sharded = rest = rest_chunk = 0
    blocks: dict[str, int] = {}
    for name, shape in shapes.items():
        full = tensor_bytes(name, shape, dtype)
        whole += full
        chunk = full if not shape else full // shape[0] * -(-shape[0] // world)
        if name.startswith("blocks."):
            sharded += chunk
            index = name.split(".")[1]
            blocks[index] = blocks.get(index, 0) + full
        else:
            rest += full
            rest_chunk += chunk
    block0 = max(blocks.values(), default=0)
    return ExpertBytes(whole, block0, sharded, rest, rest_chunk)


def weight_bytes(spec: RunSpec, eb: ExpertBytes) -> dict:
    """Device bytes of the experts per phase (encode, denoise, decode) for spec.memory."""
    experts, world = spec.model.experts, spec.mesh.world_size
    if spec.memory == "sharded" and world > 1 and spec.backend == "torch":
        kept = experts * (eb.sharded_blocks + eb.rest_chunk)
        denoise = kept + experts * eb.rest + 2 * eb.block  # block i whole + block i+1 gathering
        return {"encode": kept, "denoise": denoise, "decode": kept + experts * eb.rest,
                "note": f"sharded: 1/{world} of every block per device + non-block weights whole + 2 gathered blocks"}
    if spec.memory == "sharded" and world > 1:  # JAX: NamedSharding over every mesh axis, gathered per layer in the scan
        kept = experts * (eb.sharded_blocks + eb.rest_chunk)
        return {"encode": kept, "denoise": kept + experts * eb.rest + 2 * eb.block, "decode": kept,
                "note": f"sharded (jax_fsdp): 1/{world} of each large tensor per device, gathered per layer"}
    if spec.memory == "swap":
        return {"encode": eb.whole, "denoise": 2 * eb.whole, "decode": eb.whole,
                "note": f"swap: one expert, both during the {spec.swap_prefetch_steps} prefetch steps before the switch"}
    return {"encode": experts * eb.whole, "denoise": experts * eb.whole, "decode": experts * eb.whole,
            "note": "resident: every expert whole on every device"}


# ---------------------------------------------------------------- activations
@dataclass(frozen=True)
class RankShapes:
    tokens: int  # N: valid tokens of one video
    local: int  # Lc: tokens per rank, padding included
    rows: int  # forward rows per rank (CFG halves × prompts here)
    latent_shape: tuple


def rank_shapes(spec: RunSpec, tcfg, vcfg) -> RankShapes:
    """The shapes `pipeline.generate` / `work.plan_work` give one rank."""
    latent_frames = (spec.num_frames - 1) // vcfg.scale_factor_temporal + 1
    latent_shape = (1, tcfg.out_channels, latent_frames, spec.height // vcfg.scale_factor_spatial,
                    spec.width // vcfg.scale_factor_spatial)
    pt, ph, pw = tcfg.patch_size
    tokens = (latent_frames // pt) * (latent_shape[3] // ph) * (latent_shape[4] // pw)
    shards = SequenceShards(tokens, spec.mesh.cp)
    dp, n = spec.mesh.dp, len(spec.prompts)
    halves = 2 if spec.uses_guidance else 1
    if n == 1 and dp == 2:
        rows = 1  # CFG parallel: one half per dp rank
    else:
        rows = (n // dp) * halves
    return RankShapes(tokens, shards.local, rows, latent_shape)


def _sequence_parallel_attention(mesh, local: int):
    """A stand-in for the run's self-attention on meta tensors that holds what the kernels
    hold at their peak: Ulysses' all-to-all outputs (q, k, v with cp·Lc/ring tokens and
    H/ulysses heads, the same bytes as the inputs) and the output before its way back; ring's
    two K/V blocks in flight and the fp32 running output and log-sum-exp."""
    import torch

    def attention(q, k, v):
        held = []
        if mesh.ulysses > 1:
            held += [torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), torch.empty_like(q)]
        if mesh.ring > 1:
            held += [torch.empty_like(k), torch.empty_like(v), torch.empty_like(k), torch.empty_like(v)]
            held += [torch.empty(q.shape, dtype=torch.float32, device=q.device),
                     torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)]
        lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)  # the kernel's own log-sum-exp
        out = torch.empty_like(q)
        del held, lse
        return out

    return attention


class _FusedAttentionOps:
    """The torch ops namespace whose cross-attention keeps what a fused kernel keeps (output
    and log-sum-exp): on meta tensors SDPA takes its math path, which would count a score
    matrix no GPU or CPU flash kernel makes."""

    def __getattr__(self, name):
        from .backends.torch import ops as torch_ops

        return getattr(torch_ops, name)

    @staticmethod
    def attention(q, k, v, scale=None):
        import torch

        lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
        out = torch.empty_like(q)
        del lse
        return out


def denoise_activation_bytes(tcfg, rows: int, local: int, dtype: str, mesh=None, per_token: bool = False,
                             in_channels: int | None = None) -> int:
    """Peak activation bytes of one rank's forward: `models.transformer.forward` run on meta
    tensors of the rank's shapes (two blocks, so the carry between blocks is seen), plus the
    predictor's input and fp32 output and the sampler's state."""
    import torch

    from .backends.torch import ops as torch_ops
    from .live_bytes import LiveBytes
    from .models import transformer as dit
    from .config import MeshSpec

    mesh = mesh or MeshSpec()
    shapes = transformer_shapes(tcfg)
    tdtype = torch_ops.dtype(dtype)

    def meta(name, shape):
        return torch.empty(shape, dtype=torch.float32 if dit.keeps_fp32(name) else tdtype, device="meta")

    from .weights.tree import unflatten

    flat = {n: meta(n, s) for n, s in shapes.items() if not n.startswith("blocks.") or n.startswith("blocks.0.")}
    params = unflatten(flat)
    params["blocks"] = [params["blocks"][0]] * 2
    patch = math.prod(tcfg.patch_size)
    features_in = patch * (in_channels or tcfg.in_channels)
    x = torch.empty((rows, local, features_in), dtype=torch.float32, device="meta")
    ts = torch.empty((rows, local) if per_token else (rows,), dtype=torch.float32, device="meta")
    ctx = torch.empty((rows, tcfg.text_len, tcfg.text_dim), dtype=tdtype, device="meta")
    half = tcfg.attention_head_dim // 2
    rope = (torch.empty((local, half), dtype=torch.float32, device="meta"),) * 2
    with LiveBytes() as live:
        out = dit.forward(params, x, ts, ctx, rope, tcfg, _FusedAttentionOps(), _sequence_parallel_attention(mesh, local))
        out = torch_ops.cast(out, "float32")
        del out
    token_array = rows * local * patch * tcfg.out_channels * 4
    return live.peak + token_array * (2 + SAMPLER_STATE)


# ---------------------------------------------------------------- text encoder and VAE
def text_encoder_bytes(text_cfg, prompts: int) -> tuple[int, int]:
    """(weights, activations) of UMT5 in bf16 on the main rank; activations ≈ the widest
    layer's working set (FFN: two d_ff projections) for every prompt and the negative."""
    from transformers import UMT5EncoderModel

    model = meta_module(lambda: UMT5EncoderModel(text_cfg))
    weights = sum(p.numel() for p in model.parameters()) * 2
    rows = prompts + 1
    act = rows * TEXT_LEN * (3 * text_cfg.d_ff + 4 * text_cfg.d_model) * 2
    return weights, act


def vae_decode_bytes(vcfg, latent_shape, ranks: int) -> tuple[int, int, int]:
    """(weights, activations, bands) of the VAE decode on one rank. The decode is split over
    every rank of the job by latent rows (backends/torch/vae_decode.py, JAX: vae_codec.py), so
    one rank decodes ceil(h / ranks) rows (+ one halo row each side for its 3×3 convs).
    Activations: the model code run on meta tensors for the first and one later latent frame
    (the causal cache is full from the second on), plus the band's decoded video in fp32."""
    import torch
    from diffusers import AutoencoderKLWan

    from .backends.torch import ops as torch_ops
    from .live_bytes import LiveBytes
    from .models import vae
    from .weights.tree import unflatten

    model = meta_module(lambda: AutoencoderKLWan(**vcfg.to_diffusers()))
    weights = sum(p.numel() for p in model.parameters()) * 4  # the VAE runs in fp32
    params = unflatten({n: torch.empty(p.shape, device="meta") for n, p in model.named_parameters()})
    _, z, t, h, w = latent_shape
    bands = min(ranks, h)
    band = -(-h // bands) + (2 if bands > 1 else 0)
    latents = torch.empty((1, z, 2, band, w), device="meta")
    with LiveBytes() as live:
        frames = vae.decode(params, latents, torch_ops, vcfg)
        del frames
    video = 3 * (1 + 4 * (t - 1)) * band * vcfg.scale_factor_spatial * w * vcfg.scale_factor_spatial * 4
    return weights, live.peak + 2 * video, bands


# ---------------------------------------------------------------- the report
@dataclass
class MemoryPlan:
    spec: RunSpec
    shapes: RankShapes
    expert: ExpertBytes
    weights: dict
    activations: int
    text: tuple[int, int]
    vae: tuple[int, int, int]

    @property
    def phases(self) -> dict:
        """Peak bytes of each phase on the most loaded rank (rank 0: it also holds the text
        encoder while it encodes; the encoder is released before the loop)."""
        vae_weights, vae_act, _ = self.vae
        latents = math.prod(self.shapes.latent_shape) * 4 * len(self.spec.prompts)
        return {
            "text encode (rank 0)": self.weights["encode"] + vae_weights + sum(self.text),
            "denoise": self.weights["denoise"] + vae_weights + self.activations,
            "vae decode": self.weights["decode"] + vae_weights + vae_act + latents,
        }

    @property
    def peak(self) -> int:
        return max(self.phases.values())


def plan(spec: RunSpec) -> MemoryPlan:
    tcfg, vcfg, text_cfg = architecture(spec)
    shapes = rank_shapes(spec, tcfg, vcfg)
    eb = expert_bytes(transformer_shapes(tcfg), spec.dtype, spec.mesh.world_size)
    act = denoise_activation_bytes(tcfg, shapes.rows, shapes.local, spec.dtype, spec.mesh,
                                   per_token=spec.model.task == "ti2v")
    return MemoryPlan(spec, shapes, eb, weight_bytes(spec, eb), act, text_encoder_bytes(text_cfg, len(spec.prompts)),
                      vae_decode_bytes(vcfg, shapes.latent_shape, spec.mesh.world_size))


def _gb(n: int) -> str:
    return f"{n / GB:8.2f} GB"


def report(p: MemoryPlan, device_memory_gb: float) -> tuple[str, bool]:
    spec, s = p.spec, p.shapes
    lines = [
        f"model={spec.model.name} {spec.width}x{spec.height}x{spec.num_frames} dtype={spec.dtype} backend={spec.backend} "
        f"mesh={spec.mesh.name} (dp={spec.mesh.dp} cp={spec.mesh.cp} = ulysses {spec.mesh.ulysses} × ring {spec.mesh.ring}, "
        f"{spec.mesh.world_size} devices) memory={spec.memory}",
        f"tokens {s.tokens:,} → {s.local:,} per rank; {s.rows} forward row(s) per rank "
        f"({'CFG halves split over dp' if s.rows == 1 and spec.mesh.dp == 2 else 'prompts × CFG halves'})",
        "per device:",
        f"  one expert, whole              {_gb(p.expert.whole)}",
        f"  weights during denoise         {_gb(p.weights['denoise'])}   ({p.weights['note']})",
        f"  activations, denoise forward   {_gb(p.activations)}",
        f"  text encoder (rank 0, encode)  {_gb(p.text[0])} + {_gb(p.text[1]).strip()} activations; released before denoise",
        f"  VAE weights (fp32)             {_gb(p.vae[0])}",
        f"  VAE decode activations         {_gb(p.vae[1])}   (decode split by height over {p.vae[2]} ranks of the job)",
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
    spec = p.spec
    out = []
    if spec.memory != "sharded" and spec.mesh.world_size > 1:
        out.append("memory=sharded (weights 1/world per device)")
    if spec.memory == "resident" and spec.model.experts == 2 and spec.backend == "torch":
        out.append("memory=swap (one expert outside the prefetch window)")
    if p.activations > 0.2 * budget or p.weights["denoise"] > budget:
        out.append(f"a larger cp (more devices share the tokens: now {p.shapes.local:,} per rank)")
    if spec.dtype == "float32":
        out.append("dtype=bfloat16")
    out.append("smaller height/width/num_frames")
    return out


def main(argv: list[str]) -> int:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from .run import CONF_DIR

    overrides, budget = [], None
    for arg in argv:
        if arg.startswith("device_memory_gb="):
            budget = arg.split("=", 1)[1]
        else:
            overrides.append(arg)
    try:
        if budget is None:
            raise ConfigError("device_memory_gb is missing; give the memory of one device, e.g. device_memory_gb=80")
        try:
            budget = float(budget)
        except ValueError:
            raise ConfigError(f"device_memory_gb={budget!r} is not a number; give e.g. device_memory_gb=80") from None
        if budget <= 0:
            raise ConfigError(f"device_memory_gb={budget:g} must be positive, e.g. device_memory_gb=80")
        try:
            with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
                cfg = compose(config_name="config", overrides=overrides)
        except Exception as exc:  # Hydra's override errors (unknown group option, bad syntax)
            raise ConfigError(f"{str(exc).splitlines()[0]}") from None
        raw = OmegaConf.to_container(cfg, resolve=False)
        raw["output_dir"] = "unused"
        mesh = raw.get("mesh") or {}
        world = int(mesh.get("dp", 1)) * int(mesh.get("cp", 1)) if str(mesh.get("dp", 1)).isdigit() else 1
        spec = _planning(raw, world)
        text, fits = report(plan(spec), budget)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(text)
    return 0 if fits else 1  # scripts can branch on it; a bad setting is 2


def _planning(raw: dict, world: int) -> RunSpec:
    """`config.resolve` for planning: no weights are read, so a preset without checkpoint_dir
    is fine (its architecture is known); every other check is the run's."""
    model = dict(raw["model"])
    builtin = bool(model.get("builtin", False))
    spec = resolve({**raw, "model": {**model, "builtin": True}}, world)
    return dataclasses.replace(spec, model=dataclasses.replace(spec.model, builtin=builtin))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
