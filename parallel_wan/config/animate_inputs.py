"""Animate-14B's inputs (pose_video=, face_video=, mode=, background_video=, mask_video=,
prev_segment_frames=): checked here far enough that a bad one is one line before anything
loads — each file is a video, they agree in length and size, the mask is a mask — and refused
for a model that does not take them. The names are diffusers' `WanAnimatePipeline`'s.

num_frames is an Animate run's segment length (diffusers' `segment_frame_length`, 77 in the
preset); the video is as long as the pose video (models/animate_segments.py)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from ..backends.capabilities import capabilities
from ..errors import ConfigError
from ..models.animate_segments import PREV_FRAMES, SegmentPlan
from ..models.registry import architecture
from ..models.variants import BACKGROUND_VIDEO, FACE_VIDEO, MASK_VIDEO, POSE_VIDEO
from .schema import _as
from .source_video import refuse_source_videos, video_frames, video_size

MODES = ("animate", "replace")
VIDEO_INPUTS = (POSE_VIDEO, FACE_VIDEO, BACKGROUND_VIDEO, MASK_VIDEO)
# A mask's frames are black (keep) and white (replace); an mp4's compression greys the edges, so
# a few mid-grey pixels are fine, but a mask with more than this share of them is another video.
MASK_GREY_SHARE = 0.05
MASK_GREY = (16, 240)  # values strictly between these are grey


@dataclass(frozen=True)
class AnimateInputs:
    pose_video: str
    face_video: str
    mode: str  # animate | replace
    background_video: str | None
    mask_video: str | None
    prev_segment_frames: int
    frames: int  # the pose video's frames: the output's length

    def plan(self, segment_frames: int) -> SegmentPlan:
        return SegmentPlan(self.frames, segment_frames, self.prev_segment_frames)


def with_examples(cfg: Mapping, model) -> Mapping:
    """A built-in Animate model run with none of image=, pose_video=, face_video= gets the
    built-in example inputs (builtin/animate_examples.py; replace mode: its background and mask
    too), so `python -m parallel_wan.run model=tiny_animate` makes a video on a fresh machine.
    Any of them given: nothing is filled in (a half-given set is refused as usual)."""
    arch = architecture(model.architecture)
    if not model.builtin or arch.variant.input(FACE_VIDEO) is None:
        return cfg
    if any(cfg.get(k) for k in ("image", *VIDEO_INPUTS)):
        return cfg
    import logging

    from ..builtin.animate_examples import stored_examples

    examples = stored_examples(arch.transformer.animate.motion_encoder_size)
    if cfg.get("mode") != "replace":
        examples = {k: v for k, v in examples.items() if k not in (BACKGROUND_VIDEO, MASK_VIDEO)}
    logging.getLogger("parallel_wan").info(
        "model=%s with no inputs: the built-in example character and driving videos (%s)",
        model.name,
        os.path.dirname(examples["image"]),
    )
    return {**cfg, **examples}


def animate_inputs(cfg: Mapping, model, num_frames: int) -> AnimateInputs | None:
    """The Animate inputs of a run, checked; None for a model that takes none (and then none may
    be given)."""
    given = {k: _as(str, k, cfg[k]) for k in VIDEO_INPUTS if cfg.get(k)}
    variant = architecture(model.architecture).variant
    if variant.input(FACE_VIDEO) is None:
        refused = [k for k in given if variant.input(k) is None]  # S2V takes a pose video (config/s2v_inputs.py)
        if refused:
            key = refused[0]
            raise ConfigError(
                f"{key}={given[key]} was given but model={model.name} takes no {key}; driving videos are "
                "Animate-14B's (model=wan2.2_animate_14b); drop it",
                setting=(key, "model"),
            )
        # the defaults (mode=animate, prev_segment_frames=1) ask for nothing; another value is Animate's
        for key, default in (("mode", "animate"), ("prev_segment_frames", 1)):
            if cfg.get(key) not in (None, default):
                raise ConfigError(
                    f"{key}={cfg[key]} is Animate-14B's (model=wan2.2_animate_14b); model={model.name} takes no "
                    f"{key}; drop it",
                    setting=(key, "model"),
                )
        return None
    for key in (POSE_VIDEO, FACE_VIDEO):
        if key not in given:
            raise ConfigError(
                f"model={model.name} animates a character by a driving video; set {key}=PATH (an mp4; README "
                '"Animate" says how to make it)',
                setting=(key, "model"),
            )
    mode = _as(str, "mode", cfg.get("mode") or "animate")
    if mode not in MODES:
        raise ConfigError(f"mode={mode} is not one of {', '.join(MODES)}", setting="mode")
    replace_inputs = [k for k in (BACKGROUND_VIDEO, MASK_VIDEO) if k in given]
    if mode == "animate" and replace_inputs:
        raise ConfigError(
            f"{replace_inputs[0]}= is for mode=replace (the character put into that video); set mode=replace "
            f"or drop {replace_inputs[0]}=",
            setting=(replace_inputs[0], "mode"),
        )
    if mode == "replace":
        for key in (BACKGROUND_VIDEO, MASK_VIDEO):
            if key not in given:
                raise ConfigError(f"mode=replace needs {key}=PATH (an mp4)", setting=key)
    prev = cfg.get("prev_segment_frames", 1)
    prev = _as(int, "prev_segment_frames", 1 if prev is None else prev)
    if prev not in PREV_FRAMES:
        raise ConfigError(
            f"prev_segment_frames={prev} must be 1 or 5 (the frames each segment continues from)",
            setting="prev_segment_frames",
        )
    frames, sizes = {}, {}
    for key, path in given.items():
        if not os.path.isfile(path):
            raise ConfigError(f"{key}={path} does not exist; give the path of an mp4", setting=key)
        frames[key], sizes[key] = video_frames(path, key), video_size(path, key)
    _check_lengths(frames)
    _check_sizes(sizes)
    if frames[POSE_VIDEO] <= prev:
        raise ConfigError(
            f"pose_video={given[POSE_VIDEO]} has {frames[POSE_VIDEO]} frame(s); it needs at least {prev + 1} "
            f"(prev_segment_frames={prev})",
            setting=POSE_VIDEO,
        )
    if num_frames <= prev:
        raise ConfigError(
            f"num_frames={num_frames} is Animate's segment length and must exceed prev_segment_frames={prev}; "
            "the preset's is 77",
            setting=("num_frames", "prev_segment_frames"),
        )
    if MASK_VIDEO in given:
        check_mask(given[MASK_VIDEO])
    return AnimateInputs(
        pose_video=given[POSE_VIDEO],
        face_video=given[FACE_VIDEO],
        mode=mode,
        background_video=given.get(BACKGROUND_VIDEO),
        mask_video=given.get(MASK_VIDEO),
        prev_segment_frames=prev,
        frames=frames[POSE_VIDEO],
    )


def _check_lengths(frames: dict) -> None:
    pose = frames[POSE_VIDEO]
    for key, count in frames.items():
        if count != pose:
            raise ConfigError(
                f"{key} has {count} frames but pose_video has {pose}; the driving videos come from one video "
                "and must be equally long",
                setting=(key, POSE_VIDEO),
            )


def _check_sizes(sizes: dict) -> None:
    width, height = sizes[FACE_VIDEO]
    if width != height:
        raise ConfigError(
            f"face_video is {width}x{height}; its frames are square face crops (512x512 for Animate-14B)",
            setting=FACE_VIDEO,
        )
    pose = sizes[POSE_VIDEO]
    for key in (BACKGROUND_VIDEO, MASK_VIDEO):
        if key in sizes and sizes[key] != pose:
            raise ConfigError(
                f"{key} is {sizes[key][0]}x{sizes[key][1]} but pose_video is {pose[0]}x{pose[1]}; the pose, "
                "background and mask videos come from one video and must be the same size",
                setting=(key, POSE_VIDEO),
            )


def check_mask(path: str) -> None:
    """A mask video's first, middle and last frames must be black and white (a grey share of at
    most MASK_GREY_SHARE): a colour video given as the mask is refused before anything loads."""
    import imageio.v3 as iio
    import numpy as np

    count = video_frames(path, MASK_VIDEO)
    wanted = sorted({0, count // 2, count - 1})
    for index, frame in enumerate(iio.imiter(path, plugin="FFMPEG")):
        if index in wanted:
            pixels = np.asarray(frame)[..., :3].astype(np.int16)
            grey = pixels.mean(axis=-1)
            coloured = float((pixels.max(axis=-1) - pixels.min(axis=-1) > 48).mean())
            between = float(((grey > MASK_GREY[0]) & (grey < MASK_GREY[1])).mean())
            if between > MASK_GREY_SHARE or coloured > MASK_GREY_SHARE:
                raise ConfigError(
                    f"mask_video={path} frame {index} is not a mask ({100 * max(between, coloured):.0f}% of its "
                    "pixels are grey or coloured); give a black-and-white video, white where the person to "
                    "replace is",
                    setting=MASK_VIDEO,
                )
        if index >= wanted[-1]:
            break


def check_animate_run(spec) -> None:
    """What an Animate run does not do yet (issue 42 builds them): refused in one line at the
    start, naming the setting, rather than running something no test holds to a reference."""
    if spec.video.animate is None:
        return
    refuse_source_videos(spec, "its driving videos")
    not_yet = []
    if not capabilities(spec.execution.backend).segment_inputs:
        not_yet.append((f"backend={spec.execution.backend}", "backend", "use backend=torch"))
    if spec.cache.on:
        not_yet.append((f"cache={spec.cache.kind}", "cache", "use cache=none"))
    if not_yet:
        what, setting, fix = not_yet[0]
        raise ConfigError(
            f"model={spec.model.name}: Animate runs with {what} are not built yet (issue 42); {fix}",
            setting=setting,
        )
