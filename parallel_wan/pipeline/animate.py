"""Animate-14B's generation, segment by segment, as diffusers' WanAnimatePipeline (and the
official `wan22` animate code) make it:

once    the text; the character image's CLIP features (image/clip.py, on the text-encoding
        process, broadcast); its letterboxed frame through the VAE — the reference latent frame,
        under a mask of ones, that opens every segment's joined condition;
segment the pose frames through the VAE (their latents embedded and added to the tokens of
        every frame but the reference's); the face crops through the motion and face encoders
        (once per segment, not per step: models/animate_transformer.segment_inputs); the
        condition video — the previous segment's last `prev_segment_frames` decoded frames (the
        first segment: none), then black, or in replace mode the background — through the VAE,
        its mask marking the frames given (replace mode: where the person is not); the seeded
        noise (the segment's draw of the prompt's generator); the denoising loop (the sampler
        starts afresh); the decode, whose floats condition the next segment;
end     the segments' frames joined — each after the first without the frames it shares with
        the one before — and cut to the pose video's length.

With guidance above 1 the unconditional half sees blank face crops (−1) as well as the negative
prompt (both references). Every mesh and both backends, several prompts in one run (each its
own seed + i and its own previous frames); what is not built yet (step caches) is refused at the
start (config/animate_inputs.py).
"""

from __future__ import annotations

import logging
import math

import numpy as np

from ..models import animate_transformer as animate, latent, transformer as dit, vae
from ..models.animate_segments import SegmentPlan
from ..models.experts import SINGLE
from ..report.timing import PhaseTimer
from .animate_inputs import driving_video, reference_image
from .denoise import DenoiseTask, denoise, draw_noise
from .local_work import gather_latent_tokens, local_work
from .preview import segment_watch
from .segmented import SegmentStopped
from .sidecar import segmented_info
from .steps import pick_schedule, step_plan, unguided_experts

log = logging.getLogger("parallel_wan")


def generate_animate(spec, backend, loaded, ckpt, context, progress, timer: PhaseTimer, should_stop=None, preview=None):
    """(videos, the last segment's latents on the host, the sidecar's info) of an Animate run;
    `loaded` and `context` as generate() has them."""
    ops, video, a = backend.ops, spec.video, spec.video.animate
    tcfg = loaded.experts[SINGLE][0]
    vcfg = loaded.vae_config
    plan: SegmentPlan = a.plan(video.num_frames)
    height, width, rows = video.height, video.width, len(video.prompts)
    with timer.phase("vae_encode"):
        image, original, image_record = reference_image(video.image, height, width)
        pose, pose_record = driving_video(a.pose_video, height, width, plan.padded_frames)
        side = tcfg.animate.motion_encoder_size
        faces, face_record = driving_video(a.face_video, side, side, plan.padded_frames)
        background = mask = None
        if a.mode == "replace":
            background, _ = driving_video(a.background_video, height, width, plan.padded_frames)
            mask, _ = driving_video(a.mask_video, height, width, plan.padded_frames, mask=True)
        features = _image_features(loaded, original, backend)
        reference = _reference_condition(image, vcfg, loaded.vae_params, ops, backend)

    # a segment's latents: the reference frame's, then its frames'
    reference_frames = spec.model.variant.reference_frames
    shape = latent.latent_shape(video.num_frames, height, width, tcfg.out_channels, vcfg, reference_frames)
    grid = dit.patch_grid(tcfg, shape)
    frame_tokens = grid[1] * grid[2]
    work = local_work(spec, math.prod(grid), backend)
    schedule_kind, schedule = pick_schedule(spec, ckpt)
    decoder = backend.video_decoder(loaded.vae_params, vcfg)
    # what the transformer reads goes in its dtype, as diffusers casts the image embeddings, pose
    # latents and face crops (the latents and the joined condition stay float32 until the forward)
    dtype = spec.execution.dtype
    image_features = ops.cast(features, dtype)
    blank = None  # the unconditional half's face crops, when some step guides
    if spec.uses_guidance:
        blank = ops.cast(backend.to_device(np.full((1, 3, video.num_frames, side, side), -1.0, np.float32)), dtype)

    outputs, previous, latents = [[] for _ in range(rows)], None, None
    for segment in range(plan.segments):
        start, stop = plan.window(segment)
        if plan.segments > 1:
            log.info(
                "segment %d/%d: driving frames %d–%d%s",
                segment + 1,
                plan.segments,
                start,
                stop - 1,
                f" (continuing from the last {a.prev_segment_frames} decoded)" if segment else "",
            )
        with timer.phase("vae_encode"):
            pose_tokens = ops.cast(
                _latent_tokens(pose.window(start, stop), vcfg, tcfg, loaded.vae_params, ops, backend), dtype
            )
            cond = [
                _segment_condition(
                    reference,
                    previous[row][:, :, -a.prev_segment_frames :] if previous is not None else None,
                    None if background is None else background.window(start, stop),
                    None if mask is None else mask.window(start, stop),
                    a.prev_segment_frames,
                    video.num_frames,
                    vcfg,
                    loaded.vae_params,
                    ops,
                    backend,
                )
                # one condition for every prompt, then each prompt its own — every prompt's on every
                # process: the VAE encode is one collective over the ranks, which must encode alike
                for row in range(rows if previous is not None else 1)
            ]
            if len(cond) > 1:  # this controller's prompts (dp carries prompts: one a rank)
                cond = ops.concat([cond[row] for row in work.rows], axis=0)
            else:
                cond = cond[0]
            face = ops.cast(backend.to_device(faces.window(start, stop)), dtype)
            # raw: the predictor makes the segment's inputs with the expert's weights as it holds them
            arrays = animate.SegmentArrays(pose_tokens, image_features, face, blank, frame_tokens)
        task = DenoiseTask(
            loaded.experts,
            context,
            rows,
            work,
            grid,
            spec.uses_guidance,
            per_token_timestep=False,
            cond_tokens=work.local(dit.patchify(cond, tcfg.patch_size, ops), backend),
            unguided=unguided_experts(spec),
            segment_inputs=arrays,
        )
        with timer.phase("segment_inputs"):  # JAX makes the pose, image and face tokens here; torch at step 1
            predict = backend.noise_predictor(task)
        x = predict.shard(work.local(draw_noise(spec, work.rows, shape, backend, tcfg.patch_size, segment), backend))
        with timer.phase("denoise"):
            watch = segment_watch(
                spec, schedule, work, grid, tcfg.patch_size, backend, preview, skip_frames=reference_frames
            )
            state = denoise(spec, schedule, x, predict, progress, ops, should_stop=should_stop, watch=watch)
            if state.step < schedule.steps:  # a server's DELETE: the video ends here, nothing decoded
                raise SegmentStopped(state, segment)
            tokens = gather_latent_tokens(state.latents, work, spec, backend)
        latents = dit.unpatchify(tokens, grid, tcfg.patch_size, ops)
        with timer.phase("vae_decode"):  # the reference frame is not decoded
            frames, previous = decoder.frames_and_tail(latents[:, :, 1:], a.prev_segment_frames)
        for row, decoded in enumerate(frames):  # the writing process only
            outputs[row].append(decoded[plan.kept(segment) :])
    videos = [np.concatenate(parts)[: a.frames] for parts in outputs if parts]
    info = segmented_info(spec, backend, ckpt, schedule_kind, schedule, shape, work, tcfg, loaded.loras, image_record)
    info["animate"] = {
        "mode": a.mode,
        "segments": plan.segments,
        "segment_frames": plan.segment_frames,
        "prev_segment_frames": plan.prev_frames,
        "padded_frames": plan.padded_frames,
        "pose_video": pose_record,
        "face_video": face_record,
        "steps_per_segment": len(step_plan(spec, schedule)),
    }
    return videos, backend.to_host(latents), info


def _image_features(loaded, original, backend):
    """CLIP's penultimate hidden states of the image as given, on the text-encoding process,
    broadcast to every process's device; the encoder is released after a single generation (a job keeps it for its next
    entries: 1.3 GB in bf16 at ViT-H on that process)."""
    features = None
    if backend.encodes_text:
        features = loaded.image_encoder.features(original)
        if loaded.texts is None:  # a single generation; a job's next entries need the encoder again
            loaded.image_encoder.release()
    return backend.broadcast_from_main(None if features is None else backend.to_device(features))


def _encoded(video, vcfg, vae_params, ops, backend):
    """Normalised VAE latents (the posterior mean: diffusers' "argmax") of a (1, 3, T, H, W) host video."""
    return vae.normalize_latents(backend.vae_encode(vae_params, np.ascontiguousarray(video), vcfg), vcfg, ops)


def _reference_condition(image, vcfg, vae_params, ops, backend):
    """The reference frame's joined channels (1, 4 + z, 1, h, w): a mask of ones and its latent."""
    z = _encoded(image[:, :, None], vcfg, vae_params, ops, backend)
    ones = backend.to_device(np.ones((1, vcfg.scale_factor_temporal, *z.shape[2:]), np.float32))
    return ops.concat([ones, z], axis=1)


def _latent_tokens(video, vcfg, tcfg, vae_params, ops, backend):
    return dit.patchify(_encoded(video, vcfg, vae_params, ops, backend), tcfg.patch_size, ops)


def _segment_condition(reference, previous, background, mask, prev: int, frames: int, vcfg, vae_params, ops, backend):
    """One row's joined condition (1, 4 + z, 1 + T', h, w): the reference frame, then the
    segment's `frames`-frame condition video through the VAE under its mask (diffusers'
    prepare_prev_segment_cond_latents and get_i2v_mask). `previous`: the last segment's final
    `prev` decoded frames (None for the first segment); `background`, `mask`: the segment's
    frames of them in replace mode (else None)."""
    height, width = reference.shape[-2] * vcfg.scale_factor_spatial, reference.shape[-1] * vcfg.scale_factor_spatial
    if previous is None:
        head = background[:, :, :prev] if background is not None else np.zeros((1, 3, prev, height, width), np.float32)
    else:
        head = previous
    tail = (
        background[:, :, prev:]
        if background is not None
        else np.zeros((1, 3, frames - prev, height, width), np.float32)
    )
    z = _encoded(np.concatenate([head, tail], axis=2), vcfg, vae_params, ops, backend)
    stride = vcfg.scale_factor_temporal
    lh, lw = z.shape[-2:]
    if mask is not None:  # 1 where the frame is kept: outside the person; nearest-neighbour to the latent grid
        step = height // lh
        pixels = 1.0 - mask[0, 0, :, ::step, ::step][:, :lh, :lw]
    else:
        pixels = np.zeros((frames, lh, lw), np.float32)
    if previous is not None:
        pixels[:prev] = 1.0
    pixels = np.concatenate([np.repeat(pixels[:1], stride, axis=0), pixels[1:]])  # the first frame × stride
    per_latent = pixels.reshape(-1, stride, lh, lw).transpose(1, 0, 2, 3)[None]  # (1, stride, T', h, w)
    segment = ops.concat([backend.to_device(np.ascontiguousarray(per_latent, np.float32)), z], axis=1)
    return ops.concat([reference, segment], axis=2)
