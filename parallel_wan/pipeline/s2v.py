"""S2V-14B's generation, clip by clip, as the official `wan22` speech-to-video code makes it
(`WanS2V.generate`: with or without a pose video; no TTS, not starting from the reference):

once   the text; the speech through wav2vec2 (audio/: 25 hidden states, resampled to 30 per
       second, sampled at the video's frame rate into whole clips of `num_frames`); the portrait
       resized and centre-cropped to the video's size (s2v_inputs.portrait) and through the VAE
       — its latent's tokens join every clip's sequence; `motion_frames` grey frames, the
       motion frames' start (the official code encodes them too, but the first clip drops
       them, so nothing reads their latents: not encoded here);
clip k the noise (a generator seeded seed + k, as the official code seeds each clip); the
       denoising loop with the clip's audio features, the reference tokens and (after the
       first clip) the motion tokens of the last clip's frames; the decode of the motion
       latents then the clip's (the first clip: the reference latent then the clip's, its first
       3 frames dropped), the clip's frames the last `num_frames` of it; its last frames (up to
       `motion_frames`) shifted into the motion frames, floats, and through the VAE again;
end    the clips joined: (num_frames − 3) + (clips − 1)·num_frames frames; the mp4 carries the
       audio (report/outputs.py muxes it in).

Sequence parallelism shards the whole sequence — the video's tokens, then the reference's and
motion's — padded at its end as every model's; the sampler carries zeros for the extra tokens.
Both backends (config/s2v_inputs.check_s2v_run says what is refused); the unconditional half
hears silence (features × 0) beside the negative prompt.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from ..models import s2v_tokens, s2v_transformer as s2v, transformer as dit, vae
from ..models.experts import SINGLE
from ..report.timing import PhaseTimer
from .denoise import DenoiseTask, denoise
from .local_work import gather_latent_tokens, local_work
from .preview import segment_watch
from .s2v_inputs import PoseClips, audio_features, portrait
from .segmented import SegmentStopped
from .sidecar import segmented_info
from .steps import pick_schedule, step_plan, unguided_experts

log = logging.getLogger("parallel_wan")

FIRST_CLIP_DROPPED = 3  # the first clip's leading frames the official code drops (decoded from the reference)


def generate_s2v(spec, backend, loaded, ckpt, context, progress, timer: PhaseTimer, should_stop=None, preview=None):
    """(videos, the last clip's latents on the host, the sidecar's info) of an S2V run."""
    ops, video, inputs = backend.ops, spec.video, spec.video.s2v
    tcfg = loaded.experts[SINGLE][0]
    vcfg = loaded.vae_config
    frames, height, width = video.num_frames, video.height, video.width
    motion_frames = tcfg.s2v.motion_frames
    with timer.phase("audio"):
        features, clips, audio_record = audio_features(loaded, inputs.audio, frames, spec.model.fps, backend)
    if inputs.num_clips is not None and inputs.num_clips < clips:
        clips = inputs.num_clips
    dtype = spec.execution.dtype
    with timer.phase("vae_encode"):
        image, image_record = portrait(video.image, height, width)
        reference = _encoded(image, vcfg, loaded.vae_params, ops, backend)  # (1, 16, 1, h, w)
        # the motion frames start grey, as the official code's; their latents are first read by
        # the second clip (the first drops them and decodes after the reference), so they are
        # encoded only once the first clip's frames have shifted in
        last = np.zeros((1, 3, motion_frames, height, width), np.float32)
        motion = None

    latent_frames = (frames + 3 + motion_frames) // 4 - tcfg.s2v.motion_latent_frames
    shape = (
        1,
        tcfg.out_channels,
        latent_frames,
        height // vcfg.scale_factor_spatial,
        width // vcfg.scale_factor_spatial,
    )
    grid = dit.patch_grid(tcfg, shape)
    video_tokens = math.prod(grid)
    schedule_kind, schedule = pick_schedule(spec, ckpt)
    decoder = backend.video_decoder(loaded.vae_params, vcfg)
    reference_tokens = ops.cast(dit.patchify(reference, tcfg.patch_size, ops), dtype)
    # no pose video: the official condition is the pose latents × 0, so the pose embedding is its bias
    volume = math.prod(tcfg.patch_size) * tcfg.s2v.cond_dim
    no_pose = ops.cast(backend.to_device(np.zeros((1, video_tokens, volume), np.float32)), dtype)
    poses = None
    if inputs.pose_video is not None:
        with timer.phase("vae_encode"):
            poses = PoseClips(inputs.pose_video, clips, frames, height, width, spec.model.fps)

    outputs, latents = [], None
    for clip in range(clips):
        if clips > 1:
            start = 0 if clip == 0 else frames - FIRST_CLIP_DROPPED + (clip - 1) * frames
            stop = frames - FIRST_CLIP_DROPPED + clip * frames
            log.info(
                "clip %d/%d: video frames %d–%d%s", clip + 1, clips, start, stop - 1, " (continuing)" if clip else ""
            )
        audio = ops.cast(backend.to_device(features[None, :, :, clip * frames : (clip + 1) * frames]), dtype)
        pose_tokens = no_pose
        if poses is not None:  # the clip's poses through the VAE after its first frame, which is dropped
            with timer.phase("vae_encode"):
                z = _encoded(poses.clip(clip), vcfg, loaded.vae_params, ops, backend)[:, :, 1:]
                pose_tokens = ops.cast(dit.patchify(z, tcfg.patch_size, ops), dtype)
        arrays = s2v.SegmentArrays(
            pose_tokens=pose_tokens,
            reference_tokens=reference_tokens,
            motion_latents=None if clip == 0 else ops.cast(motion, dtype),  # the first clip drops them
            audio=audio,
        )
        # the work shards the whole sequence: the video's tokens, then the reference's and (after
        # the first clip) the motion's, which the sampler carries as zeros and never reads
        extra = len(s2v_tokens.extra_kinds(grid[1], grid[2], motion=clip > 0))
        work = local_work(spec, video_tokens + extra, backend)
        task = DenoiseTask(
            loaded.experts,
            context,
            len(video.prompts),
            work,
            grid,
            spec.uses_guidance,
            per_token_timestep=False,
            unguided=unguided_experts(spec),
            segment_inputs=arrays,
        )
        with timer.phase("segment_inputs"):
            predict = backend.noise_predictor(task)
        noise = _clip_noise(video.seed + clip, shape, tcfg.patch_size, backend)
        noise = ops.concat([noise, ops.zeros((1, extra, noise.shape[-1]), "float32", like=noise)], axis=1)
        x = predict.shard(work.local(noise, backend))
        with timer.phase("denoise"):
            watch = segment_watch(
                spec, schedule, work, grid, tcfg.patch_size, backend, preview, video_tokens=video_tokens
            )
            state = denoise(spec, schedule, x, predict, progress, ops, should_stop=should_stop, watch=watch)
            if state.step < schedule.steps:  # a server's DELETE: the video ends here, nothing decoded
                raise SegmentStopped(state, clip)
            tokens = gather_latent_tokens(state.latents, work, spec, backend)[:, :video_tokens]
        latents = dit.unpatchify(tokens, grid, tcfg.patch_size, ops)
        before = reference if clip == 0 else motion
        with timer.phase("vae_decode"):
            kept = frames - (FIRST_CLIP_DROPPED if clip == 0 else 0)
            tail = min(motion_frames, kept)
            decoded, tails = decoder.frames_and_tail(ops.concat([before, latents], axis=2), tail)
        for row in decoded:  # the writing process only
            outputs.append(row[-kept:])
        with timer.phase("vae_encode"):  # the motion frames the next clip continues from
            if clip + 1 < clips:
                last = np.concatenate([last[:, :, tail:], tails[0]], axis=2)
                motion = _encoded(last, vcfg, loaded.vae_params, ops, backend)
    videos = [np.concatenate(outputs)] if outputs else []
    info = segmented_info(spec, backend, ckpt, schedule_kind, schedule, shape, work, tcfg, loaded.loras, image_record)
    info["s2v"] = {
        "audio": audio_record,
        "clips": clips,
        "clip_frames": frames,
        "motion_frames": motion_frames,
        "frames": (frames - FIRST_CLIP_DROPPED) + (clips - 1) * frames,
        "steps_per_clip": len(step_plan(spec, schedule)),
        "pose_video": None if poses is None else poses.record,
    }
    return videos, backend.to_host(latents), info


def _encoded(video, vcfg, vae_params, ops, backend):
    """Normalised VAE latents (the posterior mean, as the official `vae.encode`) of a host video."""
    return vae.normalize_latents(backend.vae_encode(vae_params, np.ascontiguousarray(video), vcfg), vcfg, ops)


def _clip_noise(seed: int, shape, patch_size, backend):
    """The clip's noise as the official code draws it: a generator seeded `seed` (the run's seed
    plus the clip's index), float32 on the CPU, patch tokens."""
    import torch

    generator = torch.Generator("cpu").manual_seed(seed)
    noise = torch.randn(shape, generator=generator, dtype=torch.float32)
    return dit.patchify(backend.to_device(noise.numpy()), patch_size, backend.ops)
