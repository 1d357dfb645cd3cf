"""extend= (what a server's POST /v1/videos/extensions runs): a video continued from its last
frame with an image-to-video model. The output is the source's frames, then the new ones after
the shared first frame — which are an I2V run's from that last frame, bit for bit."""

import json

import numpy as np
import pytest
from harness.cli import run_in_process
from harness.videos import write_source_video
from PIL import Image


@pytest.mark.parametrize("model", ["tiny_i2v", "tiny_ti2v"])
def test_an_extension_is_the_source_then_an_i2v_run_from_its_last_frame(model, tmp_path):
    size = {"tiny_i2v": (64, 64), "tiny_ti2v": (64, 96)}[model]
    source = write_source_video(tmp_path / "source.mp4", frames=9, height=size[0], width=size[1])
    Image.fromarray(source[-1]).save(tmp_path / "last.png")  # lossless: the frame the run reads
    settings = [f"model={model}", f"height={size[0]}", f"width={size[1]}", "num_frames=5", "steps=2", "seed=3"]
    settings += ["dtype=float32", "save_frames=true", "prompt='the river goes on'"]  # the built-in model
    run_in_process(tmp_path / "ext", *settings, f"extend={tmp_path / 'source.mp4'}")
    run_in_process(tmp_path / "i2v", *settings, f"image={tmp_path / 'last.png'}")
    ext, i2v = np.load(tmp_path / "ext" / "frames.npy"), np.load(tmp_path / "i2v" / "frames.npy")
    assert ext.shape == (9 + 5 - 1, *size, 3)
    np.testing.assert_array_equal(ext[:9], source)  # the source as decoded
    np.testing.assert_array_equal(ext[9:], i2v[1:])  # the new frames: the I2V run's
    sidecar = json.loads((tmp_path / "ext" / "video.json").read_text())
    assert sidecar["frames_shape"] == [13, *size, 3] and sidecar["image"]["extends"]["frames"] == 9
