"""S2V-14B's inputs (audio=, num_clips=): checked here far enough that a bad one is one line
before anything loads — the file decodes, is long enough, is not silence — and refused for a
model that does not take them.

num_frames is an S2V run's clip length (the official `infer_frames`, 80 in the preset: a
multiple of 4); the video is as long as the audio needs, in whole clips (audio/features.py),
or `num_clips` clips when fewer (the official `num_clip`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from ..backends.capabilities import capabilities
from ..errors import ConfigError
from ..models.registry import architecture
from ..models.variants import AUDIO, POSE_VIDEO
from .schema import _as
from .source_video import refuse_source_videos, video_frames

MIN_SECONDS = 0.1  # less is not one wav2vec2 feature per video frame of a clip's start


@dataclass(frozen=True)
class S2VInputs:
    audio: str
    num_clips: int | None  # at most this many clips; None: all the audio needs
    seconds: float  # the audio's length
    pose_video: str | None = None  # poses to follow (rendered skeletons, as Animate's), optional

    def frames(self, clip_frames: int, fps: int) -> int:
        """The video's frames, from the audio's length (audio/features.clips_needed over the
        wav2vec2 frames of that many samples: a 400-sample window every 320) and num_clips."""
        from ..audio.features import clips_needed

        samples = round(self.seconds * 16000)
        frames_30 = int(((samples - 400) // 320 + 1) / 50 * 30)
        clips = clips_needed(frames_30, clip_frames, fps)
        if self.num_clips is not None:
            clips = min(clips, self.num_clips)
        return clip_frames - 3 + (clips - 1) * clip_frames


def with_examples(cfg: Mapping, model) -> Mapping:
    """A built-in S2V model run with neither image= nor audio= gets the built-in example portrait
    and speech (builtin/s2v_examples.py), so `python -m parallel_wan.run model=tiny_s2v` makes a
    video on a fresh machine. Either given: nothing is filled in."""
    if not model.builtin or architecture(model.architecture).variant.input(AUDIO) is None:
        return cfg
    if cfg.get("image") or cfg.get("audio"):
        return cfg
    import logging

    from ..builtin.s2v_examples import stored_examples

    examples = stored_examples(min(int(cfg.get("height") or model.height), int(cfg.get("width") or model.width)))
    logging.getLogger("parallel_wan").info(
        "model=%s with no inputs: the built-in example portrait and speech (%s)", model.name, examples["audio"]
    )
    return {**cfg, **examples}


def s2v_inputs(cfg: Mapping, model, num_frames: int) -> S2VInputs | None:
    """The S2V inputs of a run, checked; None for a model that takes no audio (and then none
    may be given)."""
    from ..audio.decode import AudioError, probe

    audio = cfg.get("audio")
    clips = cfg.get("num_clips")
    variant = architecture(model.architecture).variant
    if variant.input(AUDIO) is None:
        if audio:
            raise ConfigError(
                f"audio={audio} was given but model={model.name} takes no audio; speech-to-video is S2V-14B's "
                "(model=wan2.2_s2v_14b); drop audio=",
                setting=("audio", "model"),
            )
        if clips is not None:
            raise ConfigError(f"num_clips={clips} is S2V's (model=wan2.2_s2v_14b); drop it", setting="num_clips")
        return None
    if not audio:
        raise ConfigError(
            f"model={model.name} animates a portrait with speech; set audio=PATH (a WAV, FLAC or MP3 file)",
            setting=("audio", "model"),
        )
    audio = _as(str, "audio", audio)
    pose = cfg.get(POSE_VIDEO) or None
    if pose is not None:
        pose = _as(str, POSE_VIDEO, pose)
        if not os.path.isfile(pose):
            raise ConfigError(f"pose_video={pose} does not exist; give the path of an mp4", setting=POSE_VIDEO)
        video_frames(pose, POSE_VIDEO)  # a video ffmpeg reads, or one line
    if clips is not None:
        clips = _as(int, "num_clips", clips)
        if clips < 1:
            raise ConfigError(
                f"num_clips={clips} must be at least 1 (or null: as many as the audio needs)", setting="num_clips"
            )
    if num_frames < 4 or num_frames % 4:
        raise ConfigError(
            f"num_frames={num_frames} is S2V's clip length and must be a positive multiple of 4 (the preset's is 80); "
            f"try num_frames={max(4, 4 * round(num_frames / 4))}",
            setting="num_frames",
        )
    try:
        record = probe(audio, MIN_SECONDS)
    except AudioError as e:
        raise ConfigError(f"audio={e}", setting="audio") from None
    return S2VInputs(audio=audio, num_clips=clips, seconds=record["seconds"], pose_video=pose)


def check_s2v_run(spec) -> None:
    """What an S2V run does not do yet (issue 42 builds them): refused in one line at the start,
    naming the setting, rather than running something no test holds to the official code."""
    if spec.video.s2v is None:
        return
    refuse_source_videos(spec, "its portrait and speech")
    not_yet = []
    if not capabilities(spec.execution.backend).s2v:
        not_yet.append((f"backend={spec.execution.backend}", "backend", "use backend=torch"))
    if spec.cache.on:
        not_yet.append((f"cache={spec.cache.kind}", "cache", "use cache=none"))
    if spec.video.negative_prompts is not None or len(spec.video.prompts) > 1:
        not_yet.append(("more than one prompt", "prompt", "give one prompt"))
    if not_yet:
        what, setting, fix = not_yet[0]
        raise ConfigError(
            f"model={spec.model.name}: S2V runs with {what} are not built yet (issue 42); {fix}", setting=setting
        )
