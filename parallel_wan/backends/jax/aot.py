"""Ahead-of-time compilation for a TPU slice this process does not have.

libtpu describes a TPU slice by name ("v5p:2x2x2", "v6e:2x4") as compile-only devices; XLA:TPU
and Mosaic (splash attention's Pallas kernels) then compile for them on any host, CPU-only
included. This module builds the run's mesh from those devices and compiles the run's own
programs — `predictor.make_step` (both experts' denoising step, CFG pair inside, splash
attention under `shard_map`) and `vae_codec.decode_program` (the VAE decode split by height)
— against abstract arguments (`jax.ShapeDtypeStruct`s carrying the run's shardings), so no
weight or activation is ever allocated. XLA's memory analysis of the result gives the bytes
each chip would hold.

The abstract arguments mirror what the run hands the programs (`JaxNoisePredictor._inputs`,
`JaxVideoDecoder.compile`, `placement.place`); tests/gpu/test_tpu_aot.py checks them against the
real predictor's arrays so the two cannot drift apart.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from ...models import latent, s2v_tokens, transformer as dit
from ...models.registry import architecture
from ...parallel.shards import SequenceShards
from ...report.words import counted
from . import compile_cache, ops, placement, target_platform
from .predictor import S2V_SPECS, SEGMENT_SPECS, STEP_NAME, make_step
from .sequence_parallel import AXES, CP, build_mesh
from .vae_codec import decode_program, height_split

PLATFORM = "tpu"


def topology_devices(topology: str) -> list:
    """The compile-only devices of a TPU slice named as libtpu names them ("v5p:2x2x2",
    "v6e:2x4", "v5e:2x4": generation, then chips per axis). Needs the libtpu package."""
    from jax.experimental import topologies

    try:
        return list(topologies.get_topology_desc(platform=PLATFORM, topology_name=topology).devices)
    except (ImportError, RuntimeError) as exc:
        raise RuntimeError(
            f"cannot describe TPU topology {topology!r} ({str(exc).splitlines()[0]}); "
            "compiling for a TPU without one needs `pip install libtpu` (jax[tpu]'s pin) "
            "and a name like v5p:2x2x2 or v6e:2x4"
        ) from exc


# ---------------------------------------------------------------- abstract arguments
def abstract_params(flat_shapes: dict, dtype_of, sharding_of, scanned=placement.SCANNED):
    """The param tree `placement.place` would make from a checkpoint with these flat names →
    shapes, as ShapeDtypeStructs: each scanned run ("blocks.<i>.…") stacked along a leading
    layer axis, `dtype_of(name)` per leaf (name as placement passes keep_fp32: "blocks.0.…"
    for a stacked leaf) and `sharding_of(shape, stacked)` per leaf."""
    from ...weights.tree import unflatten

    layers: dict = {}
    leaves = {}
    for name, shape in flat_shapes.items():
        top, _, rest = name.partition(".")
        index, _, inner = rest.partition(".")
        if top in scanned and index.isdigit():
            layers.setdefault(top, {}).setdefault(inner, {})[int(index)] = tuple(shape)
            continue
        leaves[name] = jax.ShapeDtypeStruct(tuple(shape), dtype_of(name), sharding=sharding_of(tuple(shape), False))
    for top, by_leaf in layers.items():
        count = 1 + max(i for per_layer in by_leaf.values() for i in per_layer)
        for inner, per_layer in by_leaf.items():
            shapes = {per_layer.get(i) for i in range(count)}
            if len(shapes) != 1:
                raise ValueError(
                    f"{top}.<i>.{inner} differs between layers ({sorted(map(str, shapes))}); "
                    "the layers of a scanned run must be uniform"
                )
            shape = (count,) + shapes.pop()
            leaves[f"{top}.{inner}"] = jax.ShapeDtypeStruct(
                shape, dtype_of(f"{top}.0.{inner}"), sharding=sharding_of(shape, True)
            )
    return unflatten(leaves)


def _placed(flat_shapes: dict, mesh: Mesh, dtype_of, fsdp: bool):
    """As `JaxBackend.place` puts a tree on the run's mesh: replicated, or with fsdp each
    large leaf sharded over every mesh axis (`placement.fsdp_spec`)."""

    def sharding_of(shape, stacked):
        return NamedSharding(mesh, placement.fsdp_spec(shape, mesh, AXES, stacked) if fsdp else P())

    return abstract_params(flat_shapes, dtype_of, sharding_of)


def transformer_params(flat_shapes: dict, mesh: Mesh, dtype: str, fsdp: bool, quantize: str = "none"):
    """One expert as the loader places it: `dtype` except diffusers' fp32 modules; with
    quantize=fp8|int8 each block linear's weight in one byte and its float32 scale (rows, 1)
    beside it (weights/quantized/), as `placement.place` keeps them."""
    if quantize == "none":
        return _placed(flat_shapes, mesh, lambda n: ops.dtype("float32" if dit.keeps_fp32(n) else dtype), fsdp)
    from ...weights.quantized.names import is_scale, quantizable, scale_name

    shapes = dict(flat_shapes)
    shapes.update({scale_name(n): (s[0], 1) for n, s in flat_shapes.items() if quantizable(n)})
    stored = {"fp8": jnp.float8_e4m3fn, "int8": jnp.int8}[quantize]

    def dtype_of(name):
        if quantizable(name):
            return stored
        return jnp.float32 if is_scale(name) or dit.keeps_fp32(name) else ops.dtype(dtype)

    return _placed(shapes, mesh, dtype_of, fsdp)


def vae_params(flat_shapes: dict, mesh: Mesh, fsdp: bool):
    """The VAE as the loader places it on the run's mesh: float32."""
    return _placed(flat_shapes, mesh, lambda n: jnp.float32, fsdp)


def _struct(shape, dtype: str, mesh: Mesh, spec: P):
    return jax.ShapeDtypeStruct(tuple(shape), ops.dtype(dtype), sharding=NamedSharding(mesh, spec))


@dataclass(frozen=True)
class StepShapes:
    """What the step's trace depends on besides the weights: the single controller's work."""

    tokens: int  # N, valid tokens of one video
    cp: int
    prompts: int
    uses_guidance: bool
    per_token_timestep: bool  # TI2V
    cond_channels: int  # I2V: the condition's channels per token (0 otherwise)
    held_frames: bool = False  # TI2V with an image: the step takes the timestep mask of the held tokens
    # Animate: the step also takes each row's pose, image and face tokens and each token's frame
    # (JaxNoisePredictor._segment_inputs): (image tokens, latent frames with the reference's,
    # face tokens a frame); None otherwise
    segment: tuple[int, int, int] | None = None
    # S2V: the step also takes each row's pose and extra embeddings over the padded sequence,
    # every latent frame's audio tokens and global vector, each token's kind and frame
    # (JaxNoisePredictor._s2v_inputs): (latent frames, audio tokens a frame); None otherwise
    audio: tuple[int, int] | None = None

    @property
    def padded(self) -> int:
        return SequenceShards(self.tokens, self.cp).padded


def step_arguments(tcfg, params, mesh: Mesh, shapes: StepShapes, dtype: str):
    """(params, x, t, guidance, context, cos, sin, cond, t_mask) as `JaxNoisePredictor._inputs`
    hands them to the step, abstract; and x's sharding (the step's output sharding)."""
    batch, padded = shapes.prompts, shapes.padded
    rows = batch * (2 if shapes.uses_guidance else 1)
    features = math.prod(tcfg.patch_size) * tcfg.out_channels
    x_spec = P("dp" if batch % mesh.shape["dp"] == 0 else None, CP, None)
    scalar = _struct((), "float32", mesh, P())
    rope = _struct((padded, tcfg.attention_head_dim // 2), "float32", mesh, P(CP, None))
    cond = t_mask = None
    if shapes.cond_channels:
        cond = _struct(
            (1, padded, math.prod(tcfg.patch_size) * shapes.cond_channels), "float32", mesh, P(None, CP, None)
        )
    if shapes.per_token_timestep and shapes.held_frames:
        t_mask = _struct((padded,), "float32", mesh, P(CP))
    args = (
        params,
        _struct((batch, padded, features), "float32", mesh, x_spec),
        scalar,
        scalar,
        _struct((rows, tcfg.text_len, tcfg.text_dim), dtype, mesh, P("dp", None, None)),
        rope,
        rope,
        cond,
        t_mask,
    )
    if shapes.audio is not None:  # S2V: the clip's inputs, as JaxNoisePredictor._s2v_inputs places them
        frames, per_frame = shapes.audio
        pose_spec, extra_spec, audio_spec, global_spec, video_spec, frame_spec = S2V_SPECS
        args += (
            _struct((rows, padded, tcfg.dim), dtype, mesh, pose_spec),
            _struct((rows, padded, tcfg.dim), dtype, mesh, extra_spec),
            _struct((rows, frames, per_frame, tcfg.dim), "float32", mesh, audio_spec),
            _struct((rows, frames, tcfg.dim), "float32", mesh, global_spec),
            _struct((padded,), "bool", mesh, video_spec),
            _struct((padded,), "int32", mesh, frame_spec),
        )
    if shapes.segment is not None:  # Animate: the segment's inputs, as JaxNoisePredictor._segment_inputs places them
        image_tokens, frames, per_frame = shapes.segment
        pose_spec, image_spec, face_spec, frame_spec = SEGMENT_SPECS
        args += (
            _struct((rows, padded, tcfg.dim), dtype, mesh, pose_spec),
            _struct((rows, image_tokens, tcfg.dim), dtype, mesh, image_spec),
            _struct((rows, frames, per_frame, tcfg.dim), dtype, mesh, face_spec),
            _struct((padded,), "int32", mesh, frame_spec),
        )
    return args, NamedSharding(mesh, x_spec)


# ---------------------------------------------------------------- compiled programs
@dataclass
class Compiled:
    name: str
    compiled: object  # jax.stages.Compiled
    seconds: float  # trace + lower + compile, on this host
    effort: float | None = None  # XLA's exec_time_optimization_effort; None: its default

    def memory(self) -> dict:
        """XLA's own analysis of the compiled program, bytes per device: what its arguments,
        outputs and temporaries take, and its peak (arguments + outputs − aliased + temps)."""
        stats = self.compiled.memory_analysis()
        out = {
            k: int(getattr(stats, f"{k}_size_in_bytes"))
            for k in ("argument", "output", "alias", "temp", "generated_code")
        }
        out["peak"] = out["argument"] + out["output"] - out["alias"] + out["temp"]
        return out

    def text(self) -> str:
        return self.compiled.as_text()


def _compile(name: str, build, args, platform: str, effort: float | None = None) -> Compiled:
    """`build()` → the jitted program, made, traced, lowered and compiled for `platform`: its
    kernel choices are made when the program is built and traced, so both happen here.
    `effort` (XLA's exec_time_optimization_effort, -1 … 1; None = XLA's default) trades the
    program's optimisation for compile time: lowering and SPMD partitioning (where Mosaic and
    sharding errors surface) run in full either way, but the buffers XLA assigns, and so its
    memory analysis, are those of the less optimised program."""
    options = None if effort is None else {"exec_time_optimization_effort": effort}
    t0 = time.perf_counter()
    # (never through the persistent cache: the executable is only inspected, never run here)
    with target_platform.compiling_for(platform), compile_cache.bypassed():
        compiled = build().trace(*args).lower().compile(compiler_options=options)
    return Compiled(name, compiled, time.perf_counter() - t0, effort)


def compile_step(
    tcfg,
    params,
    mesh: Mesh,
    shapes: StepShapes,
    dtype: str,
    fsdp: bool,
    kernel: str = "auto",
    platform: str = PLATFORM,
    effort: float | None = None,
) -> Compiled:
    """The denoising step of an expert with config `tcfg` and (abstract) `params`, compiled for
    `mesh`'s devices. Experts with equal shapes (T2V/I2V-A14B) share this one program."""
    specs = jax.tree.map(lambda leaf: leaf.sharding.spec, params) if fsdp else None
    args, x_sharding = step_arguments(tcfg, params, mesh, shapes, dtype)

    def build():
        step = make_step(
            tcfg,
            specs,
            mesh,
            shapes.tokens,
            shapes.prompts,
            2 if shapes.uses_guidance else 1,
            shapes.per_token_timestep,
            kernel,
            segment="s2v" if shapes.audio is not None else shapes.segment is not None,
        )
        return jax.jit(step, out_shardings=x_sharding)

    return _compile(STEP_NAME, build, args, platform, effort)


def vae_decode_mesh(devices, latent_height: int) -> Mesh:
    """The devices the decode is split over (`vae_codec.height_split`) as a ("height",) mesh."""
    import numpy as np

    return Mesh(np.asarray(list(devices)[: height_split(latent_height, len(devices))]), ("height",))


def compile_vae_decode(
    vcfg, flat_shapes: dict, latent_shape, devices, platform: str = PLATFORM, effort: float | None = None
) -> Compiled:
    """The VAE decode of one video of `latent_shape` (1, z_dim, T, h, w), split by height as
    `JaxVideoDecoder` splits it: fp32 params whole on every device of the split."""
    mesh = vae_decode_mesh(devices, latent_shape[3])
    params = abstract_params(
        flat_shapes, lambda n: jnp.float32, lambda shape, stacked: NamedSharding(mesh, P()), scanned=()
    )
    z = _struct(latent_shape, "float32", mesh, P(None, None, None, "height", None))
    frames = NamedSharding(mesh, P(None, "height", None, None))
    return _compile(
        f"vae_decode[{counted(mesh.size, 'device')} by height]",
        lambda: jax.jit(decode_program(vcfg), out_shardings=frames),
        (params, z),
        platform,
        effort,
    )


def run_mesh(spec, devices) -> Mesh:
    """The ("dp", "ring", "ulysses") mesh `JaxBackend` builds for spec.mesh, on `devices`."""
    return build_mesh(spec.mesh.dp, spec.mesh.ring, spec.mesh.ulysses, devices=list(devices)[: spec.mesh.world_size])


def step_shapes(spec, tcfg, vcfg) -> tuple[tuple, StepShapes]:
    """(the latent's shape, the step's StepShapes) of a run."""
    video, variant = spec.video, spec.model.variant
    latent_shape = latent.latent_shape(
        video.num_frames, video.height, video.width, tcfg.out_channels, vcfg, spec.model.variant.reference_frames
    )
    segment = audio = None
    grid = dit.patch_grid(tcfg, latent_shape)
    tokens = math.prod(grid)
    if tcfg.s2v is not None:  # S2V: a later clip's sequence (reference and motion tokens after the video's)
        tokens += len(s2v_tokens.extra_kinds(grid[1], grid[2], motion=True))
        audio = (latent_shape[2], tcfg.s2v.num_audio_token + 1)
    elif variant.forward_inputs:  # Animate: CLIP's image tokens, every latent frame's face tokens
        clip = architecture(spec.model.architecture).image_encoder
        image_tokens = (clip["image_size"] // clip["patch_size"]) ** 2 + 1
        segment = (image_tokens, latent_shape[2], tcfg.animate.face_encoder_num_heads + 1)
    return latent_shape, StepShapes(
        tokens,
        spec.mesh.cp,
        len(video.prompts),
        spec.uses_guidance,
        variant.per_token_timestep,
        tcfg.in_channels - tcfg.out_channels,
        variant.holds_frames(video.inputs),
        segment,
        audio,
    )


def compile_generation(
    spec,
    tcfg,
    vcfg,
    transformer_shapes: dict,
    vae_shapes: dict,
    devices,
    vae_effort: float | None = None,
    step_effort: float | None = None,
) -> dict:
    """Every program `generate` compiles for `spec` (a RunSpec; backend=jax), for `devices`
    (e.g. `topology_devices("v5p:2x2x2")`): {"step": Compiled, "vae_decode": Compiled,
    "params": one expert's abstract tree, "vae_params": the VAE's as placed, "mesh", …}. Experts share the step when
    their shapes agree (every Wan 2.2 model's do). `vae_effort`, `step_effort`: see `_compile`
    (XLA:TPU spends minutes of CPU on the VAE's convolutions at its default; the step's
    compile takes 4× the CPU at the default that it takes at -1)."""
    mesh = run_mesh(spec, devices)
    latent_shape, shapes = step_shapes(spec, tcfg, vcfg)
    params = transformer_params(
        transformer_shapes, mesh, spec.execution.dtype, spec.shards_weights_over_mesh, spec.quantization.quantize
    )
    return {
        "mesh": mesh,
        "params": params,
        "shapes": shapes,
        "latent_shape": latent_shape,
        "step": compile_step(
            tcfg, params, mesh, shapes, spec.execution.dtype, spec.shards_weights_over_mesh, effort=step_effort
        ),
        "vae_decode": compile_vae_decode(
            vcfg,
            vae_shapes,
            latent.decoded_shape(tcfg, latent_shape, spec.model.variant.reference_frames),
            mesh.devices.flat,
            effort=vae_effort,
        ),
        "vae_params": vae_params(vae_shapes, mesh, spec.shards_weights_over_mesh),
    }


def chip_bytes(programs: dict, experts: int) -> dict:
    """Peak bytes of one chip per phase, from XLA's analysis of each program plus what the run
    keeps on the chip outside that program's arguments: the other expert's weights during a
    step (the run holds both; one program serves both) and the VAE as placed on the run's mesh;
    during the decode every expert, the placed VAE and the decode's own copy of the VAE (its
    argument, on the split's devices). The predictor's small held inputs (context, RoPE) and
    the noise are left out (MBs)."""
    expert = per_device_bytes(programs["params"])
    vae = per_device_bytes(programs["vae_params"])
    return {
        "denoise": programs["step"].memory()["peak"] + (experts - 1) * expert + vae,
        "vae decode": programs["vae_decode"].memory()["peak"] + experts * expert + vae,
    }


def per_device_bytes(tree) -> int:
    """Bytes one device holds of an abstract tree (its shard of each leaf; the largest shard)."""
    total = 0
    for leaf in jax.tree.leaves(tree):
        shard = leaf.sharding.shard_shape(leaf.shape)
        total += math.prod(shard) * jnp.dtype(leaf.dtype).itemsize
    return total
