"""Per-device memory of a run, before it runs:

    python -m parallel_wan.plan model=wan2.2_t2v_a14b mesh=dp2_cp4 device_memory_gb=80 [memory=sharded height=… width=… num_frames=… dtype=…]

The same Hydra config and validation as `parallel_wan.run` (world size = the mesh's), the
model's architecture from its preset (or from checkpoint_dir's configs when given; no weights
are read), and the shapes the run uses: the SequenceShards token split, the CFG rows per rank,
the dtype policy of the loader. Prints per device: weights, the denoise loop's tensors, text
encoder, VAE decode, the peak of each phase, and FITS / DOES NOT FIT with what to try. Exit
status: 0 fits, 1 does not fit, 2 a bad setting (one line, as the run reports it).

What is counted is what `live_bytes` measures: tensor storages, at op boundaries.
- Weights: the parameter list of the model built on the meta device, in the loader's dtypes
  (equal to the loaded trees' bytes), per memory mode (`weight_bytes`).
- Denoise: the run's own code on meta tensors of rank 0's shapes — `pipeline.denoise.denoise`
  (the sampler and its state) calling `EagerNoisePredictor.__call__` (CFG concat, timesteps,
  the forward, the guidance combine) for PLAN_STEPS steps, the sequence-parallel attention's
  code with its messages left out — plus what exists before the loop (context, RoPE, noise).
- VAE decode: `models.vae.decode` and the uint8 frames on meta tensors of the whole video,
  for rank 0's band when the decode is split.
Not counted, here or by the measurement: a kernel's private scratch (CPU flash attention's
per-thread buffers, convolution workspaces, cuDNN/flash workspaces), the CUDA caching
allocator's rounding and fragmentation, the CUDA context (~0.5 GB per device), NCCL's
buffers. On CPU the figures equal the measured peaks (tests/test_plan.py: within 0.05 %);
on a GPU add those. The text encoder's activations are a rough bound (widest FFN layer).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass

from ..config import TASK_IN_CHANNELS, ConfigError, RunSpec, resolve
from ..parallel.shards import SequenceShards

GB = 1e9
# Wan 2.2's text encoder, umt5-xxl (google/umt5-xxl config), run in bf16 on the main rank.
UMT5_XXL = dict(vocab_size=256384, d_model=4096, d_kv=64, num_heads=64, d_ff=10240, num_layers=24,
                feed_forward_proj="gated-gelu", tie_word_embeddings=False)
TEXT_LEN = 512


# ---------------------------------------------------------------- architecture
def architecture(spec: RunSpec):
    """(TransformerConfig, VaeConfig, UMT5Config) of the run's model: from checkpoint_dir's
    configs when given, else the preset's architecture (REFERENCE.md "Models")."""
    from transformers import UMT5Config

    from ..models.transformer_config import TransformerConfig
    from ..models.vae_config import VaeConfig

    task = spec.model.task
    if spec.checkpoint_dir is not None:
        from ..weights.layout import describe_checkpoint

        ckpt = describe_checkpoint(spec.checkpoint_dir)
        text = UMT5Config(**UMT5_XXL)
        if ckpt.text_encoder_format == "diffusers":
            text = UMT5Config.from_pretrained(str(ckpt.text_encoder_path))
        return next(iter(ckpt.transformers.values())), ckpt.vae_config, text
    if spec.model.builtin:
        from ..builtin import tiny

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
    from ..models.transformer import keeps_fp32

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
    if spec.memory == "swap" and spec.swap_prefetch_steps == 0:
        # the last high-noise step: block i in use, the block before it not yet released by
        # the forward's loop variable, and the incoming block's copy — one expert + 2 blocks
        return {"encode": eb.whole, "denoise": eb.whole + 2 * eb.block, "decode": eb.whole,
                "note": "swap: one expert; the last high-noise step exchanges them block by block (+2 blocks)"}
    if spec.memory == "swap":
        return {"encode": eb.whole, "denoise": 2 * eb.whole, "decode": eb.whole,
                "note": f"swap: one expert, both during the {spec.swap_prefetch_steps} prefetch steps before the switch"}
    return {"encode": experts * eb.whole, "denoise": experts * eb.whole, "decode": experts * eb.whole,
            "note": "resident: every expert whole on every device"}


# ---------------------------------------------------------------- activations
PLAN_STEPS = 3  # the sampler's state is full from the third step on (UniPC: last sample and two x0)


@dataclass(frozen=True)
class RankShapes:
    tokens: int  # N: valid tokens of one video
    local: int  # Lc: tokens per rank, padding included
    rows: int  # forward rows per rank (CFG halves × prompts here)
    latent_shape: tuple
    batch: int = 1  # prompts denoised on this rank (len(work.rows))
    halves: int = 1  # CFG halves in this rank's forward (2: both here; 1: none, or CFG parallel)
    cfg_branch: int | None = None  # CFG parallel over dp: this rank's half


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
    if n == 1 and dp == 2:  # CFG parallel (work.plan_work): one half per dp rank
        return RankShapes(tokens, shards.local, 1, latent_shape, 1, 1, 0)
    batch = max(1, n // dp)
    return RankShapes(tokens, shards.local, batch * halves, latent_shape, batch, halves, None)


def _kernel_with_lse(q, k, v, valid_keys=None, scale=None):
    """`attention.attention_with_lse` on meta tensors: what the fused kernels return, the
    output and the log-sum-exp (B, S, H) in at least fp32 (the padded keys sliced off, as
    there). On meta, SDPA would take its math path and count a score matrix no kernel makes."""
    import torch

    from ..backends.torch.attention import lse_dtype

    lse = torch.empty(q.shape[:3], dtype=lse_dtype(q.dtype), device=q.device)
    return torch.empty_like(q), lse


def _sequence_parallel_attention(mesh, valid: int, local: int):
    """The run's self-attention for rank 0 of `mesh` (`sequence_parallel.make_self_attention`:
    Ulysses' all-to-alls, then `ring.ring_attention`) run on meta tensors: the same code, so
    the same buffers (the stacked and permuted sends, the receive buffers, the ring's K‖V
    blocks and its fp32 running output), with the messages left out and the kernel standing
    for its outputs (`_kernel_with_lse`)."""
    from unittest import mock

    def one_device(q, k, v):
        out, lse = _kernel_with_lse(q, k, v, valid_keys=valid if valid < local else None)
        del lse
        return out

    if mesh.cp == 1:
        return one_device
    from ..backends.torch import ring, ulysses

    peers = ring.RingPeers(mesh.ring, 0, 0, 0, None)

    def attention(q, k, v):
        with mock.patch.object(ulysses.dist, "all_to_all_single", lambda *args, **kwargs: None), \
                mock.patch.object(ring, "start_pass", lambda send, recv, peers: []), \
                mock.patch.object(ring, "attention_with_lse", _kernel_with_lse):
            if mesh.ulysses > 1:
                q, k, v = ulysses.sequence_to_heads((q, k, v), None, mesh.ulysses)
            out = ring.ring_attention(q, k, v, peers, valid_keys=valid)
            return ulysses.heads_to_sequence(out, None, mesh.ulysses) if mesh.ulysses > 1 else out

    return attention


class _FusedAttentionOps:
    """The torch ops namespace whose cross-attention keeps what a fused kernel keeps (output
    and log-sum-exp): on meta tensors SDPA takes its math path, which would count a score
    matrix no GPU or CPU flash kernel makes."""

    def __getattr__(self, name):
        from ..backends.torch import ops as torch_ops

        return getattr(torch_ops, name)

    @staticmethod
    def attention(q, k, v, scale=None):
        import torch

        lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
        out = torch.empty_like(q)
        del lse
        return out


def _meta_expert(tcfg, dtype: str):
    """The expert's param tree on the meta device with two blocks (the carry between blocks
    is seen; later blocks repeat the second's peak)."""
    import torch

    from ..backends.torch import ops as torch_ops
    from ..models import transformer as dit
    from ..weights.tree import unflatten

    tdtype = torch_ops.dtype(dtype)
    flat = {n: torch.empty(s, dtype=torch.float32 if dit.keeps_fp32(n) else tdtype, device="meta")
            for n, s in transformer_shapes(tcfg).items() if not n.startswith("blocks.") or n.startswith("blocks.0.")}
    params = unflatten(flat)
    params["blocks"] = [params["blocks"][0]] * 2
    return params


@dataclass(frozen=True)
class DenoiseBytes:
    held: int  # made before the loop and kept through it: the text context (every prompt and the
    #            negative) and the rank's guidance rows, the RoPE tables, I2V condition tokens,
    #            the initial noise (generate keeps it)
    loop: int  # peak of what the loop's ops hold: the sample, the sampler's state, the previous
    #            prediction, the predictor's CFG concat and timesteps, the forward's activations
    #            and its fp32 output, the guidance combine

    @property
    def total(self) -> int:
        return self.held + self.loop


def denoise_bytes(spec: RunSpec, tcfg, shapes: RankShapes) -> DenoiseBytes:
    """The denoise phase's tensors beside the weights on one rank: `pipeline.denoise.denoise`
    (the sampler) and `EagerNoisePredictor.__call__` (CFG rows, timesteps, the forward, the
    guidance combine) run for PLAN_STEPS steps on meta tensors of the rank's shapes, the
    self-attention standing in for the sequence-parallel kernels' buffers."""
    import functools
    from types import SimpleNamespace

    import torch

    from ..backends.torch import ops as torch_ops
    from ..backends.torch.predictor import EagerNoisePredictor, guidance_context
    from ..measure.live_bytes import LiveBytes, held_bytes
    from ..pipeline.checkpoint import HIGH, LOW, SINGLE
    from ..pipeline.denoise import denoise
    from ..sampling import make_schedule

    tdtype = torch_ops.dtype(spec.dtype)
    params = _meta_expert(tcfg, spec.dtype)
    patch = math.prod(tcfg.patch_size)
    n = len(spec.prompts)

    def meta(shape, dtype=torch.float32):
        return torch.empty(shape, dtype=dtype, device="meta")

    work = SimpleNamespace(rows=tuple(range(shapes.batch)), cfg_branch=shapes.cfg_branch)
    context = meta((n + 1, tcfg.text_len, tcfg.text_dim), tdtype)  # generate casts it to the run's dtype
    rows_context, _ = guidance_context(context, work, n, spec.uses_guidance, torch_ops)
    half = tcfg.attention_head_dim // 2
    rope = (meta((shapes.local, half)), meta((shapes.local, half)))
    cond_tokens = timestep_mask = None
    extra_channels = tcfg.in_channels - tcfg.out_channels
    if extra_channels:  # I2V: the condition's channels, joined to the noise tokens
        task_cond = meta((1, shapes.local, patch * extra_channels))
        cond_tokens = torch_ops.concat([task_cond] * shapes.batch, axis=0)
    if spec.model.task == "ti2v" and spec.image is not None:
        timestep_mask = meta((1, shapes.local))
    predictor = SimpleNamespace(
        ops=_FusedAttentionOps(), context=rows_context, halves=shapes.halves, rope=rope, cond_tokens=cond_tokens,
        timestep_mask=timestep_mask, compiler=None,  # the resident block runner
        attention=_sequence_parallel_attention(spec.mesh, shapes.tokens, shapes.local),
        backend=SimpleNamespace(exchange_dp=lambda out: [out, torch.empty_like(out)]),  # the other half arrives
        task=SimpleNamespace(experts={name: (tcfg, params) for name in (HIGH, LOW, SINGLE)}, work=work,
                             per_token_timestep=spec.model.task == "ti2v", uses_guidance=spec.uses_guidance))
    predict = functools.partial(EagerNoisePredictor.__call__, predictor)
    x = meta((shapes.batch, shapes.local, patch * tcfg.out_channels))
    held = held_bytes(context, rows_context, rope, cond_tokens, timestep_mask, x)
    if cond_tokens is not None:
        held += held_bytes(task_cond)
    loop_spec = dataclasses.replace(spec, memory="resident")  # weight moves are counted in weight_bytes
    # Under inference mode, as the run (backend.inference_mode()): outside it the ops dispatch
    # differently (linear → t + addmm, the norms decomposed) and the tiny model's loop counted
    # 30 % more than the run holds.
    with torch.inference_mode(), LiveBytes() as live:
        out = denoise(loop_spec, make_schedule("official", PLAN_STEPS, spec.shift), x, predict, lambda it: it,
                      torch_ops)
        del out
    return DenoiseBytes(held, live.peak)


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


class _MetaBandOps:
    """`vae_decode.HeightBandOps` for rank 0 of a split decode on meta tensors: the same
    tensors (halo rows made contiguous, the received rows, the concatenation; attention's
    padded K‖V and every rank's gathered copy), no messages."""

    def __init__(self, band_rows: list[int]):
        self.band_rows = band_rows

    def __getattr__(self, name):
        from ..backends.torch import ops as torch_ops

        return getattr(torch_ops, name)

    def _halo(self, x, padding):
        import torch

        axis, rows = x.ndim - 2, padding[-2]
        if rows == 0:
            return x, padding
        first = x.narrow(axis, 0, rows).contiguous()
        last = x.narrow(axis, x.shape[axis] - rows, rows).contiguous()
        from_above, from_below = torch.zeros_like(first), torch.zeros_like(last)
        del first, last
        return torch.cat([from_above, x, from_below], dim=axis), (*padding[:-2], 0, padding[-1])

    def conv3d(self, x, w, b=None, stride=(1, 1, 1), padding=(0, 0, 0)):
        from ..backends.torch import ops as torch_ops

        x, padding = self._halo(x, padding)
        return torch_ops.conv3d(x, w, b, stride=stride, padding=padding)

    def conv2d(self, x, w, b=None, stride=(1, 1), padding=(0, 0)):
        from ..backends.torch import ops as torch_ops

        x, padding = self._halo(x, padding)
        return torch_ops.conv2d(x, w, b, stride=stride, padding=padding)

    def attention(self, q, k, v, scale=None):
        import torch

        per_row = q.shape[1] // self.band_rows[0]
        counts = [rows * per_row for rows in self.band_rows]
        kv = torch.cat([k, v], dim=-1)
        padded = torch.nn.functional.pad(kv, (0, 0, 0, 0, 0, max(counts) - kv.shape[1])).contiguous()
        parts = [torch.empty_like(padded) for _ in counts]
        del kv, padded
        kv = torch.cat([part[:, :count] for part, count in zip(parts, counts)], dim=1)
        del parts
        k, v = kv.split(k.shape[-1], dim=-1)
        return _FusedAttentionOps.attention(q, k, v, scale)


@dataclass(frozen=True)
class VaeBytes:
    weights: int  # the VAE in fp32
    held: int  # the latents of every prompt (fp32), which the decoder reads
    peak: int  # what the decode's ops hold at once (rank 0: also the received bands)
    bands: int  # ranks the decode is split over


def vae_decode_bytes(vcfg, latent_shape, prompts: int, ranks: int) -> VaeBytes:
    """The VAE decode on rank 0: `models.vae.decode` (one latent frame per call, the causal
    time cache) and the uint8 frames, run on meta tensors of the whole video; split over every
    rank of the job by latent rows (backends/torch/vae_decode.py; JAX: vae_codec.py) when the
    job has several, rank 0 holding the largest band and receiving the others' uint8 bands."""
    import torch
    from diffusers import AutoencoderKLWan

    from ..backends.torch import ops as torch_ops
    from ..backends.torch.vae_decode import height_bands
    from ..report.frames import to_uint8_frames
    from ..measure.live_bytes import LiveBytes
    from ..models import vae
    from ..weights.tree import unflatten

    model = meta_module(lambda: AutoencoderKLWan(**vcfg.to_diffusers()))
    weights = sum(p.numel() for p in model.parameters()) * 4  # the VAE runs in fp32
    params = unflatten({n: torch.empty(p.shape, device="meta") for n, p in model.named_parameters()})
    _, z, t, h, w = latent_shape
    latents = torch.empty((prompts, z, t, h, w), device="meta")
    bands = height_bands(h, ranks)
    band_ops = torch_ops if len(bands) == 1 else _MetaBandOps([b - a for a, b in bands])
    start, stop = bands[0]
    with torch.inference_mode(), LiveBytes() as live:
        for row in range(prompts):
            zrow = vae.denormalize_latents(latents[row : row + 1, :, :, start:stop], vcfg, torch_ops)
            frames = to_uint8_frames(vae.decode(params, zrow, band_ops, vcfg), torch_ops).contiguous()
            if len(bands) > 1:  # rank 0 receives the other bands, then concatenates
                others = [torch.empty((frames.shape[0], (b - a) * frames.shape[1] // (stop - start), *frames.shape[2:]),
                                      dtype=frames.dtype, device="meta") for a, b in bands[1:]]
                torch.cat([frames, *others], dim=1)  # the whole video, held until it goes to the host
                del others
            del zrow, frames
    return VaeBytes(weights, latents.numel() * 4, live.peak, len(bands))


# ---------------------------------------------------------------- the report
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
    eb = expert_bytes(transformer_shapes(tcfg), spec.dtype, spec.mesh.world_size)
    dn = denoise_bytes(spec, tcfg, shapes)
    prompts = len(spec.prompts)
    # generate keeps, while the VAE decodes: the predictor (context, RoPE tables, condition)
    # and the initial noise (dn.held), the loop's final sample, and off a single process the
    # gathered tokens of every prompt (fp32; one process slices the final sample instead).
    token_features = math.prod(tcfg.patch_size) * tcfg.out_channels
    kept = dn.held + shapes.batch * shapes.local * token_features * 4
    if spec.mesh.world_size > 1:
        kept += prompts * shapes.tokens * token_features * 4
    return MemoryPlan(spec, shapes, eb, weight_bytes(spec, eb), dn, text_encoder_bytes(text_cfg, prompts),
                      vae_decode_bytes(vcfg, shapes.latent_shape, prompts, spec.mesh.world_size), kept)


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
        f"  activations, denoise loop      {_gb(p.denoise.loop)}   (+ {_gb(p.denoise.held).strip()} context, RoPE, noise)",
        f"  text encoder (rank 0, encode)  {_gb(p.text[0])} + {_gb(p.text[1]).strip()} activations; released before denoise",
        f"  VAE weights (fp32)             {_gb(p.vae.weights)}",
        f"  VAE decode activations         {_gb(p.vae.peak)}   (decode split by height over {p.vae.bands} ranks of the job)",
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
        out.append("memory=swap (one expert on the device; exchanged block by block at the switch)")
    if p.activations > 0.2 * budget or p.weights["denoise"] > budget:
        out.append(f"a larger cp (more devices share the tokens: now {p.shapes.local:,} per rank)")
    if spec.dtype == "float32":
        out.append("dtype=bfloat16")
    out.append("smaller height/width/num_frames")
    return out


def main(argv: list[str]) -> int:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from ..run import CONF_DIR

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
