"""The memory planner: its weight bytes are the loaded model's; its denoise-phase and VAE-decode
figures equal the tensor bytes measured on CPU (tiny and mid-size models, fp32 and bf16); its
CLI reports, fits or not, with the run's one-line errors."""

import pytest
import torch

from parallel_wan import memory_plan as planner
from parallel_wan.config import MeshSpec


@pytest.fixture(scope="module")
def tiny_ckpt(tiny_t2v):
    from parallel_wan.weights.layout import describe_checkpoint

    return describe_checkpoint(tiny_t2v.diffusers)


def _bytes(tree):
    from parallel_wan.weights.tree import iter_leaves

    return sum(t.numel() * t.element_size() for _, t in iter_leaves(tree))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_weight_bytes_equal_the_loaded_expert(tiny_ckpt, dtype):
    from parallel_wan.builtin.tiny import transformer_config
    from parallel_wan.models.transformer import keeps_fp32
    from parallel_wan.weights.loader import load_transformer

    shapes = planner.transformer_shapes(transformer_config("t2v"))
    whole = _bytes(load_transformer(tiny_ckpt, "high_noise", dtype, keeps_fp32))
    assert planner.expert_bytes(shapes, dtype, 1).whole == whole
    # memory=sharded: each rank keeps its FSDP chunk (dim 0 padded to a multiple of the world),
    # the loader reads the unpadded torch.chunk rows: equal up to that padding, exactly.
    for world in (2, 4):
        eb = planner.expert_bytes(shapes, dtype, world)
        for rank in range(world):
            chunk = load_transformer(tiny_ckpt, "high_noise", dtype, keeps_fp32, shard=(rank, world))
            got = _bytes(chunk)
            assert got <= eb.sharded_blocks + eb.rest_chunk
        assert eb.sharded_blocks + eb.rest_chunk >= whole / world
        # the exact padded count is checked against FSDP's own storage in test_memory_modes


def test_weights_per_mode():
    from parallel_wan.builtin.tiny import transformer_config

    eb = planner.expert_bytes(planner.transformer_shapes(transformer_config("t2v")), "float32", 4)
    spec = _spec(["mesh=cp4"], world=4)
    resident = planner.weight_bytes(spec, eb)
    sharded = planner.weight_bytes(_spec(["mesh=cp4", "memory=sharded"], world=4), eb)
    swap = planner.weight_bytes(_spec(["mesh=cp4", "memory=swap"], world=4), eb)
    assert resident["denoise"] == 2 * eb.whole
    assert swap["encode"] == swap["decode"] == eb.whole and swap["denoise"] == eb.whole + 2 * eb.block
    whole_copy = planner.weight_bytes(_spec(["mesh=cp4", "memory=swap", "swap_prefetch_steps=2"], world=4), eb)
    assert whole_copy["denoise"] == 2 * eb.whole  # the whole low-noise expert beside the high-noise one
    assert sharded["encode"] == 2 * (eb.sharded_blocks + eb.rest_chunk)
    assert sharded["denoise"] == sharded["encode"] + 2 * eb.rest + 2 * eb.block


def _spec(overrides, world=1):
    from parallel_wan.config.compose import compose_settings

    return planner.planning_spec(compose_settings(list(overrides)) | {"output_dir": "unused"}, world)


# ---------------------------------------------------------------- planned vs measured
# "Measured" (measure/live_bytes.py): the distinct storages alive before a phase (weights, context,
# RoPE tables, the noise, latents) plus the peak of what the phase's ops return, on CPU, in a
# real run of the code (EagerNoisePredictor in pipeline.denoise.denoise; EagerVideoDecoder).
# The planner runs the same code on meta tensors, except the attention kernels, which it
# stands in for with their outputs (output and fp32 log-sum-exp, as CPU flash attention
# returns). The issue asks for 15 %; the figures agree far closer (see MEASURED below).
TOLERANCE = 0.15
MEASURED = {}  # figure → (planned, measured), printed by the last test of the module


def _check(name, planned, measured):
    MEASURED[name] = (planned, measured)
    print(f"{name}: planned {planned:,} B, measured {measured:,} B ({planned / measured - 1:+.2%})")
    assert abs(planned - measured) <= TOLERANCE * measured, name


def _measure_denoise(spec, tcfg, experts, vae_params, shapes, backend=None):
    """One process, the run's loop for PLAN_STEPS steps; only the last step (the sampler's
    state full) runs the forward, the others return a prediction-shaped array, which the real
    predictor's output is (keeps the mid-size model's test to one forward)."""
    from parallel_wan.backends.torch.backend import start_torch_backend
    from parallel_wan.measure.live_bytes import LiveBytes, held_bytes
    from parallel_wan.models import transformer as dit
    from parallel_wan.parallel.shards import SequenceShards
    from parallel_wan.pipeline.denoise import DenoiseTask, denoise
    from parallel_wan.pipeline.local_work import RankWork
    from parallel_wan.sampling import make_schedule

    backend = backend or start_torch_backend("cpu")
    ops = backend.ops
    g = torch.Generator().manual_seed(0)
    n = len(spec.video.prompts)
    context = torch.randn((n + 1, tcfg.text_len, tcfg.text_dim), generator=g).to(ops.dtype(spec.execution.dtype))
    grid = dit.patch_grid(tcfg, shapes.latent_shape)
    work = RankWork(SequenceShards(shapes.tokens, spec.mesh.cp), backend.index("cp"), tuple(range(n)), None)
    cond = None
    if tcfg.in_channels > tcfg.out_channels:  # I2V: the image condition's channels
        cond = torch.randn((1, shapes.local, 4 * (tcfg.in_channels - tcfg.out_channels)), generator=g)
    task = DenoiseTask(
        experts,
        context,
        n,
        work,
        grid,
        spec.uses_guidance,
        per_token_timestep=spec.model.variant.per_token_timestep,
        cond_tokens=cond,
    )
    with torch.inference_mode():
        predict = backend.noise_predictor(task)
        x = torch.randn((n, shapes.local, 4 * tcfg.out_channels), generator=g)
        held = held_bytes(
            [p for _, p in experts.values()],
            vae_params,
            context,
            predict.context,
            predict.rope,
            x,
            cond,
            predict.cond_tokens,
        )

        from parallel_wan.backends.contract import NoisePredictor

        calls = []

        class Step(NoisePredictor):  # the run's predictor on the last step only
            def __call__(self, expert, x, t, guidance):
                calls.append(t)
                if len(calls) < planner.PLAN_STEPS:
                    return x * 0.5
                return predict(expert, x, t, guidance)

        step = Step()

        with LiveBytes() as live:
            out = denoise(
                spec, make_schedule("official", planner.PLAN_STEPS, spec.sampling.shift), x, step, lambda it: it, ops
            )
            del out
    return held + live.peak


def _measure_decode(vcfg, vae_params, latent_shape, prompts, backend=None):
    from parallel_wan.backends.torch.backend import start_torch_backend
    from parallel_wan.measure.live_bytes import LiveBytes, held_bytes

    latents = torch.randn((prompts, *latent_shape[1:]), generator=torch.Generator().manual_seed(1))
    decoder = (backend or start_torch_backend("cpu")).video_decoder(vae_params, vcfg)
    with torch.inference_mode(), LiveBytes() as live:
        decoder(latents)
    return held_bytes(vae_params, latents) + live.peak


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_tiny_run_phases_match_measured(tiny_ckpt, dtype):
    """The built-in run's shapes (model=tiny: 128×128×17, one prompt, CFG): both experts
    resident, the VAE, the denoise loop and the decode."""
    from parallel_wan.models.transformer import keeps_fp32
    from parallel_wan.weights.loader import load_transformer, load_vae

    spec = _spec(["model=tiny", f"dtype={dtype}"])
    p = planner.plan(spec)
    experts = {
        name: (tiny_ckpt.transformers[name], load_transformer(tiny_ckpt, name, dtype, keeps_fp32))
        for name in ("high_noise", "low_noise")
    }
    vcfg, vae_params = load_vae(tiny_ckpt)
    tcfg = tiny_ckpt.transformers["high_noise"]
    from parallel_wan.measure.live_bytes import held_bytes

    _check(f"tiny {dtype} weights resident", p.weights["denoise"], held_bytes([t for _, t in experts.values()]))
    _check(
        f"tiny {dtype} denoise phase", p.phases["denoise"], _measure_denoise(spec, tcfg, experts, vae_params, p.shapes)
    )
    if dtype == "float32":  # the VAE runs in fp32 whatever the run's dtype
        planned = p.vae.weights + p.vae.held + p.vae.peak
        _check("tiny vae decode", planned, _measure_decode(vcfg, vae_params, p.shapes.latent_shape, 1))


def _tiny_on_rank(rank, world, overrides):
    """One rank of a cp=2 job (Ulysses): the tiny run's denoise phase and its split VAE
    decode, measured; random weights (the same on every rank)."""
    from parallel_wan.backends.torch.backend import start_torch_backend
    from parallel_wan.launch import Launch
    from parallel_wan.measure.live_bytes import held_bytes
    from parallel_wan.models.vae_shapes import param_shapes  # AutoencoderKLWan's (tests/unit/test_vae_shapes.py)

    spec = _spec(overrides, world)
    tcfg, vcfg, _ = planner.architecture(spec)
    shapes = planner.rank_shapes(spec, tcfg, vcfg)
    backend = start_torch_backend("cpu", spec.mesh, Launch(rank, world, rank, "test"))
    params = _random_tree(planner.transformer_shapes(tcfg), torch.float32)
    vae_params = _random_tree(param_shapes(vcfg), torch.float32)
    experts = {"high_noise": (tcfg, params), "low_noise": (tcfg, params)}
    denoise = _measure_denoise(spec, tcfg, experts, vae_params, shapes, backend) - held_bytes(params, vae_params)
    decode = _measure_decode(vcfg, vae_params, shapes.latent_shape, 1, backend) - held_bytes(vae_params)
    return {"denoise": denoise, "decode": decode}


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_cp2_ranks_match_measured():
    """mesh=cp2 (Ulysses over 2 ranks), the tiny run in fp32: each rank's denoise phase
    beside the weights (its 160 tokens, the all-to-all buffers) and the VAE decode split by
    height (halo rows, rank 0 receiving rank 1's band). The planner's decode figure is rank
    0's, the most loaded; rank 1 also holds a broadcast copy of the latents (20 KB here)."""
    from harness.ranks import run_on_ranks

    overrides = ["model=tiny", "dtype=float32", "mesh=cp2"]
    p = planner.plan(_spec(overrides, 2))
    ranks = run_on_ranks(_tiny_on_rank, 2, overrides, timeout_s=180)
    for rank, got in enumerate(ranks):
        _check(f"tiny cp2 rank {rank} denoise (beside weights)", p.denoise.total, got["denoise"])
    _check("tiny cp2 rank 0 vae decode (beside weights)", p.vae.held + p.vae.peak, ranks[0]["decode"])
    MEASURED["tiny cp2 rank 1 vae decode (beside weights), not checked"] = (p.vae.held + p.vae.peak, ranks[1]["decode"])


@pytest.mark.parametrize("model", ["tiny_ti2v", "tiny_i2v"])
def test_other_tasks_denoise_phase_matches_measured(model, tmp_path):
    """TI2V's per-token timesteps (B, L) and its one expert; I2V's condition tokens joined to
    the noise's channels. Random weights of the built-in models' shapes, fp32."""
    import imageio.v3 as iio
    import numpy as np

    from parallel_wan.measure.live_bytes import held_bytes

    image = tmp_path / "image.png"
    iio.imwrite(image, np.zeros((16, 16, 3), np.uint8))
    spec = _spec([f"model={model}", "dtype=float32"] + ([f"image={image}"] if model == "tiny_i2v" else []))
    tcfg, vcfg, _ = planner.architecture(spec)
    shapes = planner.rank_shapes(spec, tcfg, vcfg)
    params = _random_tree(planner.transformer_shapes(tcfg), torch.float32)
    experts = {name: (tcfg, params) for name in ("high_noise", "low_noise", "single")}
    measured = _measure_denoise(spec, tcfg, experts, {}, shapes) - held_bytes(params)
    _check(f"{model} fp32 denoise (beside weights)", planner.denoise_bytes(spec, tcfg, shapes).total, measured)


@pytest.fixture(scope="module", autouse=True)
def _table():
    yield
    print(
        "\n".join(
            f"{k:<56} planned {a:>13,} B  measured {b:>13,} B  {a / b - 1:+.3%}" for k, (a, b) in MEASURED.items()
        )
    )


def _random_tree(shapes, dtype):
    from parallel_wan.models.transformer import keeps_fp32
    from parallel_wan.weights.tree import unflatten

    g = torch.Generator().manual_seed(0)
    return unflatten(
        {
            n: (torch.randn(s, generator=g) * 0.02).to(torch.float32 if keeps_fp32(n) else dtype)
            for n, s in shapes.items()
        }
    )


# fp32: 1,920 tokens × 2 CFG rows, 4 layers. bf16 at 480 tokens and 2 layers (the carry between
# blocks is still there): CPU bf16 GEMMs here run 8× slower than fp32 ones (no bf16 units).
@pytest.mark.parametrize("dtype, layers, size", [("float32", 4, (256, 384)), ("bfloat16", 2, (128, 192))])
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_mid_size_denoise_phase_matches_measured(dtype, layers, size):
    """dim 1024, 8 heads, ffn 4×: the activations, not the 512-slot text context, dominate; one
    expert resident, random weights built here."""
    from parallel_wan.backends.torch import ops as torch_ops
    from parallel_wan.measure.live_bytes import held_bytes
    from parallel_wan.models.registry import architecture
    from parallel_wan.models.transformer_config import TransformerConfig

    tcfg = TransformerConfig(
        num_attention_heads=8,
        attention_head_dim=128,
        ffn_dim=4096,
        num_layers=layers,
        in_channels=16,
        out_channels=16,
        text_dim=1024,
        freq_dim=256,
    )
    spec = _spec(["model=tiny", f"dtype={dtype}", f"height={size[0]}", f"width={size[1]}", "num_frames=17"])
    vcfg = architecture("tiny").vae
    shapes = planner.rank_shapes(spec, tcfg, vcfg)
    assert shapes.local == 5 * size[0] // 16 * size[1] // 16
    shapes_flat = planner.transformer_shapes(tcfg)
    params = _random_tree(shapes_flat, torch_ops.dtype(dtype))
    eb = planner.expert_bytes(shapes_flat, dtype, 1)
    _check(f"mid {dtype} {layers} layers {shapes.local} tokens: weights", eb.whole, held_bytes(params))
    dn = planner.denoise_bytes(spec, tcfg, shapes)
    experts = {"high_noise": (tcfg, params), "low_noise": (tcfg, params)}
    _check(
        f"mid {dtype} {layers} layers {shapes.local} tokens: denoise phase",
        eb.whole + dn.total,
        _measure_denoise(spec, tcfg, experts, {}, shapes),
    )


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_mid_size_vae_decode_matches_measured():
    """Wan 2.1's VAE at its real widths (96…384 channels), 96×96, 5 frames (the second latent
    frame runs with the causal time cache full)."""
    from diffusers import AutoencoderKLWan

    from parallel_wan.models.vae_config import VaeConfig
    from parallel_wan.weights.tree import unflatten

    vcfg = VaeConfig.wan2_1()
    with torch.device("meta"):
        shapes = {n: p.shape for n, p in AutoencoderKLWan(**vcfg.to_diffusers()).named_parameters()}
    g = torch.Generator().manual_seed(0)
    params = unflatten({n: torch.randn(s, generator=g) * 0.02 for n, s in shapes.items()})
    latent_shape = (1, vcfg.z_dim, 2, 12, 12)
    vb = planner.vae_decode_bytes(vcfg, latent_shape, 1, 1)
    _check(
        "mid vae decode (Wan 2.1 VAE, 96x96x5)",
        vb.weights + vb.held + vb.peak,
        _measure_decode(vcfg, params, latent_shape, 1),
    )


def test_sequence_parallel_buffers_are_counted():
    import dataclasses

    from parallel_wan.builtin.tiny import transformer_config

    tcfg = transformer_config("t2v")
    spec = _spec(["model=tiny"])
    # 640 tokens on every rank: one process holding them all, or rank 0 of four holding 640 of 2,560.
    one = planner.denoise_bytes(spec, tcfg, planner.RankShapes(640, 640, 2, (1, 16, 5, 16, 32), 1, 2, None))
    usp = planner.denoise_bytes(
        dataclasses.replace(spec, mesh=MeshSpec("usp2x2", 1, 4, 2, 2)),
        tcfg,
        planner.RankShapes(2560, 640, 2, (1, 16, 5, 32, 64), 1, 2, None),
    )
    assert usp.loop > one.loop


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_cli_a14b_720p_fits_on_eight_80gb_devices(capsys):
    # In-process (`python -m parallel_wan.plan` is `sys.exit(main(argv))`): a subprocess would
    # import torch, diffusers and transformers again, ~10 s on 2 cores.
    code = planner.main(["model=wan2.2_t2v_a14b", "mesh=dp2_cp4", "device_memory_gb=80"])
    out = capsys.readouterr().out
    print(out)
    assert code == 0
    assert "tokens 75,600 → 18,900 per rank" in out and "FITS" in out and "DOES NOT" not in out
    assert "one expert, whole                 28.64 GB" in out  # 14.3e9 params, bf16 with fp32 norms/tables
    assert "a LoRA switch (lora_dir=)         57.27 GB   read again" in out  # both experts, every device (resident)


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_does_not_fit_suggests():
    import dataclasses

    spec = _spec(["model=wan2.2_t2v_a14b", "mesh=dp2_cp4"], world=8)
    p = planner.plan(spec)
    text, fits = planner.report(p, 24)
    assert not fits and "DOES NOT FIT" in text and "memory=sharded" in text
    # memory=sharded changes the weights only (the loop's tensors are the same), so the plan
    # for it is this one with the sharded weights.
    sharded = spec.replace(memory="sharded")
    p = dataclasses.replace(p, spec=sharded, weights=planner.weight_bytes(sharded, p.expert))
    assert planner.report(p, 80)[1]


@pytest.mark.parametrize(
    "args, needle",
    [
        (["model=tiny"], "device_memory_gb is missing"),
        (["model=tiny", "device_memory_gb=lots"], "device_memory_gb='lots' is not a number"),
        (["model=tiny", "device_memory_gb=-1"], "must be positive"),
        (["model=tiny", "height=100", "device_memory_gb=80"], "height=100 must be a positive multiple of 16"),
        (["model=tiny", "memory=paged", "device_memory_gb=80"], "memory='paged' is not known"),
        (["model=tiny_ti2v", "memory=swap", "device_memory_gb=80"], "has one expert"),
        (["model=tiny", "mesh=nope", "device_memory_gb=80"], "nope"),
    ],
)
def test_bad_inputs_give_one_line(capsys, args, needle):
    assert planner.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err, err


@pytest.mark.parametrize(
    "cache", [["cache=magcache"], ["cache=fbcache", "cache.threshold=0.5"], ["cache=taylorseer", "cache.order=2"]]
)
def test_step_cache_arrays_are_counted(cache):
    """What a step cache keeps between steps in a real tiny run (the arrays it hands the loop
    state) is what the planner counts for it, to the byte."""
    from parallel_wan.backends.torch.backend import start_torch_backend
    from parallel_wan.measure.live_bytes import held_bytes
    from parallel_wan.pipeline import generate

    spec = _spec(["model=tiny", "dtype=float32", "steps=6", *cache])
    tcfg, vcfg, _ = planner.architecture(spec)
    gen = generate(spec, start_torch_backend("cpu"), stop_after=4)
    arrays = [v for k, v in gen.state.cache.items() if not k.startswith("log_")]
    assert arrays and held_bytes(*arrays) == planner.cache_bytes(spec, tcfg, planner.rank_shapes(spec, tcfg, vcfg)) > 0
    plain = planner.plan(_spec(["model=tiny", "dtype=float32", "steps=6"]))
    assert planner.plan(spec).denoise.held - plain.denoise.held == held_bytes(*arrays)


def test_the_text_encoders_parameter_count_is_the_modules():
    """The planner counts UMT5's weights from its shape; the count equals our encoder's and
    transformers' UMT5EncoderModel's (both built on meta), for UMT5-XXL and the tiny one."""
    from transformers import UMT5Config, UMT5EncoderModel

    from parallel_wan.memory_plan.text_encoder_bytes import umt5_parameters
    from parallel_wan.models.registry import UMT5_XXL
    from parallel_wan.text.umt5_encoder import EncoderShape, UMT5Encoder

    for fields in (UMT5_XXL, {**planner.architecture(_spec(["model=tiny"]))[2].__dict__}):
        shape = EncoderShape.from_config(fields)
        with torch.device("meta"):
            ours = sum(p.numel() for p in UMT5Encoder(shape).parameters())
            theirs = sum(p.numel() for p in UMT5EncoderModel(UMT5Config(**fields)).parameters())
        assert umt5_parameters(shape) == ours == theirs, fields


def test_every_example_of_the_planners_help_runs_without_an_image(capsys):
    """Issue 38 item 6: the help's image-to-video example needed a real image file. Planning
    reads no image (the size decides the bytes): each example plans (exit 0 fits, 1 does not)."""
    from parallel_wan.cli import HELP

    examples = [
        line.split("python -m parallel_wan.plan", 1)[1].split()
        for line in HELP["plan"].splitlines()
        if line.strip().startswith("python -m parallel_wan.plan ")
        and "device_memory_gb=N" not in line
        and "device_memory_gb=" in line
    ]
    assert any("model=wan2.2_i2v_a14b" in e for e in examples), examples
    for example in examples:
        code = planner.main(example)
        captured = capsys.readouterr()
        assert code in (0, 1) and "error" not in captured.err, (example, captured.err)
        assert "peak per phase:" in captured.out


def test_a_plan_whose_weights_do_not_fit_suggests_quantized_weights():
    """Issue 38 item 6: quantize=fp8/int8 halve the block weights; a plan that does not fit
    because of its weights says so (and not once they are quantized)."""
    p = planner.plan(_spec(["model=wan2.2_i2v_a14b", "memory=swap", "height=480", "width=832"]))
    assert "quantize=fp8 or quantize=int8" in "; ".join(planner.suggestions(p, 24e9))
    q = planner.plan(_spec(["model=wan2.2_i2v_a14b", "memory=swap", "height=480", "width=832", "quantize=fp8"]))
    assert q.weights["denoise"] < 0.55 * p.weights["denoise"]
    assert "quantize=" not in "; ".join(planner.suggestions(q, 24e9))


def test_the_image_encoders_parameter_count_is_transformers_clip():
    """Animate's CLIP tower is counted in the encoders' phase: its parameter count equals
    transformers' CLIPVisionModel's (built on meta), for ViT-H/14 and the tiny one."""
    from transformers import CLIPVisionConfig, CLIPVisionModel

    from parallel_wan.memory_plan.image_encoder_bytes import clip_parameters
    from parallel_wan.models.registry import CLIP_VIT_H, TINY_CLIP

    for fields in (CLIP_VIT_H, TINY_CLIP):
        with torch.device("meta"):
            theirs = sum(p.numel() for p in CLIPVisionModel(CLIPVisionConfig(**fields)).parameters())
        assert clip_parameters(fields) == theirs, fields
    assert clip_parameters(CLIP_VIT_H) == 630_766_080


def test_animate_720p_is_planned_with_its_reference_frame_and_clip_on_eight_devices(capsys):
    """Animate-14B's 720p defaults on 8 GPUs (issue 42): a segment's 77 frames are 20 latent frames
    plus the character's reference frame (21 × 3,600 = 75,600 tokens), and the encoders' phase
    holds CLIP ViT-H (1.26 GB in bf16) beside UMT5."""
    from parallel_wan.memory_plan.cli import main

    assert main(["model=wan2.2_animate_14b", "device_memory_gb=80", "mesh=cp8"]) == 0
    out = capsys.readouterr().out
    assert "tokens 75,600 → 9,450 per rank" in out and "encoders: text + CLIP, rank 0" in out
    text_only = planner.plan(_spec(["model=wan2.2_i2v_a14b", "mesh=cp8"], world=8)).text[0]
    animate = planner.plan(_spec(["model=wan2.2_animate_14b", "mesh=cp8"], world=8)).text[0]
    assert animate - text_only == 630_766_080 * 2


def test_the_wav2vec2_parameter_count_is_transformers_own():
    """memory_plan/audio_encoder_bytes.wav2vec_parameters against transformers' Wav2Vec2Model."""
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    from parallel_wan.memory_plan.audio_encoder_bytes import wav2vec_parameters
    from parallel_wan.models.registry import TINY_WAV2VEC, WAV2VEC_LARGE

    for fields in (TINY_WAV2VEC, WAV2VEC_LARGE):
        with torch.device("meta"):
            theirs = sum(p.numel() for p in Wav2Vec2Model(Wav2Vec2Config(**fields)).parameters())
        assert wav2vec_parameters(fields) == theirs, fields
    assert wav2vec_parameters(WAV2VEC_LARGE) == 315_438_720


def test_s2v_is_planned_with_its_reference_and_motion_tokens_and_wav2vec2_on_eight_devices(capsys):
    """S2V-14B's defaults (1024×704, 80-frame clips) on 8 GPUs (issue 42): a clip's 20 latent
    frames of 44 × 64 tokens (56,320), then the reference's 2,816 and the motion frames' 4,224
    (2,816 + 704 + 704: one frame at full, one at half, four at a quarter token resolution) —
    63,360 tokens —, wav2vec2-large (0.63 GB in bf16) beside UMT5, and the decode of the motion
    frames' 19 latent frames before the clip's 20."""
    from parallel_wan.memory_plan.cli import main
    from parallel_wan.models.latent import decoded_shape

    assert main(["model=wan2.2_s2v_14b", "device_memory_gb=80", "mesh=cp8"]) == 0
    out = capsys.readouterr().out
    assert "tokens 63,360 → 7,920 per rank" in out and "encoders: text + wav2vec2" in out and "FITS" in out
    text_only = planner.plan(_spec(["model=wan2.2_t2v_a14b", "mesh=cp8"], world=8)).text[0]
    s2v = planner.plan(_spec(["model=wan2.2_s2v_14b", "mesh=cp8"], world=8))
    assert s2v.text[0] - text_only == 315_438_720 * 2
    assert decoded_shape(s2v_config(), (1, 16, 20, 88, 128))[2] == 39


def s2v_config():
    from parallel_wan.models.registry import architecture

    return architecture("wan2.2_s2v_14b").transformer


def test_svg_sparse_attention_is_counted_radial_like_dense():
    """sparse=svg holds more than dense attention — each head's q, k, v gathered into its order
    while the kernel runs, the output gathered back, the profile's scores — and the planner runs
    that code on meta (its kernel only making its outputs); radial's kernel holds what a dense one
    does. The tiny model at 680 tokens, where attention is the loop's peak."""
    size = ["model=tiny", "dtype=float32", "steps=4", "num_frames=17", "height=128", "width=272"]
    sparse = ["sparse_dense_steps=1", "sparse_dense_layers=0", "sparse_block=16"]
    dense = planner.plan(_spec(size)).denoise.loop
    svg = planner.plan(_spec([*size, "sparse=svg", *sparse])).denoise.loop
    radial = planner.plan(_spec([*size, "sparse=radial", *sparse])).denoise.loop
    q_bytes = 2 * 680 * 128 * 4  # CFG's 2 rows × 680 tokens × dim 128, float32
    print(f"denoise loop: dense {dense}, svg {svg} (+{(svg - dense) / q_bytes:.1f} q), radial {radial}")
    assert abs(radial - dense) < q_bytes / 100  # (64 bytes apart: not attention's)
    assert svg - dense >= 3 * q_bytes  # at least the three gathered copies (measured 9.4 q)
