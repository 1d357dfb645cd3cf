"""backend=jax on 8 CPU devices (one process, mesh dp2_cp4, max_batch=2) serves the same videos as
the command line on one torch process — a text-only request, one whose first frame is uploaded
as `input_reference` through the openai SDK (TI2V), and two requests batched together, each with
its own seed and negative prompt — and a running job's preview; a DELETE of one job of a batch
sends the other on alone from the step where the batch stopped."""

import io

import imageio.v3 as iio
import numpy as np
import openai
import pytest
from harness.cli import run_in_process
from harness.frames import assert_same_frames
from harness.hold import Hold
from harness.images import write_png
from harness.previews import preview_image, wait_for_preview
from harness.serve import SETTINGS, Server, sidecar
from PIL import Image

START = [s for s in SETTINGS if not s.startswith("model=")] + ["model=tiny_ti2v"]
PAIR = [
    {"prompt": "a quay in fog", "seed": 2, "negative_prompt": "blurry"},
    {"prompt": "boats at noon", "seed": 8, "negative_prompt": "dark"},
]
TRIO = [{"prompt": f"a gull, take {i}", "seed": 20 + i, "negative_prompt": "still"} for i in range(3)]


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
@pytest.mark.filterwarnings("ignore:The Sora API:DeprecationWarning")
def test_a_jax_server_on_8_devices_serves_the_clis_videos(tmp_path):
    """… and previews a running job (the text-only one, held before its step 2) as one torch
    process previews it."""
    image = write_png(tmp_path / "first.png", 64, 64)
    hold = Hold(tmp_path, step=2, released=1)  # the first job runs through
    server = Server(tmp_path / "storage", [*START, "backend=jax", "mesh=dp2_cp4", "max_batch=2"], env=hold.env())
    server.wait_ready(timeout=600)
    try:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
        with open(image, "rb") as f:
            with_image = client.videos.create(
                prompt="a lighthouse", input_reference=("first.png", f, "image/png"), extra_body={"seed": 5}
            )
        text_only = server.post(prompt="a harbour at night", seed=6)
        url = f"/v1/videos/{text_only['id']}/content"
        hold.wait_held(processes=1, alive=server.alive, context=server.text)
        pair = [server.post(**r) for r in PAIR]  # queued behind the held job: one batch (max_batch=2)
        trio = [server.post(**r) for r in TRIO]  # then a batch of two, then one alone
        try:
            assert server.client.get(url, params={"variant": "thumbnail"}).status_code == 404  # asks for one
        finally:
            hold.release()
        preview = wait_for_preview(server, url)
        hold.release(3)  # the pair runs through; the trio's first two hold before their step 2
        hold.wait_held(processes=1, arrival=4, alive=server.alive, context=server.text)
        assert server.client.delete(f"/v1/videos/{trio[1]['id']}").status_code == 200
        hold.release_all()  # the jobs after it run through
        for video_id in (with_image.id, text_only["id"], *(job["id"] for job in pair + trio[::2])):
            assert server.wait_for(video_id, "completed", timeout=600)["progress"] == 100
        assert [sidecar(server, job["id"])["batch"] for job in pair] == [{"size": 2, "index": i} for i in (0, 1)]
        # the DELETE parted the trio's batch after its step 2: the first went on alone from step 3
        assert server.client.get(f"/v1/videos/{trio[1]['id']}").status_code == 404
        assert server.video(trio[0]["id"])["resumed_from_step"] == 3 and "batch" not in sidecar(server, trio[0]["id"])
        assert server.video(trio[2]["id"])["resumed_from_step"] is None
        # the harbour continued from its last frame: 5 new frames, the first of them its last
        extension = server.client.post(
            "/v1/videos/extensions",
            json={"video": {"id": text_only["id"]}, "prompt": "the harbour at dawn", "num_frames": 5},
        ).json()
        assert extension["seconds"] == "0.5", extension  # 9 + 4 frames at 24 fps
        server.wait_for(extension["id"], "completed", timeout=600)
        ids = (with_image.id, text_only["id"], extension["id"], *(job["id"] for job in pair + trio[::2]))
        frames = {video_id: server.frames(video_id) for video_id in ids}
    finally:
        hold.release_all()
        server.stop()
    step = int(preview.headers["x-preview-step"])
    assert step == 3, step  # held before step 2, asked there: made after step 3 (4 steps)
    expected = preview_image(START, step, 64, 64, prompt="'a harbour at night'", seed=6)
    got = Image.open(io.BytesIO(preview.content)).convert("RGB")
    assert np.abs(np.asarray(got, int) - np.asarray(expected, int)).mean() <= 1.0
    for video_id, settings in (
        (with_image.id, ["prompt='a lighthouse'", "seed=5", f"image={image}"]),
        (text_only["id"], ["prompt='a harbour at night'", "seed=6"]),
        # the batch's two, each with its own seed and negative prompt
        *(
            (job["id"], [f"prompt='{r['prompt']}'", f"seed={r['seed']}", f"negative_prompt='{r['negative_prompt']}'"])
            for job, r in zip(pair + trio[::2], PAIR + TRIO[::2])
        ),
    ):
        run_in_process(tmp_path / video_id, *START, "backend=torch", *settings)
        assert_same_frames(
            frames[video_id], np.load(tmp_path / video_id / "frames.npy"), f"{video_id}: JAX server vs CLI"
        )
    # the extension: the harbour's mp4 as decoded, then an I2V run's (torch, one process) from its last frame
    source = np.stack(list(iio.imiter(tmp_path / "storage" / "videos" / f"{text_only['id']}.mp4")))
    Image.fromarray(source[-1]).save(tmp_path / "last.png")
    run_in_process(
        tmp_path / "continued",
        *START,
        "backend=torch",
        "prompt='the harbour at dawn'",
        "num_frames=5",
        "seed=6",
        f"image={tmp_path / 'last.png'}",
    )
    extended = frames[extension["id"]]
    assert extended.shape == (13, 64, 64, 3) and np.array_equal(extended[:9], source)
    assert_same_frames(extended[9:], np.load(tmp_path / "continued" / "frames.npy")[1:], "the extension vs I2V")
