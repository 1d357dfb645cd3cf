"""The audio features of each clip's video frames: 30-per-second features sampled at the video's
16 fps, one per frame (the official `get_audio_embed_bucket_fps` with m = 0: the nearest earlier
feature), zeros past the audio's end, in whole clips. Plain numpy."""

from __future__ import annotations

import math

import numpy as np

from .wav2vec import VIDEO_RATE


def clips_needed(frames_30: int, clip_frames: int, fps: int) -> int:
    """How many clips of `clip_frames` video frames the audio's `frames_30` features fill (the
    official rule: always one more than whole clips, so the last partial one is made)."""
    return int(frames_30 / (clip_frames * (VIDEO_RATE / fps))) + 1


def clip_features(features: np.ndarray, clip_frames: int, fps: int) -> tuple[np.ndarray, int]:
    """features (layers, frames at 30/s, width) → ((layers, width, clips · clip_frames) one per video
    frame, clips)."""
    layers, frames_30, width = features.shape
    clips = clips_needed(frames_30, clip_frames, fps)
    wanted = clips * clip_frames
    padded = math.ceil(wanted / fps * VIDEO_RATE)  # the features the clips span, the audio's and past it
    times = np.linspace(0, wanted / fps, wanted, endpoint=False)
    index = np.clip(np.round(times * VIDEO_RATE).astype(int), 0, padded - 1)
    out = np.zeros((wanted, layers, width), np.float32)
    inside = index < frames_30
    out[inside] = features[:, index[inside]].transpose(1, 0, 2)
    return np.ascontiguousarray(out.transpose(1, 2, 0)), clips
