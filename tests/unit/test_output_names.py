"""A generation's file names have one home (report/output_names.py, issue 39 item 4): what
save_generation writes is what the names say, what a job's re-run finds and what the server
serves and deletes."""

import fnmatch
from types import SimpleNamespace

import numpy as np

from parallel_wan.jobs.resume import sidecar_path, video_path
from parallel_wan.jobs.single_outputs import earlier_files
from parallel_wan.report.output_names import (
    frames_name,
    one_video_names,
    sidecar_name,
    video_name,
    video_patterns,
)
from parallel_wan.report.outputs import save_generation
from parallel_wan.serve import files


def frames(count=4, seed=0):
    return np.random.default_rng(seed).integers(0, 255, (count, 16, 16, 3), dtype=np.uint8)


def test_a_batch_and_a_named_video_are_written_under_the_names_given(tmp_path):
    batch = save_generation(str(tmp_path / "a"), [frames(), frames(seed=1)], 16, {}, True, stem="video")
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == sorted(
        [video_name("video", 0), video_name("video", 1), frames_name("video", 0), frames_name("video", 1)]
        + [sidecar_name("video")]
    )
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == sorted(
        ["video_000.mp4", "video_001.mp4", "frames_000.npy", "frames_001.npy", "video.json"]
    )
    assert batch["sidecar"] == str(tmp_path / "a" / "video.json")

    one = save_generation(str(tmp_path / "b"), [frames()], 16, {}, True, stem="boat")
    names = sorted(p.name for p in (tmp_path / "b").iterdir())
    assert names == sorted(one_video_names("boat")) == ["boat.frames.npy", "boat.json", "boat.mp4"]
    assert one["video"] == video_path(str(tmp_path / "b"), "boat")
    assert one["sidecar"] == sidecar_path(str(tmp_path / "b"), "boat")
    for folder, stem in ((tmp_path / "a", "video"), (tmp_path / "b", "boat")):
        written = {p.name for p in folder.iterdir()} - {sidecar_name(stem)}
        assert all(any(fnmatch.fnmatch(n, pattern) for pattern in video_patterns(stem)) for n in written)
        assert {p.rsplit("/", 1)[1] for p in earlier_files(str(folder), stem)} == written


def test_the_server_serves_and_deletes_the_files_of_those_names(tmp_path):
    settings = SimpleNamespace(videos_dir=str(tmp_path / "videos"), inputs_dir=str(tmp_path / "inputs"))
    paths = save_generation(settings.videos_dir, [frames()], 16, {}, True, stem="video_abc")
    assert files.video_path(settings, "video_abc") == paths["video"]
    files.delete_files(settings, "video_abc")
    assert list((tmp_path / "videos").iterdir()) == []
