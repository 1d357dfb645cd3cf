"""backend=jax on 8 CPU devices (one process, mesh dp2_cp4) serves the same videos as the
command line on one torch process — a text-only request and one whose first frame is uploaded
as `input_reference` through the openai SDK (TI2V)."""

import numpy as np
import openai
import pytest
from harness.cli import run_in_process
from harness.frames import assert_same_frames
from harness.images import write_png
from harness.serve import SETTINGS, Server

START = [s for s in SETTINGS if not s.startswith("model=")] + ["model=tiny_ti2v"]


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
@pytest.mark.filterwarnings("ignore:The Sora API:DeprecationWarning")
def test_a_jax_server_on_8_devices_serves_the_clis_videos(tmp_path):
    image = write_png(tmp_path / "first.png", 64, 64)
    server = Server(tmp_path / "storage", [*START, "backend=jax", "mesh=dp2_cp4"]).wait_ready(timeout=600)
    try:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
        with open(image, "rb") as f:
            with_image = client.videos.create(
                prompt="a lighthouse", input_reference=("first.png", f, "image/png"), extra_body={"seed": 5}
            )
        text_only = server.post(prompt="a harbour at night", seed=6)
        for video_id in (with_image.id, text_only["id"]):
            assert server.wait_for(video_id, "completed", timeout=600)["progress"] == 100
        frames = {video_id: server.frames(video_id) for video_id in (with_image.id, text_only["id"])}
    finally:
        server.stop()
    for video_id, settings in (
        (with_image.id, ["prompt='a lighthouse'", "seed=5", f"image={image}"]),
        (text_only["id"], ["prompt='a harbour at night'", "seed=6"]),
    ):
        run_in_process(tmp_path / video_id, *START, "backend=torch", *settings)
        assert_same_frames(
            frames[video_id], np.load(tmp_path / video_id / "frames.npy"), f"{video_id}: JAX server vs CLI"
        )
