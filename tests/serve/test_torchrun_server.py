"""One real server for the module: `torchrun --nproc-per-node 4 -m parallel_wan.serve` (gloo
ranks, the tiny model in float32) on 127.0.0.1 with PARALLEL_WAN_API_KEY set. Requests queued at
once each give the CLI's video; progress moves step by step; DELETE stops a running job after
its step on every rank; the official openai SDK works against it; without the key: 401."""

import io
import threading

import numpy as np
import openai
import pytest
from harness.cli import run_in_process
from harness.frames import assert_same_frames
from harness.hold import EVERY, Hold
from harness.previews import preview_image, wait_for_preview
from harness.serve import KEY, SETTINGS, Server, sidecar

from parallel_wan.serve.store import Store

# openai's SDK warns that its own Videos API will shut down; the API shape is what is tested here.
pytestmark = pytest.mark.filterwarnings("ignore:The Sora API:DeprecationWarning")


@pytest.fixture(scope="module")
def hold(tmp_path_factory):
    """The server's loops hold before step 5 (harness/hold.py): only the jobs of more than 5 steps
    reach it (every other job here has 4 or fewer), each until its test lets it go."""
    return Hold(tmp_path_factory.mktemp("hold"), step=5)


@pytest.fixture(scope="module")
def decoding(tmp_path_factory):
    """A hold after the last step, before the decode: open for every job, closed for one job by
    the test that needs it (Hold.hold_next)."""
    return Hold(tmp_path_factory.mktemp("decoding"), step="decode", released=EVERY)


@pytest.fixture(scope="module")
def server(tmp_path_factory, hold, decoding):
    storage = tmp_path_factory.mktemp("serve4") / "storage"
    start = [*SETTINGS, "served_model_names=sora-2"]  # OpenAI's own examples name their model
    server = Server(storage, start, ranks=4, key=KEY, env=hold.env() | decoding.env())
    try:
        yield server.wait_ready()
    finally:
        server.stop()


def cli_frames(tmp_path, name, **settings):
    """The CLI's frames for the server's start settings plus `settings` (one process)."""
    out = tmp_path / name
    run_in_process(out, *SETTINGS, *(f"{k}='{v}'" if isinstance(v, str) else f"{k}={v}" for k, v in settings.items()))
    return np.load(out / "frames.npy")


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_three_requests_queued_at_once_each_give_the_clis_video_and_progress_moves(server, hold, tmp_path):
    requests = [
        {"prompt": "a fox runs", "seed": 1, "num_inference_steps": 8},
        {"prompt": "a boat sails", "seed": 2, "size": "80x48"},
        {"prompt": "a kite flies", "seed": 3, "num_frames": 5, "guidance_scale": 5.0, "guidance_scale_2": 2.0},
    ]
    answers = [None] * 3

    def post(i):
        answers[i] = server.post(**requests[i])

    threads = [threading.Thread(target=post, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(a["status"] == "queued" and a["progress"] == 0 for a in answers), answers
    # The 8-step request holds before its step 5 on every rank: read while it is there, then let it go.
    seen = []
    hold.wait_held(processes=4, alive=server.alive, context=server.text)
    server.wait_for(answers[0]["id"], "in_progress", seen=seen)
    hold.release()
    server.wait_for(answers[0]["id"], "completed", every=0.02, seen=seen)
    running = [p for status, p, _ in seen if status == "in_progress"]
    assert any(0 < p < 100 for p in running), seen
    assert running == sorted(running)  # it only moves forward
    cli = {"num_inference_steps": "steps", "guidance_scale": "guidance_high", "guidance_scale_2": "guidance_low"}
    for request, answer in zip(requests, answers):
        video = server.wait_for(answer["id"], "completed")
        assert (
            video["progress"] == 100
            and video["record"]["frames_sha256"] == sidecar(server, answer["id"])["frames_sha256"]
        )
        settings = {cli.get(k, k): v for k, v in request.items() if k != "size"}
        if "size" in request:
            settings["width"], settings["height"] = map(int, request["size"].split("x"))
        assert_same_frames(
            server.frames(answer["id"]),
            cli_frames(tmp_path, answer["id"], **settings),
            f"{answer['id']} against the CLI",
        )


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_delete_stops_a_running_job_after_its_step_and_the_next_job_runs(server, hold):
    long = server.post(prompt="a long video", num_inference_steps=12)
    after = server.post(prompt="the next one", seed=5)
    hold.wait_held(processes=4, alive=server.alive, context=server.text)  # the long job, before its step 5
    at_delete = server.video(long["id"])["step"]
    answer = server.client.delete(f"/v1/videos/{long['id']}")
    assert answer.status_code == 200 and answer.json()["deleted"] is True
    assert server.client.get(f"/v1/videos/{long['id']}").status_code == 404  # gone for clients at once
    assert long["id"] not in server.client.get("/v1/videos", params={"limit": 100}).text
    hold.release()
    stopped = server.wait_log(rf"{long['id']}: deleted: stopped after step (\d+) of 12")
    assert int(stopped.group(1)) <= at_delete + 1, (at_delete, stopped.group(0))  # the step running then, no more
    assert Store(str(server.storage / "queue.sqlite3")).row(long["id"])["status"] == "deleted"
    assert server.wait_for(after["id"], "completed")["progress"] == 100
    assert not (server.storage / "videos" / f"{long['id']}.mp4").exists()
    assert not (server.storage / "videos" / ".parallel_wan" / "resume" / long["id"]).exists()
    assert server.client.get(f"/v1/videos/{long['id']}/content").status_code == 404


def test_a_delete_while_the_job_decodes_wins(server, decoding):
    """The DELETE comes after the last step's vote, while every rank decodes: the job does not
    complete, and nothing of it stays (before, it completed and its mp4 stayed, 4 of 4 tries)."""
    decoding.hold_next()
    job = server.post(prompt="deleted while decoding", num_inference_steps=2, seed=8)
    decoding.wait_held(processes=4, alive=server.alive, context=server.text)
    try:
        assert server.video(job["id"])["progress"] == 99  # every step done: decoding
        assert server.client.delete(f"/v1/videos/{job['id']}").status_code == 200
        assert server.client.get(f"/v1/videos/{job['id']}").status_code == 404
    finally:
        decoding.release_all()
    server.wait_log(rf"{job['id']}: deleted while it was being written")
    assert not list((server.storage / "videos").glob(f"{job['id']}*"))
    assert Store(str(server.storage / "queue.sqlite3")).row(job["id"])["status"] == "deleted"
    assert server.client.get(f"/v1/videos/{job['id']}/content").status_code == 404


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_a_running_job_previews_its_progress_as_one_process_would(server, hold):
    """A GET of a variant while the job runs asks for a preview; every rank joins the gather after
    the next step and rank 0 writes it: the same images as one process's preview at that step
    (the latents agree to fp32 rounding, the images to a level). Completed: the frames' own."""
    from PIL import Image

    from parallel_wan.report.previews import thumbnail

    job = server.post(prompt="a preview", num_inference_steps=12, seed=9, negative_prompt="")
    url = f"/v1/videos/{job['id']}/content"
    hold.wait_held(processes=4, alive=server.alive, context=server.text)  # 4 steps done
    try:
        assert server.client.get(url, params={"variant": "thumbnail"}).status_code == 404  # none yet: asks
    finally:
        hold.release()
    preview = wait_for_preview(server, url)
    step = int(preview.headers["x-preview-step"])
    assert 5 <= step < 12 and preview.headers["content-type"] == "image/webp"
    expected = preview_image(SETTINGS, step, 64, 64, steps=12, seed=9, prompt="'a preview'", negative_prompt="''")
    got = Image.open(io.BytesIO(preview.content)).convert("RGB")
    assert np.abs(np.asarray(got, int) - np.asarray(expected, int)).mean() <= 1.0
    server.wait_for(job["id"], "completed")
    final = server.client.get(url, params={"variant": "thumbnail"})
    assert "x-preview-step" not in final.headers and final.content == thumbnail(server.frames(job["id"]))


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_the_openai_sdk_creates_retrieves_and_downloads(server):
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0)
    video = client.videos.create(
        prompt="a red car", size="64x48", seconds="0.5", extra_body={"num_inference_steps": 2, "seed": 11}
    )
    assert video.status == "queued" and video.size == "64x48" and video.seconds == "0.5"
    server.wait_for(video.id, "completed")
    done = client.videos.retrieve(video.id)
    assert done.status == "completed" and done.progress == 100 and isinstance(done.created_at, int)
    content = client.videos.download_content(video.id)
    assert content.content == (server.storage / "videos" / f"{video.id}.mp4").read_bytes()
    assert content.content[4:8] == b"ftyp"
    assert video.id in [v.id for v in client.videos.list(limit=50)]
    with pytest.raises(openai.BadRequestError) as err:
        client.videos.create(prompt="a", size="65x48")
    assert "width=65 must be a positive multiple of 16" in str(err.value)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{server.url}/v1", api_key="wrong", max_retries=0).videos.retrieve(video.id)
    assert client.videos.delete(video.id).deleted
    with pytest.raises(openai.NotFoundError):
        client.videos.retrieve(video.id)


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_openais_own_example_runs_unchanged_but_for_the_base_url(server, tmp_path, monkeypatch):
    """OpenAI's quickstart for videos, as README's Serving shows it: only base_url (and the key)
    differ; the server answers to sora-2 (served_model_names) with its start settings."""
    monkeypatch.chdir(tmp_path)
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY)
    video = client.videos.create_and_poll(model="sora-2", prompt="A video of a cool cat on a motorcycle in the night")
    if video.status == "completed":
        content = client.videos.download_content(video.id, variant="video")
        content.write_to_file("video.mp4")
    assert video.status == "completed" and (tmp_path / "video.mp4").read_bytes()[4:8] == b"ftyp"


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_a_remix_on_four_ranks_is_the_clis_video_to_video(server, tmp_path):
    """A completed job remixed with a new prompt on the 4-rank server: the frames of
    `python -m parallel_wan.run video=<its mp4> strength=0.5` with its settings on one process
    (which tests/references/test_video_to_video.py holds to diffusers' WanVideoToVideoPipeline)."""
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0)
    source = server.post(prompt="a paper boat", seed=4)
    server.wait_for(source["id"], "completed")
    remix = client.videos.remix(source["id"], prompt="a paper boat in a storm", extra_body={"strength": 0.5})
    assert remix.remixed_from_video_id == source["id"]
    done = server.wait_for(remix.id, "completed")
    assert done["remixed_from_video_id"] == source["id"] and done["record"]["config"]["strength"] == 0.5
    mp4 = server.storage / "videos" / f"{source['id']}.mp4"
    assert_same_frames(
        server.frames(remix.id),
        cli_frames(tmp_path, "remix", prompt="a paper boat in a storm", seed=4, video=str(mp4), strength=0.5),
        "the 4-rank remix against the CLI's video-to-video",
    )


def test_without_the_key_every_endpoint_but_health_is_401(server):
    import httpx

    for path in ("/v1/videos", "/v1/models", "/metrics", "/"):
        assert httpx.get(server.url + path).status_code == 401, path
    assert httpx.post(server.url + "/v1/videos", json={"prompt": "a"}).status_code == 401
    health = httpx.get(server.url + "/health")
    assert health.status_code == 200 and health.json()["ranks"] == 4


def test_bad_requests_are_refused_and_queue_nothing(server):
    before = server.client.get("/v1/videos", params={"limit": 100}).json()["data"]
    for fields, param in (
        ({"num_frames": 10}, "num_frames"),
        ({"size": "64x50"}, "size"),
        ({"num_inference_steps": "0"}, "num_inference_steps"),
        ({"seed": -1}, "seed"),
        ({"guidance_scale": "nan"}, "guidance_scale"),
        ({"frames": 9}, "frames"),
        ({"model": "sora-2-pro"}, "model"),  # 404 model_not_found (OpenAI's answer for a model nobody serves)
    ):
        answer = server.client.post(
            "/v1/videos", files={k: (None, str(v)) for k, v in {"prompt": "a", **fields}.items()}
        )
        status = 404 if param == "model" else 400
        assert answer.status_code == status and answer.json()["error"]["param"] == param, answer.text
    assert server.client.get("/v1/videos", params={"limit": 100}).json()["data"] == before
