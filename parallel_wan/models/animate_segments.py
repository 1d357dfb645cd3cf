"""How Animate-14B makes a video of any length: in segments of `segment_frames` frames (4k + 1;
77 in both references), each after the first conditioned on the last `prev_frames` (1 or 5)
frames the previous segment decoded, so consecutive segments overlap by `prev_frames` frames.
The driving videos are padded to a whole number of segments by walking back and forth over their
frames (diffusers' `pad_video_frames`), and the output is cut back to the pose video's length.

Plain arithmetic (no torch, no jax): the pipeline, the planner and the config checks ask it.
"""

from __future__ import annotations

from dataclasses import dataclass

PREV_FRAMES = (1, 5)  # the previous segment's frames a segment is conditioned on (both references allow these)


@dataclass(frozen=True)
class SegmentPlan:
    frames: int  # the pose video's frames: the output's length
    segment_frames: int  # frames per segment (4k + 1)
    prev_frames: int  # frames a segment shares with the one before it

    def __post_init__(self):
        if self.prev_frames not in PREV_FRAMES:
            raise ValueError(f"prev_segment_frames={self.prev_frames} must be one of {PREV_FRAMES}")
        if self.segment_frames <= self.prev_frames:
            raise ValueError(
                f"num_frames={self.segment_frames} (the segment length) must exceed "
                f"prev_segment_frames={self.prev_frames}"
            )
        if self.frames <= self.prev_frames:
            raise ValueError(f"the pose video has {self.frames} frames; it needs at least {self.prev_frames + 1}")

    @property
    def step(self) -> int:
        """New frames per segment after the first (diffusers' effective segment length)."""
        return self.segment_frames - self.prev_frames

    @property
    def padded_frames(self) -> int:
        """The driving videos' length once padded: prev_frames plus a whole number of steps."""
        rest = (self.frames - self.prev_frames) % self.step
        return self.frames + (self.step - rest if rest else 0)

    @property
    def segments(self) -> int:
        return (self.padded_frames - self.prev_frames) // self.step

    def window(self, segment: int) -> tuple[int, int]:
        """[start, stop) of the padded driving videos' frames that segment `segment` renders."""
        start = segment * self.step
        return start, start + self.segment_frames

    def kept(self, segment: int) -> int:
        """How many of a segment's decoded frames open the output's new frames: all of the first
        segment's, then each later segment's after the prev_frames it shares."""
        return 0 if segment == 0 else self.prev_frames


def padded_indices(frames: int, target: int) -> list[int]:
    """The frame index of each of `target` frames, walking 0, 1, …, frames − 1, frames − 2, …, 0,
    1, … (diffusers' `pad_video_frames`): a video shorter than the padded length plays on back
    and forth rather than freezing or jumping."""
    if frames == 1:
        return [0] * target
    period = 2 * (frames - 1)
    return [i % period if i % period < frames else period - i % period for i in range(target)]
