"""Animate's segments (models/animate_segments.py): the padding walk is diffusers'
`pad_video_frames` frame for frame, and the windows cover the padded driving video the way
diffusers' WanAnimatePipeline loops over it (the whole-video reference test,
tests/pipeline/test_animate_reference.py, runs more than one segment against it)."""

from __future__ import annotations

import pytest
from diffusers import WanAnimatePipeline

from parallel_wan.models.animate_segments import SegmentPlan, padded_indices


@pytest.mark.parametrize("frames", [2, 3, 5, 8, 13])
def test_the_padding_walks_back_and_forth_as_diffusers_does(frames):
    for target in range(1, 4 * frames):
        assert padded_indices(frames, target) == WanAnimatePipeline.pad_video_frames(None, list(range(frames)), target)


@pytest.mark.parametrize(
    "frames, segment, prev, segments, padded",
    [
        (77, 77, 1, 1, 77),  # one segment exactly
        (78, 77, 1, 2, 153),  # one frame more: a second segment, padded to its end
        (153, 77, 1, 2, 153),
        (154, 77, 5, 3, 221),  # 5 shared frames: 72 new ones per segment after the first
        (13, 9, 1, 2, 17),  # the reference test's: 2 segments of 9, 4 padding frames
        (5, 9, 1, 1, 9),  # shorter than a segment: padded to one
    ],
)
def test_the_segments_cover_the_pose_video(frames, segment, prev, segments, padded):
    plan = SegmentPlan(frames, segment, prev)
    assert (plan.segments, plan.padded_frames) == (segments, padded)
    assert plan.window(0) == (0, segment) and plan.window(segments - 1)[1] == padded
    for s in range(1, segments):  # each segment starts on the previous one's last prev frames
        assert plan.window(s)[0] == plan.window(s - 1)[1] - prev
        assert plan.window(s)[0] + prev < frames  # diffusers asserts every segment has a new pose frame
    output = sum(segment - plan.kept(s) for s in range(segments))
    assert output == padded >= frames  # cut back to the pose video's length afterwards


@pytest.mark.parametrize(
    "args, message",
    [((10, 77, 2), "must be one of"), ((10, 5, 5), "must exceed"), ((1, 77, 1), "needs at least 2")],
)
def test_a_plan_no_reference_runs_is_refused(args, message):
    with pytest.raises(ValueError, match=message):
        SegmentPlan(*args)
