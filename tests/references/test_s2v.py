"""S2V-14B (issue 42 part 2): `model=tiny_s2v` with a portrait and a speech file renders what the
official `wan22` speech-to-video code (`WanS2V.generate`, tests/harness/official_s2v.py) renders
from the same tiny checkpoint, inputs, prompt and seed: clip by clip (three here), the first
dropping the motion frames, each later one continuing from the last one's decoded frames, with
CFG (whose unconditional half hears silence). The official object is assembled around the same
components the way its __init__ would (its __init__ wants CUDA): its own WanModel_S2V loaded from
the checkpoint's files, its own AudioEncoder reading the checkpoint's wav2vec2 folder, its own
scheduler; the VAE is diffusers' AutoencoderKLWan behind the official Wan2_1_VAE's encode/decode
contract, and the text embeddings are ours (both held to references elsewhere).

Frames within 2 uint8 levels (fp32 end to end, as harness/frames.py). The audio matters: another
speech changes the video far beyond the tolerance."""

from __future__ import annotations

import types
import wave

import numpy as np
import pytest
import torch
from harness.cli import NEGATIVE, PROMPT, SEED, STEPS, run
from harness.frames import assert_frames_close, assert_quantized_near_bf16
from harness.official_s2v import official_s2v

from parallel_wan.builtin.s2v_examples import speech, write_examples, write_wav

CLIP = 8  # frames per clip (the tiny preset's): 1.3 s of speech at 16 fps is 3 clips
MATTERS = 20


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from parallel_wan.builtin.tiny import build_tiny, write_checkpoint

    model = build_tiny("tiny_s2v", seed=0)
    return model, str(write_checkpoint(model, tmp_path_factory.mktemp("tiny_s2v") / "official", "official"))


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    return write_examples(tmp_path_factory.mktemp("s2v_inputs"), 64)


class _Vae:
    """The official Wan2_1_VAE's contract (lists of (C, T, H, W), normalised latents, decoded
    frames clamped to [-1, 1]) over diffusers' AutoencoderKLWan."""

    def __init__(self, vae):
        self.vae, self.dtype, self.device = vae, torch.float32, torch.device("cpu")
        cfg = vae.config
        self.mean = torch.tensor(cfg.latents_mean).view(1, -1, 1, 1, 1)
        self.inv_std = 1.0 / torch.tensor(cfg.latents_std).view(1, -1, 1, 1, 1)

    def encode(self, videos):
        return [((self.vae.encode(u[None].float()).latent_dist.mode() - self.mean) * self.inv_std)[0] for u in videos]

    def decode(self, zs):
        return [self.vae.decode(z[None] / self.inv_std + self.mean).sample.clamp(-1, 1)[0] for z in zs]


class _Text:
    """The official T5EncoderModel's contract: per text, its tokens' embeddings (unpadded)."""

    def __init__(self, encoder):
        self.encoder, self.model = encoder, types.SimpleNamespace(to=lambda *a: None, cpu=lambda: None)

    def __call__(self, texts, device):
        out = self.encoder.encode(texts).float()
        rows = []
        for row in out:
            length = int((row.abs().sum(-1) > 0).sum())
            rows.append(row[:length].to(device))
        return rows


def _librosa_load(path, sr):
    """librosa.load(path, sr=16000) for a 16 kHz mono 16-bit WAV: the samples / 32768."""
    with wave.open(path, "rb") as f:
        assert f.getframerate() == sr and f.getnchannels() == 1 and f.getsampwidth() == 2
        data = np.frombuffer(f.readframes(f.getnframes()), "<i2")
    return data.astype(np.float32) / 32768.0, sr


def _official_model(model_module, ckpt):
    """WanModel_S2V of the checkpoint's config.json with its weights, strictly. Built directly:
    its from_pretrained drops text_dim from the config (`ignore_for_config`) and would build the
    14B's 4096-wide text embedding for the tiny model."""
    import json
    from pathlib import Path

    from safetensors.torch import load_file

    config = {k: v for k, v in json.loads((Path(ckpt) / "config.json").read_text()).items() if not k.startswith("_")}
    net = model_module.WanModel_S2V(**config)
    state = {}
    for shard in sorted(Path(ckpt).glob("diffusion_pytorch_model-*.safetensors")):
        state.update(load_file(shard))
    net.load_state_dict(state, strict=True)
    return net.eval()


def official_frames(model, ckpt, image, audio, steps=STEPS, guidance=4.5, clip=CLIP, pose_video=None):
    """The official WanS2V.generate's video as uint8 (T, H, W, 3)."""
    from parallel_wan.text.umt5 import TextEncoder
    from parallel_wan.weights.layout import OFFICIAL_WAV2VEC, describe_checkpoint

    s2v_module, model_module, audio_module = official_s2v()
    audio_module.librosa = types.SimpleNamespace(load=_librosa_load)
    self = object.__new__(s2v_module.WanS2V)
    self.device, self.rank, self.t5_cpu, self.init_on_cpu = torch.device("cpu"), 0, True, True
    self.num_train_timesteps, self.param_dtype = 1000, torch.float32
    self.text_encoder = _Text(TextEncoder.load(describe_checkpoint(ckpt), "float32"))
    self.vae = _Vae(model.vae)
    self.noise_model = _official_model(model_module, ckpt)
    self.audio_encoder = audio_module.AudioEncoder(device="cpu", model_id=f"{ckpt}/{OFFICIAL_WAV2VEC}")
    self.sp_size, self.sample_neg_prompt = 1, "unused: the tests give a negative prompt"
    self.motion_frames, self.drop_first_motion, self.fps, self.audio_sample_m = 73, True, 16, 0
    with torch.no_grad():
        video = self.generate(
            input_prompt=PROMPT,
            ref_image_path=image,
            audio_path=audio,
            enable_tts=False,
            tts_prompt_audio=None,
            tts_prompt_text=None,
            tts_text=None,
            num_repeat=None,
            pose_video=pose_video,
            max_area=64 * 64,
            infer_frames=clip,
            shift=3.0,
            sample_solver="unipc",
            sampling_steps=steps,
            guide_scale=guidance,
            n_prompt=NEGATIVE,
            seed=SEED,
            offload_model=False,
            init_first_frame=False,
        )
    return np.round((video.permute(1, 2, 3, 0).numpy() + 1.0) * 127.5).clip(0, 255).astype(np.uint8)


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_s2v_matches_the_official_code_clip_by_clip(tmp_path, tiny, examples):
    model, ckpt = tiny
    got = run(tmp_path, ckpt, model="tiny_s2v", num_frames=CLIP, image=examples["image"], audio=examples["audio"])
    want = official_frames(model, ckpt, examples["image"], examples["audio"])
    assert got["sidecar"]["s2v"]["clips"] == 3 and len(want) == (CLIP - 3) + 2 * CLIP
    assert_frames_close(got["frames"], want)
    print("max abs diff", np.abs(got["frames"].astype(int) - want.astype(int)).max())


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_s2v_with_a_pose_video_matches_the_official_code(tmp_path, tiny, examples):
    """pose_video=: the official load_pose_cond's poses — every frame of a 16 fps video, 20 of the
    3 clips' 24 (the rest −1), each clip's first frame repeated, through the VAE, the first latent
    frame dropped — embedded and added to the video's tokens; the poses change the video."""
    import imageio.v3 as iio

    from parallel_wan.builtin.animate_examples import pose_frame

    model, ckpt = tiny
    pose = tmp_path / "pose.mp4"
    iio.imwrite(pose, np.stack([pose_frame(f, 64, 64) for f in range(20)]), fps=16, codec="libx264", macro_block_size=1)
    inputs = dict(model="tiny_s2v", num_frames=CLIP, image=examples["image"], audio=examples["audio"])
    got = run(tmp_path / "ours", ckpt, pose_video=str(pose), **inputs)
    want = official_frames(model, ckpt, examples["image"], examples["audio"], pose_video=str(pose))
    assert got["sidecar"]["s2v"]["pose_video"]["frames_read"] == 20
    assert_frames_close(got["frames"], want)
    without = run(tmp_path / "without", ckpt, **inputs)
    assert np.abs(without["frames"].astype(int) - got["frames"].astype(int)).max() > MATTERS


def test_the_speech_changes_the_video(tmp_path, tiny, examples):
    model, ckpt = tiny
    base = run(
        tmp_path / "a", ckpt, model="tiny_s2v", num_frames=CLIP, image=examples["image"], audio=examples["audio"]
    )
    other = tmp_path / "other.wav"
    write_wav(other, np.roll(speech(), 3000)[::-1].copy())
    moved = run(tmp_path / "b", ckpt, model="tiny_s2v", num_frames=CLIP, image=examples["image"], audio=str(other))
    diff = np.abs(base["frames"].astype(int) - moved["frames"].astype(int)).max()
    assert diff > MATTERS, diff


def test_the_built_in_model_speaks_its_example_inputs_when_given_none(tmp_path):
    import json
    import subprocess

    import imageio_ffmpeg
    from harness.cli import run_in_process

    logged = run_in_process(tmp_path, "model=tiny_s2v", "steps=2")
    sidecar = json.loads((tmp_path / "video.json").read_text())
    assert "the built-in example portrait and speech" in logged
    assert sidecar["s2v"]["clips"] == 3 and sidecar["frames_shape"][0] == 21 and sidecar["config"]["audio"]
    probe = subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-i", str(tmp_path / "video.mp4")], capture_output=True)
    streams = [line for line in probe.stderr.decode().splitlines() if "Stream #" in line]
    assert any("Video: h264" in s for s in streams) and any("Audio: aac" in s for s in streams), streams


def _refusal(words, world=1):
    from harness.jax_runs import raw_config

    from parallel_wan.config import ConfigError
    from parallel_wan.run import validate_job

    with pytest.raises(ConfigError) as caught:
        validate_job(raw_config(words), world)
    return str(caught.value)


def test_bad_s2v_inputs_are_one_line_each_before_anything_loads(tmp_path, examples):
    from harness.videos import write_source_video

    silent, short, text = tmp_path / "silent.wav", tmp_path / "short.wav", tmp_path / "speech.mp3"
    write_wav(silent, np.zeros(16000, np.int16))
    write_wav(short, speech(0.05))
    text.write_text("not audio")
    clip = tmp_path / "clip.mp4"
    write_source_video(clip, frames=9, height=64, width=64)
    s2v = ["model=tiny_s2v", f"image={examples['image']}", f"audio={examples['audio']}"]
    for words, message in (
        (["model=tiny", f"audio={examples['audio']}"], "model=tiny takes no audio"),
        (["model=tiny_i2v", f"image={examples['image']}", f"audio={examples['audio']}"], "takes no audio"),
        (["model=tiny_s2v", f"image={examples['image']}"], "set audio=PATH"),
        ([*s2v[:2], f"audio={tmp_path / 'nope.wav'}"], "nope.wav does not exist"),
        ([*s2v[:2], f"audio={text}"], "is not an audio file ffmpeg can read"),
        ([*s2v[:2], f"audio={silent}"], "is silent"),
        ([*s2v[:2], f"audio={short}"], "is 0.05 s long; it needs at least 0.10 s"),
        ([*s2v, "num_frames=9"], "num_frames=9 is S2V's clip length and must be a positive multiple of 4"),
        ([*s2v, "num_clips=0"], "num_clips=0 must be at least 1"),
        ([*s2v, "height=96"], "height=96 must be a positive multiple of 64"),
        ([*s2v, f"pose_video={examples['audio']}"], "could not be read as a video"),
        ([*s2v, f"pose_video={tmp_path / 'nope.mp4'}"], "nope.mp4 does not exist"),
        ([*s2v, "cache=fbcache"], "S2V runs with cache=fbcache are not built yet"),
        ([*s2v, "prompt=[a,b]"], "S2V runs with more than one prompt are not built yet"),
        (["model=tiny", "num_clips=2"], "num_clips=2 is S2V's"),
        ([*s2v, f"video={clip}", "num_frames=8"], "video= (video-to-video) is a run of the text/image-to-video models"),
        ([s2v[0], s2v[2], f"extend={clip}", "num_frames=8"], "extend= (a video's continuation) is a run of the"),
    ):
        assert message in _refusal(words), (words, _refusal(words))


def test_a_shorter_num_clips_cuts_the_video_and_the_first_clips_are_the_same(tmp_path, tiny, examples):
    model, ckpt = tiny
    inputs = dict(model="tiny_s2v", num_frames=CLIP, image=examples["image"], audio=examples["audio"])
    whole = run(tmp_path / "a", ckpt, **inputs)
    cut = run(tmp_path / "b", ckpt, num_clips=2, **inputs)
    assert cut["sidecar"]["s2v"]["clips"] == 2 and len(cut["frames"]) == (CLIP - 3) + CLIP
    assert np.array_equal(cut["frames"], whole["frames"][: len(cut["frames"])])


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_every_mesh_and_jax_render_the_one_process_s2v_video(tmp_path_factory):
    """Sequence parallelism over the whole S2V sequence — the video's tokens, then the
    reference's and the motion's, padded at the end — and CFG parallel over dp: each mesh's
    latents and frames equal one process's (harness/frames.py: rel ≤ 1e-5, frames ±1 on a few
    values). 4-frame clips are one latent frame: 16 video tokens, then 16 reference tokens (and
    24 motion tokens after the first clip): 32 and 56 tokens, so cp4 puts video, reference and
    motion tokens on one rank, and a 3-rank ring pads (11 + 11 + 10, 19 + 19 + 18). Two clips:
    the first without motion tokens, the second with."""
    from harness.frames import assert_same_video
    from harness.jax_runs import generate as jax_generate
    from harness.ranks import generate_on_rank, run_on_ranks

    examples = write_examples(tmp_path_factory.mktemp("mesh_inputs"), 64)
    base = [
        "model=tiny_s2v",
        "dtype=float32",
        "steps=1",
        "seed=3",
        "prompt='a woman talks'",
        "negative_prompt=blurry",
        "num_frames=4",
        "num_clips=2",
        *(f"{k}={v}" for k, v in examples.items()),
    ]
    ref = run_on_ranks(generate_on_rank, 1, base, timeout_s=300)[0]
    # JAX on 8 CPU devices: each shard's split between video, extra and padding tokens is an input
    # of the traced program (models/s2v_transformer.forward_masked), against the torch process
    for mesh in (["mesh=dp2_cp4", "memory=sharded"],):  # CFG parallel, the sequence over 4 and the weights FSDP-sharded
        gen, _, _ = jax_generate([*base, "backend=jax", *mesh])
        assert_same_video((gen.latents, gen.frames, " ".join(mesh)), ref)
    meshes = (
        (4, ["mesh=cp4"]),
        (3, ["mesh=cp2", "mesh.cp=3", "mesh.ulysses=1", "mesh.ring=3"]),
        (2, ["mesh=cp2", "memory=sharded"]),  # FSDP: the audio encoder, injectors and frame packer gathered whole
    )
    for world, mesh in meshes:
        assert_same_video(run_on_ranks(generate_on_rank, world, base + mesh, timeout_s=300)[0], ref)


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_a_prompt_file_gives_each_entry_its_own_speech(tmp_path, tiny, examples):
    """prompts=FILE with S2V: each line its own portrait and audio (paths relative to the file)
    and clip cap; the job keeps wav2vec2 loaded between them; each entry's video equals the
    single run with its inputs, frame for frame, and carries its own audio."""
    import json
    import shutil

    import imageio.v3 as iio
    from harness.cli import common, run_in_process

    _, ckpt = tiny
    folder = tmp_path / "job"
    folder.mkdir()
    shutil.copy(examples["image"], folder / "portrait.png")
    shutil.copy(examples["audio"], folder / "speech.wav")
    write_wav(folder / "other.wav", np.roll(speech(), 3000)[::-1].copy())
    lines = [
        {"prompt": PROMPT, "image": "portrait.png", "audio": "speech.wav", "num_clips": 1},
        {"prompt": PROMPT, "image": "portrait.png", "audio": "other.wav", "name": "other"},
    ]
    (folder / "prompts.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    words = [w for w in common(ckpt, steps=2, num_frames=CLIP) if not w.startswith("prompt=")]
    run_in_process(tmp_path / "out", *words, "model=tiny_s2v", f"prompts={folder / 'prompts.jsonl'}")
    single = run(
        tmp_path / "single",
        ckpt,
        model="tiny_s2v",
        num_frames=CLIP,
        steps=2,
        image=examples["image"],
        audio=str(folder / "other.wav"),
    )
    job = json.loads((tmp_path / "out" / "other.json").read_text())
    assert job["s2v"]["clips"] == 3 and job["s2v"]["audio"]["sha256"] == single["sidecar"]["s2v"]["audio"]["sha256"]
    got = np.stack(list(iio.imiter(tmp_path / "out" / "other.mp4")))
    want = np.stack(list(iio.imiter(tmp_path / "single" / "video.mp4")))
    assert np.array_equal(got, want)
    first = json.loads(next((tmp_path / "out").glob("0001-*.json")).read_text())  # unnamed: LINE-KEY
    assert first["s2v"]["clips"] == 1 and first["frames_shape"][0] == CLIP - 3


@pytest.mark.slow  # a server process: over 5 s in the suite's run (tests/README.md)
def test_a_server_speaks_an_uploaded_audio_reference_as_the_command_line_does(tmp_path, examples):
    """A tiny S2V server: OpenAI's SDK creates a video with `input_reference` and, in
    `extra_body`, vLLM-Omni's `audio_reference` as a data URL; the job completes, its frames are
    the command line's with the same inputs, and the downloaded mp4 carries the audio track."""
    import base64
    import subprocess

    import imageio_ffmpeg
    import openai
    from harness.cli import run_in_process
    from harness.serve import KEY, Server

    start = ["model=tiny_s2v", "dtype=float32", "steps=2", "save_frames=true", "dist_timeout_s=60"]
    server = Server(tmp_path / "storage", start, key=KEY).wait_ready()
    try:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY)
        voice = "data:audio/wav;base64," + base64.b64encode(open(examples["audio"], "rb").read()).decode()
        with open(examples["image"], "rb") as image:
            job = client.videos.create(
                prompt=PROMPT, input_reference=image, extra_body={"audio_reference": {"audio_url": voice}}
            )
        done = server.wait_for(job.id, "completed", "failed")
        assert done["status"] == "completed", done
        mp4 = tmp_path / "served.mp4"
        mp4.write_bytes(client.videos.download_content(job.id).read())
        frames = server.frames(job.id)
    finally:
        server.stop()
    run_in_process(
        tmp_path / "cli", *start, f"prompt='{PROMPT}'", f"image={examples['image']}", f"audio={examples['audio']}"
    )
    assert np.array_equal(frames, np.load(tmp_path / "cli" / "frames.npy"))
    probe = subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-i", str(mp4)], capture_output=True)
    assert b"Audio: aac" in probe.stderr, probe.stderr.decode()[-2000:]


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_quantized_s2v_weights_stay_near_the_bf16_video(tmp_path, tiny, examples):
    """quantize=fp8 and int8 (the block linears) on S2V: each video is nearer the bf16 one than
    another seed's is, by a wide margin (the FP8 path's check)."""
    _, ckpt = tiny
    inputs = dict(model="tiny_s2v", num_frames=CLIP, image=examples["image"], audio=examples["audio"])

    def frames(name, **extra):
        return run(tmp_path / name, ckpt, dtype="bfloat16", **inputs, **extra)["frames"].astype(np.float64)

    assert_quantized_near_bf16(frames, SEED + 1)


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_compile_true_runs_the_blocks_compiled_between_the_audio_injectors(tmp_path, tiny, examples):
    """compile=true on S2V: the block function compiled ("aot_eager", as Animate's test) and run
    through the block pass between the eager audio injectors; fp32 latents equal eager's."""
    from harness.compiled import compiled_against_eager

    _, ckpt = tiny
    words = [f"checkpoint_dir={ckpt}", "model=tiny_s2v", "dtype=float32", "steps=2", f"num_frames={CLIP}"]
    words += [f"image={examples['image']}", f"audio={examples['audio']}", "num_clips=2"]
    difference, compiled = compiled_against_eager(words, tmp_path)
    assert compiled >= 1  # the compiled run captured graphs (the eager one none)
    assert difference <= 1e-6, difference


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_a_lora_on_s2v_equals_the_weights_merged_by_hand(tmp_path, tiny, examples):
    """A LoRA file (ComfyUI's official names, alpha 2 over rank 4, scale 0.7) on every block
    linear of S2V: the video equals the plain run of a checkpoint whose official weights were
    merged by hand (W + 0.7 · alpha/rank · up·down), and differs from the run without it. (The
    merge itself is held to diffusers' load_lora_weights for the other models: test_lora.py.)"""
    import shutil
    from pathlib import Path

    from harness.lora_files import lora_pairs, official, write_lora
    from safetensors.torch import load_file, save_file

    from parallel_wan.builtin.kinds import transformer_config

    _, ckpt = tiny
    pairs = lora_pairs(transformer_config("tiny_s2v"), rank=4, seed=1)
    lora = write_lora(tmp_path / "s2v_lora.safetensors", pairs, "comfyui", alpha=2.0)
    merged = tmp_path / "merged"
    shutil.copytree(ckpt, merged)
    changed = 0
    for shard in Path(merged).glob("diffusion_pytorch_model-*.safetensors"):
        state = load_file(shard)
        for module, (down, up) in pairs.items():
            name = official(module) + ".weight"
            if name in state:
                state[name] = state[name] + 0.7 * (2.0 / 4) * (up @ down)
                changed += 1
        save_file(state, shard, metadata={"format": "pt"})
    assert changed == len(pairs)  # every block linear
    inputs = dict(model="tiny_s2v", num_frames=CLIP, image=examples["image"], audio=examples["audio"], num_clips=2)
    got = run(tmp_path / "lora", ckpt, lora=lora, lora_scale=0.7, **inputs)
    want = run(tmp_path / "merged_run", str(merged), **inputs)
    plain = run(tmp_path / "plain", ckpt, **inputs)
    assert_frames_close(got["frames"], want["frames"], max_abs=1)
    assert np.abs(plain["frames"].astype(int) - got["frames"].astype(int)).max() > MATTERS


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_an_int8_expert_file_renders_its_dequantized_weights(tmp_path, tiny, examples):
    """weights=FILE on S2V: lightx2v's int8 file (per-channel scales on the block linears, the
    rest as stored; official names, S2V's own included) renders what the checkpoint with the
    file's dequantized weights renders, within 2 levels (fp32)."""
    import shutil
    from pathlib import Path

    from harness.quantized_files import dequantized_state, write_expert_file
    from safetensors.torch import load_file, save_file

    from parallel_wan.weights.transformer_keymap import diffusers_to_official_name

    model, ckpt = tiny
    file = write_expert_file(tmp_path / "s2v_int8.safetensors", model.transformer, "lightx2v_int8")
    weights = {diffusers_to_official_name(k): v for k, v in dequantized_state(file).items()}
    plain = tmp_path / "dequantized"
    shutil.copytree(ckpt, plain)
    for shard in Path(plain).glob("diffusion_pytorch_model-*.safetensors"):
        state = load_file(shard)
        save_file({k: weights[k].contiguous() for k in state}, shard, metadata={"format": "pt"})
    inputs = dict(model="tiny_s2v", num_frames=CLIP, image=examples["image"], audio=examples["audio"], num_clips=2)
    got = run(tmp_path / "file", ckpt, weights=file, **inputs)
    want = run(tmp_path / "plain", str(plain), **inputs)
    assert_frames_close(got["frames"], want["frames"])
    record = got["sidecar"]["expert_files"]["single"]
    assert (record["format"], record["stored_dtype"], record["quantized_tensors"]) == ("lightx2v", "int8", 20), record


def test_a_stop_vote_ends_an_s2v_video_mid_clip_with_nothing_decoded(tiny, examples):
    """A server's DELETE (its stop vote) ends a running S2V video after the step its clip is at:
    the generation comes back with that clip's loop state and no frames (pipeline/segmented.py;
    the server's side of it: tests/references/test_animate.py's server test)."""
    from harness.jax_runs import raw_config

    from parallel_wan.backends import make_backend
    from parallel_wan.pipeline import generate
    from parallel_wan.run import validate_job

    settings = ["model=tiny_s2v", f"checkpoint_dir={tiny[1]}", "steps=3", "num_frames=8", "num_clips=2"]
    job, ckpt = validate_job(raw_config([*settings, f"image={examples['image']}", f"audio={examples['audio']}"]), 1)
    votes = []

    def should_stop() -> bool:  # asked after each step but a clip's last: clip 0 twice, then clip 1
        votes.append(len(votes))
        return len(votes) == 3

    gen = generate(job.base, make_backend(job.base), ckpt, should_stop=should_stop)
    assert gen.videos == [] and gen.latents is None
    assert gen.state.step == 1 and gen.info == {"stopped_after": 1, "segment": 1}


def test_a_progress_preview_shows_the_running_clips_video_latents(tiny, examples):
    """A server's progress preview (pipeline/preview.py) on S2V: asked after a step of each clip,
    it gets that clip's predicted video latents — the video's tokens only, not the reference and
    motion tokens after them — and the video is the same as without a preview."""
    from harness.jax_runs import raw_config
    from harness.previews import EveryStepPreview

    from parallel_wan.backends import make_backend
    from parallel_wan.pipeline import generate
    from parallel_wan.run import validate_job

    settings = ["model=tiny_s2v", f"checkpoint_dir={tiny[1]}", "steps=3", "num_frames=8", "num_clips=2"]
    job, ckpt = validate_job(raw_config([*settings, f"image={examples['image']}", f"audio={examples['audio']}"]), 1)
    preview = EveryStepPreview()

    plain = generate(job.base, make_backend(job.base), ckpt)
    watched = generate(job.base, make_backend(job.base), ckpt, preview=preview)
    assert np.array_equal(watched.frames, plain.frames)
    video = (1, 16, 2, 8, 8)  # 8 frames of 64 px: 2 latent frames of 8 × 8 latents
    assert preview.shown == [(1, video), (2, video)] * 2, preview.shown
