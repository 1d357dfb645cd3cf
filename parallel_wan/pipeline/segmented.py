"""Variants made segment by segment with a loop of their own (Animate-14B: pipeline/animate.py,
S2V-14B: pipeline/s2v.py), and how such a run stops early.

A segmented run has no resumable state (each segment is conditioned on the last one's decoded
frames; a loop state alone cannot restart it), so only a server's DELETE stops one mid-video:
its vote ends the current segment's loop after the step it is at, and the run ends there with
nothing decoded (`SegmentStopped`). A signal does not stop it: the video is finished first
(jobs/one_entry.py), as a prompt file's preempted job ends once its current video is done."""

from __future__ import annotations

from ..config import RunSpec


class SegmentStopped(Exception):
    """A segment's loop stopped early (`should_stop`): its state, and which segment it was."""

    def __init__(self, state, segment: int):
        super().__init__(f"stopped after step {state.step} of segment {segment}")
        self.state, self.segment = state, segment


def is_segmented(spec: RunSpec) -> bool:
    """Whether the run is made segment by segment (its generation: generate._segmented)."""
    return spec.video.animate is not None or spec.video.s2v is not None
