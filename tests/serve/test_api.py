"""The server's HTTP side in this process (FastAPI's TestClient; no model loaded, no loop): a bad
request gets HTTP 400 with the command line's own one line in the request's words (its fields,
never a path on the server) and nothing is queued or written;
the SDK's field shapes, Idempotency-Key, the API key, the body limit, listing, DELETE of a
queued job, ids as the only file names; and the store's claim (each job to exactly one
claimant), leases and restarts."""

import dataclasses
import io
import json
import os
import re
import subprocess
import sys

import pytest
from fastapi.testclient import TestClient
from harness.paths import ENV, REPO
from harness.serve import KEY, SETTINGS

from parallel_wan.config import ConfigError
from parallel_wan.config.compose import compose_settings
from parallel_wan.run import validate_job
from parallel_wan.serve.app import make_app
from parallel_wan.serve.auth import api_key
from parallel_wan.serve.metrics import ServerMetrics
from parallel_wan.serve.served import serve_start
from parallel_wan.serve.settings import server_settings
from parallel_wan.serve.store import Store
from parallel_wan.serve.words import Words

BIG_SEED = 2**70


class Api:
    """An app over a fresh storage_dir, as rank 0 builds it."""

    def __init__(self, storage, start=(), max_body_mb="32", key=None, world=1, served_model_names="", **server):
        self.settings = server_settings(
            {
                "host": "127.0.0.1",
                "port": "0",
                "storage_dir": str(storage),
                "max_body_mb": max_body_mb,
                "served_model_names": served_model_names,
                **server,  # max_queued, keep_hours, lora_dir
            }
        )
        os.makedirs(self.settings.videos_dir, exist_ok=True)
        self.start = [*SETTINGS, *start]
        served = serve_start(
            compose_settings(self.start), world, None, self.settings.videos_dir, lora_dir=self.settings.lora_dir
        )
        # as the HTTP process adds them (http_process.py)
        self.served = dataclasses.replace(served, aliases=self.settings.served_model_names)
        self.store = Store(self.settings.database, keep_s=self.settings.keep_s)
        self.store.register("test", "127.0.0.1:0")

        def health():
            return self.store.health("test")

        self.app = make_app(self.store, self.served, self.settings, health, ServerMetrics(self.store, health), key)
        self.client = TestClient(self.app)

    def sdk(self, asynchronous=False):
        """OpenAI's own client over this app, validating every answer against its types."""
        import httpx
        import openai

        if asynchronous:
            http = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://testserver")
            return openai.AsyncOpenAI(
                base_url="http://testserver/v1", api_key=KEY, http_client=http, _strict_response_validation=True
            )
        return openai.OpenAI(
            base_url="http://testserver/v1", api_key=KEY, http_client=self.client, _strict_response_validation=True
        )

    def nothing_queued(self):
        assert sum(self.store.counts().values()) == 0, self.store.counts()
        inputs = self.settings.inputs_dir
        assert not os.path.isdir(inputs) or os.listdir(inputs) == [], os.listdir(inputs)

    def cli_refusal(self, overrides, tmp_path) -> str:
        """What `python -m parallel_wan.run` with the server's start settings and `overrides` prints."""
        return str(self.cli_error(overrides, tmp_path))

    def cli_error(self, overrides, tmp_path) -> ConfigError:
        raw = compose_settings([*self.start, *overrides]) | {"output_dir": str(tmp_path / "cli")}
        with pytest.raises(ConfigError) as err:
            validate_job(raw, 1)
        return err.value


@pytest.fixture
def api(tmp_path):
    return Api(tmp_path / "storage")


def multipart(fields: dict) -> dict:
    """Fields as the openai SDK sends them: multipart/form-data, every value a string."""
    return {k: (None, str(v)) for k, v in fields.items()}


def png_bytes(width=64, height=64, fmt="PNG") -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (width, height), (200, 40, 10)).save(buf, format=fmt)
    return buf.getvalue()


# request fields (JSON) → the command line's words for the same thing, and the field the error names
BAD = {
    "num_frames_not_4k1": ({"num_frames": 10}, ["num_frames=10"], "num_frames"),
    "num_frames_zero": ({"num_frames": 0}, ["num_frames=0"], "num_frames"),
    "num_frames_float": ({"num_frames": 9.5}, ["num_frames=9.5"], "num_frames"),
    "size_not_multiple": ({"size": "100x64"}, ["width=100", "height=64"], "size"),
    "height_not_multiple": ({"width": 64, "height": 100}, ["width=64", "height=100"], "height"),
    "width_zero": ({"width": 0, "height": 64}, ["width=0", "height=64"], "width"),
    "steps_zero": ({"num_inference_steps": 0}, ["steps=0"], "num_inference_steps"),
    "steps_text": ({"num_inference_steps": "many"}, ["steps=many"], "num_inference_steps"),
    "guidance_nan": ({"guidance_scale": "nan"}, ["guidance_high=nan", "guidance_low=nan"], "guidance_scale"),
    "guidance_2_inf": ({"guidance_scale_2": "inf"}, ["guidance_low=inf"], "guidance_scale_2"),
    "guidance_negative": ({"guidance_scale": -1}, ["guidance_high=-1", "guidance_low=-1"], "guidance_scale"),
    "seed_negative": ({"seed": -1}, ["seed=-1"], "seed"),
    "seed_2_to_70": ({"seed": BIG_SEED}, [f"seed={BIG_SEED}"], "seed"),
    "seed_text": ({"seed": "abc"}, ["seed=abc"], "seed"),
    "video_beyond_rope": (
        {"num_frames": 100001, "size": "4096x4096"},
        ["num_frames=100001", "height=4096", "width=4096"],
        "num_frames",
    ),
    "height_beyond_rope": ({"size": "64x32768"}, ["width=64", "height=32768"], "size"),
    "fps_zero": ({"fps": 0}, ["fps=0"], "fps"),
    "fps_fraction": ({"fps": 7.5}, ["fps=7.5"], "fps"),
    "flow_shift_negative": ({"flow_shift": -1}, ["shift=-1"], "flow_shift"),
    "boundary_ratio_one": ({"boundary_ratio": 1}, ["boundary=1"], "boundary_ratio"),
}


# the settings above that a request sets under another name: the answer names the field
REQUEST_WORDS = {
    "steps": "num_inference_steps",
    "guidance_high": "guidance_scale",
    "guidance_low": "guidance_scale_2",
    "shift": "flow_shift",
    "boundary": "boundary_ratio",
}


def in_request_words(line: str) -> str:
    return re.sub(rf"\b({'|'.join(REQUEST_WORDS)})=", lambda m: REQUEST_WORDS[m.group(1)] + "=", line)


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_request_gets_the_clis_line_as_400_and_nothing_is_queued(case, api, tmp_path):
    fields, words, param = BAD[case]
    expected = in_request_words(api.cli_refusal(words, tmp_path))
    for answer in (
        api.client.post("/v1/videos", json={"prompt": "a cat", **fields}),
        api.client.post("/v1/videos", files=multipart({"prompt": "a cat", **fields})),
    ):
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["message"] == expected and error["param"] == param, (error, expected)
    api.nothing_queued()


@pytest.mark.parametrize("case", sorted(BAD))
def test_each_refusal_a_request_can_reach_carries_the_settings_it_names(case, api, tmp_path):
    """The field of an answer comes from the error's `setting` (errors.py), set where it is raised."""
    fields, words, param = BAD[case]
    error = api.cli_error(words, tmp_path)
    assert error.settings, str(error)
    assert all(f"{setting}=" in str(error) for setting in error.settings), (error.settings, str(error))


def test_the_field_an_answer_names_is_the_errors_setting_not_a_word_of_its_message():
    message = "height=100 width=64 must be multiples of 16"
    about_width = ConfigError(message, setting="width")
    assert Words().refusal(about_width, {"width": "size", "height": "size"}) == (message, "size")
    assert Words().refusal(about_width) == (message, "width")
    assert Words().refusal(ConfigError(message, setting=("num_frames", "height")), {"height": "height"})[1] == "height"
    assert Words().refusal(ConfigError(message)) == (message, None)  # it names settings but is about none


SERVER_OWN = {
    "prompt_missing": ({"seed": 1}, "prompt", ["prompt is required"]),
    "prompt_list": ({"prompt": ["a", "b"]}, "prompt", ["one string"]),
    "unknown_field": ({"prompt": "a", "frame_count": 9}, "frame_count", ["not a field", "num_frames"]),
    "model_not_a_string": ({"prompt": "a", "model": 5}, "model", ["model=5", "one string"]),
    "size_malformed": ({"prompt": "a", "size": "big"}, "size", ["size='big'", "WIDTHxHEIGHT"]),
    "size_and_width": ({"prompt": "a", "size": "64x64", "width": 64}, "size", ["not both"]),
    "seconds_negative": ({"prompt": "a", "seconds": "-4"}, "seconds", ["positive number of seconds"]),
    "reference_as_url": (
        {"prompt": "a", "input_reference": {"image_url": "http://x/y.png"}},
        "input_reference",
        ["input_reference.image_url='http://x/y.png'", "fetches nothing", "data:image/png;base64"],
    ),
    "reference_file_id": ({"prompt": "a", "image_reference": {"file_id": "file-1"}}, "image_reference", ["Files API"]),
    "reference_shape": ({"prompt": "a", "input_reference": "data:,"}, "input_reference", ['{"image_url"']),
    "reference_url_http": ({"prompt": "a", "reference_url": "https://x/y.png"}, "reference_url", ["fetches nothing"]),
    "reference_not_base64": (
        {"prompt": "a", "image_reference": {"image_url": "data:image/png;base64,@@"}},
        "image_reference",
        ["not valid base64"],
    ),
    "reference_not_an_image": (
        {"prompt": "a", "reference_url": "data:image/png;base64,aGVsbG8="},
        "reference_url",
        ["reference_url could not be read as an image"],
    ),
    "two_references": (
        {"prompt": "a", "input_reference": {"image_url": "data:,"}, "reference_url": "data:,"},
        "reference_url",
        ["input_reference and reference_url", "give one"],
    ),
    "n_two": ({"prompt": "a", "n": 2}, "n", ["n=2", "one video per request"]),
    "quality_high": ({"prompt": "a", "quality": "high"}, "quality", ["quality='high'", "num_inference_steps"]),
    "audio_reference": ({"prompt": "a", "audio_reference": {"audio_url": "x"}}, "audio_reference", ["fetches nothing"]),
    "audio_reference_shape": ({"prompt": "a", "audio_reference": "data:,"}, "audio_reference", ['{"audio_url"']),
    "generate_sound": ({"prompt": "a", "generate_sound": True}, "generate_sound", ["makes no sound"]),
    "video_reference": ({"prompt": "a", "video_reference": {"video_url": "x"}}, "video_reference", ["reads no video"]),
    "extra_params_unknown": (
        {"prompt": "a", "extra_params": {"frame_count": 9}},
        "extra_params.frame_count",
        ["extra_params.frame_count=9", "num_frames"],
    ),
    "extra_params_twice": ({"prompt": "a", "seed": 1, "extra_params": {"seed": 2}}, "seed", ["given twice"]),
    "extra_params_list": ({"prompt": "a", "extra_params": [1]}, "extra_params", ["an object of more fields"]),
    "true_cfg_and_guidance": (
        {"prompt": "a", "guidance_scale": 4, "true_cfg_scale": 5},
        "true_cfg_scale",
        ["the same scale here"],
    ),
    "user_not_text": ({"prompt": "a", "user": 7}, "user", ["one string"]),
    "user_too_long": ({"prompt": "a", "user": "u" * 257}, "user", ["at most 256"]),
    "metadata_17": ({"prompt": "a", "metadata": {str(i): "v" for i in range(17)}}, "metadata", ["at most 16"]),
    "metadata_number": ({"prompt": "a", "metadata": {"a": 1}}, "metadata", ["must be a string"]),
}


@pytest.mark.parametrize("case", sorted(SERVER_OWN))
def test_requests_nobody_can_run_are_400_naming_the_field(case, api):
    body, param, words = SERVER_OWN[case]
    answer = api.client.post("/v1/videos", json=body)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == param and all(w in error["message"] for w in words), error
    assert "\n" not in error["message"]
    api.nothing_queued()


def test_uploads_are_decoded_as_images_or_refused(tmp_path):
    api = Api(tmp_path / "storage", ["model=tiny_ti2v"])
    for data, words in (
        (b"not an image", ["could not be read as an image"]),
        (png_bytes()[:60], ["could not be read as an image"]),
        (b"", ["empty"]),
    ):
        answer = api.client.post("/v1/videos", data={"prompt": "a"}, files={"input_reference": ("x.png", data)})
        assert answer.status_code == 400 and answer.json()["error"]["param"] == "input_reference", answer.text
        assert all(w in answer.json()["error"]["message"] for w in words)
    api.nothing_queued()
    # a JPEG under a misleading name with a path in it: stored as <id>.jpg, byte for byte
    data = png_bytes(fmt="JPEG")
    answer = api.client.post(
        "/v1/videos",
        data={"prompt": "a boat", "size": "64x64"},
        files={"input_reference": ("../../etc/passwd.png", data, "image/png")},
    )
    assert answer.status_code == 200, answer.text
    video_id = answer.json()["id"]
    assert os.listdir(api.settings.inputs_dir) == [f"{video_id}.jpg"]
    assert (tmp_path / "storage" / "inputs" / f"{video_id}.jpg").read_bytes() == data
    settings = json.loads(api.store.get(video_id)["settings"])
    assert settings["image"] == os.path.join(api.settings.inputs_dir, f"{video_id}.jpg")


def test_the_first_frame_as_json_is_the_upload_byte_for_byte(tmp_path):
    """OpenAI's JSON `input_reference {image_url}`, vLLM-Omni's `image_reference`, SGLang's
    `reference_url` (a data: URL, also as a form's text): each stored as the multipart upload
    is, and a refusal about the image names the field that sent it."""
    import base64

    api = Api(tmp_path / "storage", ["model=tiny_ti2v"])
    data = png_bytes(fmt="JPEG")
    url = "data:image/jpeg;base64," + base64.b64encode(data).decode()
    for how in (
        {"json": {"prompt": "a", "input_reference": {"image_url": url}}},
        {"json": {"prompt": "a", "image_reference": {"image_url": url}}},
        {"json": {"prompt": "a", "reference_url": url}},
        {"files": multipart({"prompt": "a", "reference_url": url})},
    ):
        answer = api.client.post("/v1/videos", **how)
        assert answer.status_code == 200, (how, answer.text)
        stored = tmp_path / "storage" / "inputs" / f"{answer.json()['id']}.jpg"
        assert stored.read_bytes() == data, how
    t2v = Api(tmp_path / "t2v")
    error = _openai_error(t2v.client.post("/v1/videos", json={"prompt": "a", "reference_url": url}), 400)
    assert error["param"] == "reference_url" and error["message"].startswith("reference_url was given but model=tiny")
    assert t2v.client.post("/v1/videos", json={"prompt": "a", "input_reference": None}).status_code == 200


# request fields → the run settings stored with the job (null means absent for every field)
HONOURED = {
    "every_optional_null": (
        {f: None for f in ("negative_prompt", "seed", "size", "seconds", "model", "fps", "n", "quality", "user")},
        {"prompt": "a"},
    ),
    "fps_sets_the_rate_and_the_seconds_rule": ({"fps": 8, "seconds": "1"}, {"prompt": "a", "fps": 8, "num_frames": 9}),
    "num_frames_wins_over_seconds": ({"seconds": "4", "num_frames": 9}, {"prompt": "a", "num_frames": 9}),
    "flow_shift_and_boundary_ratio": (
        {"flow_shift": 5, "boundary_ratio": 0.9},
        {"prompt": "a", "shift": 5, "boundary": 0.9},
    ),
    "true_cfg_scale_is_guidance_scale": (
        {"true_cfg_scale": 5},
        {"prompt": "a", "guidance_high": 5, "guidance_low": 5},
    ),
    "true_cfg_scale_with_guidance_scale_2": (
        {"true_cfg_scale": 5, "guidance_scale_2": 2, "guidance_scale": 5},
        {"prompt": "a", "guidance_high": 5, "guidance_low": 2},
    ),
    "extra_params_are_fields": (
        {"extra_params": {"boundary_ratio": 0.9, "flow_shift": 5, "seed": 3}, "seed": 3},
        {"prompt": "a", "shift": 5, "boundary": 0.9, "seed": 3},
    ),
    "what_asks_for_nothing": ({"n": 1, "quality": "auto", "generate_sound": False}, {"prompt": "a"}),
}


@pytest.mark.parametrize("case", sorted(HONOURED))
def test_other_servers_fields_are_honoured(case, api):
    body, settings = HONOURED[case]
    answer = api.client.post("/v1/videos", json={"prompt": "a", **body})
    assert answer.status_code == 200, answer.text
    assert json.loads(api.store.get(answer.json()["id"])["settings"]) == settings
    spec = api.served.spec(settings)  # what the job runs
    assert (spec.model.fps, spec.model.boundary, spec.sampling.shift) == (
        settings.get("fps", 16),
        settings.get("boundary", 0.875),
        settings.get("shift", 12.0),
    )


def test_seconds_answered_are_the_videos_true_duration(api):
    for body, seconds in (
        ({"num_frames": 9}, "0.5"),
        ({"seconds": "4", "num_frames": 9}, "0.5"),
        ({"seconds": "1.1"}, "1"),
        ({"num_frames": 9, "fps": 24}, "0.33"),
        ({"seconds": "1", "fps": 8}, "1"),
    ):
        answer = api.client.post("/v1/videos", json={"prompt": "a", **body}).json()
        assert answer["seconds"] == seconds, (body, answer)


def test_user_and_metadata_are_recorded_and_echoed_through_the_sdk(api):
    """The SDK's create has neither: they go in extra_body, which a multipart form sends as
    `metadata[key]` and `extra_params[key]` — read as objects."""
    client = api.sdk()
    video = client.videos.create(
        prompt="a calico cat",
        size="1280x720",
        extra_body={"user": "u-17", "metadata": {"team": "vision", "run": "7"}, "extra_params": {"flow_shift": 5}},
    )
    assert json.loads(api.store.get(video.id)["settings"])["shift"] == 5
    for seen in (video, client.videos.retrieve(video.id), client.videos.list().data[0]):
        assert (seen.user, seen.metadata) == ("u-17", {"team": "vision", "run": "7"}), seen


def test_an_image_on_a_text_to_video_model_is_refused_naming_the_field(api):
    """The CLI's `image=PATH was given … drop image=`, said of the request: its field, and not
    where the server stored the upload."""
    answer = api.client.post("/v1/videos", data={"prompt": "a"}, files={"input_reference": ("x.png", png_bytes())})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error == {
        "message": "input_reference was given but model=tiny is text-to-video; drop input_reference or "
        "use an i2v/ti2v model",
        "param": "input_reference",
        "type": "invalid_request_error",
        "code": "invalid_value",
    }
    api.nothing_queued()


def test_an_image_to_video_server_asks_for_input_reference(tmp_path):
    api = Api(tmp_path / "storage", ["model=tiny_i2v"])
    answer = api.client.post("/v1/videos", json={"prompt": "a"})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == "input_reference", error
    assert error["message"] == "model=tiny_i2v generates from an image; set input_reference (a PNG/JPEG)", error
    api.nothing_queued()


def test_an_unknown_field_is_named_with_the_fields_taken(api):
    """Refused by name with the fields a request may have; a guess only where one is close
    (`format` is not `prompt`), and a setting of the command line pointed to its field."""
    fields = (
        "prompt, negative_prompt, seed, width, height, num_frames, num_inference_steps, guidance_scale, "
        "guidance_scale_2, fps, flow_shift, boundary_ratio, strength, mode, prev_segment_conditioning_frames, "
        "num_clips, size, seconds, model, true_cfg_scale, user, "
        "metadata, "
        "input_reference, image_reference, reference_url, last_image, audio_reference, pose_video, face_video, "
        "background_video, mask_video, loras, lora, extra_params"
    )
    for body, message in (
        (
            {"prompt": "a", "format": "gif"},
            f"format='gif' is not a field of POST /v1/videos; remove it (fields: {fields})",
        ),
        (
            {"prompt": "a", "steps": 4},
            f"steps=4 is not a field of POST /v1/videos (the field for steps is num_inference_steps); remove it "
            f"(fields: {fields})",
        ),
        (
            {"prompt": "a", "dtype": "float32"},
            f"dtype='float32' is not a field of POST /v1/videos (dtype is set when the server starts; a request "
            f"cannot change it); remove it (fields: {fields})",
        ),
        (
            {"prompt": "a", "promt": "b"},
            f"promt='b' is not a field of POST /v1/videos (did you mean prompt?); remove it (fields: {fields})",
        ),
    ):
        answer = api.client.post("/v1/videos", json=body)
        assert answer.status_code == 400, answer.text
        key = next(k for k in body if k != "prompt")
        assert answer.json()["error"] == {
            "message": message,
            "param": key,
            "type": "invalid_request_error",
            "code": "unknown_parameter",
        }
    api.nothing_queued()


# the command line's words that name no request field, anywhere in an answer
CLI_WORDS = re.compile(r"(?<![\w.])(image|steps|guidance_high|guidance_low|output_dir)=|\bPATH\b")
A_PATH = re.compile(r"(?<![\w.:/])/[\w.-]+/")  # an absolute path: /x/…


def speaks_to_a_client(text: str, tmp_path) -> None:
    assert str(tmp_path) not in text and not A_PATH.search(text), text
    assert not CLI_WORDS.search(text), text


def test_no_answer_speaks_the_clis_words_or_shows_a_server_path(tmp_path):
    """Every way a refusal of resolve() and the run's checks, or the text of a job, reaches a
    client: each refusal reachable from a request, on servers of each kind; a failed job's error,
    a completed job's record, a deleted or failed job's content, /health."""
    servers = {
        "t2v": Api(tmp_path / "t2v"),
        "i2v": Api(tmp_path / "i2v", ["model=tiny_i2v"]),
        "lightning": Api(tmp_path / "lightning", ["model=tiny_lightning"]),
        "dp2": Api(tmp_path / "dp2", ["mesh=dp2"], world=2),
    }
    requests = [("t2v", {"prompt": "a cat", **fields}, None) for fields, _, _ in BAD.values()]
    requests += [
        ("t2v", {"prompt": "a"}, png_bytes()),
        ("i2v", {"prompt": "a"}, None),
        ("i2v", {"prompt": "a", "num_inference_steps": 0}, png_bytes()),
        ("lightning", {"prompt": "a", "num_inference_steps": 7}, None),
        ("dp2", {"prompt": "a", "guidance_scale": 1}, None),
    ]
    for name, fields, image in requests:
        api = servers[name]
        answer = (
            api.client.post("/v1/videos", json=fields)
            if image is None
            else api.client.post("/v1/videos", files={**multipart(fields), "input_reference": ("x.png", image)})
        )
        assert answer.status_code == 400, (name, fields, answer.text)
        speaks_to_a_client(answer.text, tmp_path)
    # a storage folder gone bad under a running server: refused without saying where it is
    api = servers["t2v"]
    os.rmdir(api.settings.videos_dir)
    open(api.settings.videos_dir, "w").close()
    answer = api.client.post("/v1/videos", json={"prompt": "a"})
    assert answer.status_code == 400, answer.text
    speaks_to_a_client(answer.text, tmp_path)
    for api in servers.values():
        api.nothing_queued()
    # what a job's run wrote, as answers show it
    api = Api(tmp_path / "jobs")
    ids = [api.client.post("/v1/videos", json={"prompt": f"a cat in /usr/share {i}"}).json()["id"] for i in range(3)]
    api.store.register("me", "here:1")
    for _ in ids:
        api.store.claim("me")
    videos = api.settings.videos_dir
    api.store.finish(
        ids[0],
        "failed",
        error=f"could not write the outputs to output_dir={videos} (No space left on "
        "device); nothing was kept; free space there or set another output_dir",
    )
    api.store.finish(
        ids[1],
        "completed",
        record={
            "config": {
                "output_dir": videos,
                "prompts": ["a cat in /usr/share 1"],
                "image": os.path.join(api.settings.inputs_dir, "x.png"),
                "weights": "/srv/wan weights/high.safetensors",
            }
        },
    )
    api.client.delete(f"/v1/videos/{ids[2]}")
    assert not api.store.finish(ids[2], "completed")  # deleted while it ran: it does not complete
    api.store.set_health("test", False, f"FileNotFoundError: [Errno 2] No such file or directory: '{videos}/x.mp4'")
    for path in (
        f"/v1/videos/{ids[0]}",
        f"/v1/videos/{ids[1]}",
        "/v1/videos",
        f"/v1/videos/{ids[0]}/content",
        f"/v1/videos/{ids[2]}/content",
        "/health",
    ):
        text = api.client.get(path).text.replace("/usr/share", "")
        speaks_to_a_client(text, tmp_path)
        assert "safetensors" not in text, text
    record = api.client.get(f"/v1/videos/{ids[1]}").json()["record"]
    assert record["config"]["prompts"] == ["a cat in /usr/share 1"]  # the client's own words stay as sent


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md): the planner runs
def test_the_planners_memory_check_refuses_before_queueing(tmp_path, monkeypatch):
    from parallel_wan.memory_plan import fits

    # the planner: 0.01 GB for the start settings' 16×16×5 (weights, mostly), 0.05 GB for 128×128×17
    monkeypatch.setattr(fits, "device_memory", lambda spec: (25e6, "a 25 MB test device"))
    api = Api(tmp_path / "storage", ["num_frames=5", "height=16", "width=16"])  # the start settings fit
    answer = api.client.post("/v1/videos", json={"prompt": "a", "size": "128x128", "num_frames": 17})
    assert answer.status_code == 400, answer.text
    assert "does not fit" in answer.json()["error"]["message"] and "a 25 MB test device" in answer.text
    api.nothing_queued()


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md): the planner runs
def test_a_request_over_the_device_but_over_no_floor_is_refused_before_queueing(tmp_path, monkeypatch):
    """Issue 38 item 1: 4001 frames of 1024² passed the frames-and-latents floor of a 24 GB
    host (12.6 GB) and were queued and started; the planner puts them at 156.55 GB."""
    from parallel_wan.memory_plan import fits

    monkeypatch.setattr(fits, "device_memory", lambda spec: (24e9, "a 24 GB test host"))
    api = Api(tmp_path / "storage", [])
    answer = api.client.post("/v1/videos", json={"prompt": "a", "size": "1024x1024", "num_frames": 4001})
    assert answer.status_code == 400, answer.text
    message = answer.json()["error"]["message"]
    assert "does not fit" in message and "156.55 GB" in message and "a 24 GB test host" in message, message
    api.nothing_queued()
    assert api.client.post("/v1/videos", json={"prompt": "a", "size": "64x64"}).status_code == 200


def test_the_sdks_multipart_strings_and_json_make_the_same_job(api):
    """Every field a string (the openai SDK's multipart), or typed JSON: the same settings."""
    fields = {
        "prompt": "a cat",
        "seed": 7,
        "size": "64x48",
        "seconds": "0.5",
        "num_inference_steps": 3,
        "guidance_scale": 4.5,
        "guidance_scale_2": 2.0,
        "negative_prompt": "blur",
        "model": "tiny",
    }
    a = api.client.post("/v1/videos", json=fields).json()
    b = api.client.post("/v1/videos", files=multipart(fields)).json()
    assert (
        json.loads(api.store.get(a["id"])["settings"])
        == json.loads(api.store.get(b["id"])["settings"])
        == {
            "prompt": "a cat",
            "negative_prompt": "blur",
            "seed": 7,
            "steps": 3,
            "guidance_high": 4.5,
            "guidance_low": 2.0,
            "width": 64,
            "height": 48,
            "num_frames": 9,
        }
    )
    for video in (a, b):
        assert {k: video[k] for k in ("object", "model", "status", "progress", "size", "seconds")} == {
            "object": "video",
            "model": "tiny",
            "status": "queued",
            "progress": 0,
            "size": "64x48",
            "seconds": "0.5",
        }
        assert isinstance(video["created_at"], int)
    # diffusers' rule: guidance_scale alone sets both experts (never 1.0 for a missing second scale)
    c = api.client.post("/v1/videos", json={"prompt": "a", "guidance_scale": 6}).json()
    assert json.loads(api.store.get(c["id"])["settings"])["guidance_low"] == 6


def test_an_idempotency_key_returns_the_same_job(api):
    headers = {"Idempotency-Key": "retry-1"}
    first = api.client.post("/v1/videos", json={"prompt": "a"}, headers=headers).json()
    again = api.client.post("/v1/videos", json={"prompt": "a"}, headers=headers).json()
    assert first["id"] == again["id"] and api.store.counts()["queued"] == 1
    other = api.client.post("/v1/videos", json={"prompt": "b"}, headers=headers)
    assert other.status_code == 409 and other.json()["error"]["param"] == "Idempotency-Key"
    assert (
        api.client.post("/v1/videos", json={"prompt": "a"}, headers={"Idempotency-Key": "2"}).json()["id"]
        != first["id"]
    )


def test_every_endpoint_but_health_needs_the_key(tmp_path, monkeypatch):
    monkeypatch.setenv("PARALLEL_WAN_API_KEY", KEY)
    api = Api(tmp_path / "storage", key=api_key())  # as the HTTP process reads it
    for method, path in (
        ("GET", "/"),
        ("GET", "/v1/videos"),
        ("POST", "/v1/videos"),
        ("GET", "/v1/models"),
        ("GET", "/metrics"),
        ("GET", "/v1/videos/video_" + "0" * 32),
        ("DELETE", "/v1/videos/video_" + "0" * 32),
        ("GET", "/no/such/path"),
    ):
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
            answer = api.client.request(method, path, headers=headers)
            assert answer.status_code == 401, (method, path, headers, answer.status_code)
    assert api.client.get("/").headers["WWW-Authenticate"].startswith("Basic")  # a browser asks for it
    assert api.client.get("/health").status_code == 503  # exempt; 503: nothing loaded in this test
    assert api.client.get("/v1/models", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
    assert api.client.get("/", auth=("anyone", KEY)).status_code == 200
    api.nothing_queued()


def test_health_is_503_until_loaded_and_when_a_rank_is_gone(api):
    assert api.client.get("/health").json()["status"] == "loading"
    api.store.set_health("test", True)
    assert api.client.get("/health").status_code == 200
    api.store.set_health("test", False, "RuntimeError: [gloo] Connection closed by peer")
    answer = api.client.get("/health")
    assert answer.status_code == 503 and "Connection closed" in answer.json()["message"]


def test_a_body_over_the_limit_is_413_and_nothing_is_kept(tmp_path):
    api = Api(tmp_path / "storage", max_body_mb="0.05")
    noise = os.urandom(80_000)
    for answer in (
        api.client.post("/v1/videos", data={"prompt": "a"}, files={"input_reference": ("x.png", noise)}),
        api.client.post("/v1/videos", json={"prompt": "x" * 80_000}),
    ):
        assert answer.status_code == 413, answer.text
    api.nothing_queued()


def test_list_retrieve_content_and_delete(api):
    ids = [api.client.post("/v1/videos", json={"prompt": f"p{i}"}).json()["id"] for i in range(5)]
    page = api.client.get("/v1/videos", params={"limit": 2}).json()
    assert [v["id"] for v in page["data"]] == ids[:-3:-1] and page["has_more"] and page["last_id"] == ids[3]
    rest = api.client.get("/v1/videos", params={"limit": 10, "after": page["last_id"]}).json()
    assert [v["id"] for v in rest["data"]] == ids[2::-1] and not rest["has_more"]
    oldest = api.client.get("/v1/videos", params={"order": "asc", "limit": 1}).json()
    assert oldest["data"][0]["id"] == ids[0]
    none = api.client.get("/v1/videos", params={"limit": 0}).json()  # the API's 0..100: no jobs, and whether any
    assert (none["data"], none["first_id"], none["last_id"], none["has_more"]) == ([], None, None, True)
    assert api.client.get("/v1/videos", params={"limit": 101}).json()["error"]["param"] == "limit"
    assert api.client.get(f"/v1/videos/{ids[0]}").json()["status"] == "queued"
    answer = api.client.get(f"/v1/videos/{ids[0]}/content")
    assert answer.status_code == 404 and "queued" in answer.json()["error"]["message"]
    for bad in ("video_nope", "..%2F..%2Fqueue.sqlite3", "video_" + "0" * 32):
        assert api.client.get(f"/v1/videos/{bad}").status_code == 404
        assert api.client.delete(f"/v1/videos/{bad}").status_code == 404
    deleted = api.client.delete(f"/v1/videos/{ids[1]}").json()
    assert {k: deleted[k] for k in ("id", "object", "deleted")} == {
        "id": ids[1],
        "object": "video.deleted",
        "deleted": True,
    }
    assert "not found from now on" in deleted["message"], deleted
    _openai_error(api.client.get(f"/v1/videos/{ids[1]}"), 404)  # gone at once, as the API has it
    _openai_error(api.client.get(f"/v1/videos/{ids[1]}/content"), 404)
    _openai_error(api.client.delete(f"/v1/videos/{ids[1]}"), 404)
    listed = api.client.get("/v1/videos", params={"limit": 100}).json()["data"]
    assert [v["id"] for v in listed] == [ids[4], ids[3], ids[2], ids[0]]
    assert api.store.counts() == {"queued": 4, "in_progress": 0, "completed": 0, "failed": 0}
    tomb = api.store.row(ids[1])  # its place stays, for cursors; nothing of the request does
    assert (tomb["status"], tomb["prompt"], tomb["settings"]) == ("deleted", "", "{}"), tomb
    api.store.register("me", "here:1")
    assert api.store.claim("me")["id"] == ids[0]  # the deleted one is never claimed
    assert api.store.claim("me")["id"] == ids[2]


def test_deleting_a_running_job_says_it_stops_after_its_current_step(api):
    """OpenAI's deleted object, answered at once; the job is not found from then on, and its
    server stops it after the step it is running (the message says so)."""
    video_id = api.client.post("/v1/videos", json={"prompt": "a"}).json()["id"]
    api.store.register("me", "here:1")
    api.store.claim("me")
    api.store.progress(video_id, 2)
    answer = api.client.delete(f"/v1/videos/{video_id}").json()
    assert answer == {
        "id": video_id,
        "object": "video.deleted",
        "deleted": True,
        "message": f"{video_id} was running (step 2 of 4 done): it stops after its current step and nothing "
        "of it is kept; it is not found from now on",
    }, answer
    assert api.client.get(f"/v1/videos/{video_id}").status_code == 404
    assert video_id not in api.client.get("/v1/videos").text
    assert api.store.cancel_requested(video_id)  # what the loop reads at its next step vote
    queued = api.client.post("/v1/videos", json={"prompt": "b"}).json()["id"]
    answer = api.client.delete(f"/v1/videos/{queued}").json()
    assert answer["message"] == f"{queued} was queued: it will not run; it is not found from now on", answer


def test_a_delete_during_the_decode_wins(api):
    """The DELETE reaches the store after the last step's vote, while the job decodes and writes:
    the job does not complete; its server removes what it wrote (worker._finish), and the DELETE
    of a job that had completed removes its files at once."""
    running, done = [api.client.post("/v1/videos", json={"prompt": p}).json()["id"] for p in "ab"]
    api.store.register("me", "here:1")
    api.store.claim("me")
    api.store.progress(running, 4)  # progress 99: decoding
    assert api.client.delete(f"/v1/videos/{running}").status_code == 200
    assert not api.store.finish(running, "completed", record={"x": 1})
    assert api.store.row(running)["status"] == "deleting" and api.store.deleting() == [running]
    api.store.gone(running)
    assert api.store.claim("me")["id"] == done and api.store.finish(done, "completed", record={"x": 1})
    mp4 = os.path.join(api.settings.videos_dir, f"{done}.mp4")
    open(mp4, "wb").close()
    assert api.client.get(f"/v1/videos/{done}/content").status_code == 200
    assert api.client.delete(f"/v1/videos/{done}").status_code == 200
    assert not os.path.exists(mp4) and api.store.row(done)["status"] == "deleted"
    assert api.client.get(f"/v1/videos/{done}/content").status_code == 404
    assert api.client.get("/v1/videos").json()["data"] == []


class Churn:
    """Jobs added and deleted while a client pages through the list: after each page, the page's
    last job (the cursor the next page starts after) and one job not seen yet are deleted and a
    new one is added. What an honest list gives: every job once, in order, but those deleted
    before they were reached — and (ascending) the ones added behind the cursor."""

    def __init__(self, api, order):
        self.api, self.order = api, order
        self.ids = [self.add() for _ in range(7)]
        self.gone, self.seen, self.late = set(), [], []

    def add(self):  # a Sora size: the SDK's strict types allow no other (queued only, never run here)
        return self.api.client.post("/v1/videos", json={"prompt": "p", "size": "1280x720"}).json()["id"]

    def saw(self, video):
        self.seen.append(video.id)
        self.late = []
        if len(self.seen) % 2 == 0:  # a page of 2 ends here
            unseen = [i for i in self.ids if i not in self.seen and i not in self.gone]
            for video_id in (video.id, *unseen[1:2]):
                assert self.api.client.delete(f"/v1/videos/{video_id}").status_code == 200
            self.gone.update(unseen[1:2])
            self.late = [self.add()] if len(self.ids) < 12 else []  # after the last page: not listed
            self.ids += self.late

    def check(self):
        order = [i for i in self.ids if i not in self.late] if self.order == "asc" else self.ids[:7][::-1]
        assert self.seen == [i for i in order if i not in self.gone], (self.order, self.seen)


@pytest.mark.parametrize("order", ["desc", "asc"])
def test_sdk_auto_pagination_sees_every_job_once_while_jobs_are_added_and_deleted(api, order, tmp_path):
    import asyncio

    churn = Churn(api, order)
    for video in api.sdk().videos.list(limit=2, order=order):
        churn.saw(video)
    churn.check()

    async def pages():
        async for video in api.sdk(asynchronous=True).videos.list(limit=2, order=order):
            churn.saw(video)

    api = Api(tmp_path / "async")
    churn = Churn(api, order)
    asyncio.run(pages())
    churn.check()


def test_an_unknown_cursor_is_refused(api):
    api.client.post("/v1/videos", json={"prompt": "p"})
    for after in ("video_" + "0" * 32, "nonsense"):
        error = _openai_error(api.client.get("/v1/videos", params={"after": after}), 400)
        assert (error["param"], error["code"]) == ("after", "invalid_value") and repr(after) in error["message"]


def test_an_idempotency_key_is_free_again_after_its_job_is_deleted(api):
    headers = {"Idempotency-Key": "k1"}
    first = api.client.post("/v1/videos", json={"prompt": "a"}, headers=headers).json()["id"]
    api.client.delete(f"/v1/videos/{first}")
    again = api.client.post("/v1/videos", json={"prompt": "a"}, headers=headers).json()
    assert again["id"] != first and again["status"] == "queued"


def test_the_content_of_a_failed_job_says_it_never_comes(api):
    ids = [api.client.post("/v1/videos", json={"prompt": f"p{i}"}).json()["id"] for i in range(2)]
    api.store.register("me", "here:1")
    api.store.claim("me")
    api.store.finish(ids[0], "failed", error="non-finite values in the latents after step 3")
    for video_id, words in (
        (ids[0], "failed (non-finite values in the latents after step 3): it has no mp4 and never will"),
        (ids[1], "is queued; its mp4 is there once it is completed"),
    ):
        answer = api.client.get(f"/v1/videos/{video_id}/content")
        assert answer.status_code == 404 and words in answer.json()["error"]["message"], answer.text
    failed = api.client.get(f"/v1/videos/{ids[0]}").json()
    assert failed["error"] == {
        "code": "generation_failed",
        "message": "non-finite values in the latents after step 3",
    }, failed


def test_without_the_serve_extra_the_server_names_the_readmes_command(monkeypatch, capsys):
    """No package index has parallel_wan: the hint is the README's own install command."""
    from parallel_wan.serve import __main__ as serve_main

    monkeypatch.setattr(serve_main, "EXTRA", (*serve_main.EXTRA, "parallel_wan_no_such_module"))
    with pytest.raises(SystemExit) as end:
        serve_main.main([])
    line = capsys.readouterr().err.strip()
    command = 'pip install -e ".[serve]"'
    assert end.value.code == 2 and command in line and "parallel_wan_no_such_module" in line, line
    assert command in open(os.path.join(REPO, "README.md")).read().split("## Serving")[1].split("\n## ")[0]


def test_models_metrics_and_the_page(api):
    assert api.client.get("/v1/models").json()["data"][0]["id"] == "tiny"
    api.client.post("/v1/videos", json={"prompt": "a"})
    text = api.client.get("/metrics").text
    for name in (
        "parallel_wan_queue_depth 1.0",
        "parallel_wan_jobs_total",
        "parallel_wan_step_seconds",
        "parallel_wan_phase_seconds",
        'parallel_wan_requests_total{answer="queued"} 1.0',
    ):
        assert name in text, name
    page = api.client.get("/").text
    assert all(
        f'id="{name}"' in page
        for name in (
            "prompt",
            "size",
            "num_frames",
            "num_inference_steps",
            "seed",
            "input_reference",
            "queue",
            "player",
        )
    )
    assert "http://" not in page and "https://" not in page and "<link" not in page  # no external assets


def test_the_http_side_touches_no_device(tmp_path):
    """What the HTTP process runs for a JAX server's request: no jax, no torch at all — so no CUDA
    (the device's memory comes from rank 0) and no 1.5 s torch import per server start."""
    code = (
        "import sys\n"
        "from parallel_wan.config.compose import compose_settings\n"
        "from parallel_wan.serve.served import serve_start\n"
        "served = serve_start(compose_settings(['model=tiny_ti2v', 'backend=jax', 'mesh=dp2_cp4']), 8, None, "
        f"{str(tmp_path)!r}, (None, 'host memory'))\n"
        "assert served.request({'prompt': 'a', 'size': '64x64'})[0].mesh.dp == 2\n"
        "print('jax' in sys.modules, 'torch' in sys.modules)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=ENV, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0 and proc.stdout.split() == ["False", "False"], proc.stderr[-2000:]


# ------------------------------------------------------------------ the store
# ------------------------------------------------------------------ OpenAI's error shape everywhere
OPENAI_ERROR_KEYS = {"message", "type", "param", "code"}


def _openai_error(answer, status: int) -> dict:
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert set(body) == {"error"} and set(body["error"]) == OPENAI_ERROR_KEYS, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"], body
    return body["error"]


def test_the_frameworks_refusals_answer_in_openai_shape(api):
    """FastAPI's own 404, 405 and 422 (`{"detail": …}`) are the API's error body, 422 as 400."""
    missing = _openai_error(api.client.get("/v1/nothing"), 404)
    assert missing["code"] == "not_found" and "GET /v1/nothing" in missing["message"]
    wrong = api.client.put("/v1/videos")
    error = _openai_error(wrong, 405)
    assert error["code"] == "method_not_allowed" and "PUT /v1/videos" in error["message"]
    assert "GET" in error["message"] and "POST" in error["message"] and wrong.headers["allow"]
    unread = _openai_error(api.client.get("/v1/videos", params={"limit": "many"}), 400)
    assert (unread["param"], unread["code"]) == ("limit", "invalid_value") and "'many'" in unread["message"]
    assert "detail" not in api.client.get("/v1/videos", params={"order": "up"}).text


def test_the_apps_refusals_carry_a_code(api, tmp_path):
    unknown = _openai_error(api.client.post("/v1/videos", json={"prompt": "a", "colour": "red"}), 400)
    assert (unknown["param"], unknown["code"]) == ("colour", "unknown_parameter")
    no_prompt = _openai_error(api.client.post("/v1/videos", json={"seconds": "1"}), 400)
    assert (no_prompt["param"], no_prompt["code"]) == ("prompt", "missing_required_parameter")
    gone = _openai_error(api.client.get("/v1/videos/video_0123456789abcdef0123456789abcdef"), 404)
    assert gone["code"] == "not_found" and gone["param"] == "video_id"
    small = Api(tmp_path / "small", max_body_mb="0.001")
    too_big = _openai_error(small.client.post("/v1/videos", json={"prompt": "x" * 4000}), 413)
    assert too_big["code"] == "request_too_large"
    keyed = Api(tmp_path / "keyed", key=api_key({"PARALLEL_WAN_API_KEY": KEY}))
    assert _openai_error(keyed.client.get("/v1/videos"), 401)["code"] == "invalid_api_key"
    api.nothing_queued()


def test_a_prompt_has_1_to_32000_characters(api):
    for prompt in ("", "x" * 32_001):
        error = _openai_error(api.client.post("/v1/videos", json={"prompt": prompt}), 400)
        assert error["param"] == "prompt" and "1 to 32000" in error["message"], error
    api.nothing_queued()
    assert api.client.post("/v1/videos", json={"prompt": "x" * 32_000}).status_code == 200


# ------------------------------------------------------------------ model names
def test_a_model_nobody_serves_is_404_model_not_found_and_nothing_is_queued(api):
    for body in ({"prompt": "a", "model": "sora-2"}, {"prompt": "a", "model": "Wan-AI/tiny"}):
        error = _openai_error(api.client.post("/v1/videos", json=body), 404)
        assert (error["param"], error["code"]) == ("model", "model_not_found"), error
        assert f"model={body['model']!r}" in error["message"] and "model=tiny" in error["message"], error
    assert _openai_error(api.client.get("/v1/models/sora-2"), 404)["code"] == "model_not_found"
    api.nothing_queued()


def test_the_operators_names_serve_an_openai_client_unchanged(tmp_path):
    """served_model_names=sora-2: OpenAI's SDK in strict mode (its types allow Sora's sizes only), as its
    own examples call it; the job is queued, not run (no loop here)."""
    import openai

    api = Api(tmp_path / "storage", served_model_names="[sora-2, my-wan]")
    assert [m["id"] for m in api.client.get("/v1/models").json()["data"]] == ["tiny", "sora-2", "my-wan"]
    client = openai.OpenAI(
        base_url="http://testserver/v1", api_key="unused", http_client=api.client, _strict_response_validation=True
    )
    video = client.videos.create(model="sora-2", prompt="a calico cat playing a piano on stage", size="1280x720")
    assert video.status == "queued" and video.model == "tiny"
    assert client.models.retrieve("my-wan").id == "my-wan"
    with pytest.raises(openai.NotFoundError) as refused:
        client.models.retrieve("sora-2-pro")
    assert refused.value.code == "model_not_found"


def test_the_checkpoint_folders_name_and_a_hugging_face_id_ending_in_it_are_the_models(tiny_t2v, tmp_path):
    folder = tmp_path / "Wan2.2-T2V-A14B-Diffusers"
    os.symlink(tiny_t2v.diffusers, folder)
    api = Api(tmp_path / "storage", [f"checkpoint_dir={folder}"])
    assert [m["id"] for m in api.client.get("/v1/models").json()["data"]] == ["tiny", "Wan2.2-T2V-A14B-Diffusers"]
    for name in ("tiny", "Wan2.2-T2V-A14B-Diffusers", "Wan-AI/Wan2.2-T2V-A14B-Diffusers"):
        assert api.client.post("/v1/videos", json={"prompt": "a", "model": name}).status_code == 200, name
        assert api.client.get(f"/v1/models/{name}").json()["id"] == name
    for name in ("Wan2.2-T2V-A14B", "Wan-AI/Wan2.2-I2V-A14B-Diffusers", "/Wan2.2-T2V-A14B-Diffusers"):
        assert api.client.post("/v1/videos", json={"prompt": "a", "model": name}).status_code == 404, name
    assert str(tmp_path) not in api.client.get("/v1/models").text  # a name, never the path


def test_served_model_names_are_read_and_refused_as_settings():
    from parallel_wan.serve.settings import model_names

    assert model_names("sora-2") == ("sora-2",) and model_names("[sora-2, 'wan']") == ("sora-2", "wan")
    assert model_names("") == () and model_names("[a,b]") == ("a", "b")
    with pytest.raises(ConfigError, match="without spaces"):
        model_names("my wan")


# ------------------------------------------------------------------ what OpenAI's SDK does with our answers
def test_an_idempotency_conflict_is_not_retried_by_the_sdk(api):
    """OpenAI's SDKs retry a 409 unless `x-should-retry: false` says a retry cannot help."""
    import openai

    refused = api.app.state.api.metrics.requests.labels("refused")
    headers = {"Idempotency-Key": "k"}
    api.client.post("/v1/videos", json={"prompt": "a", "size": "1280x720"}, headers=headers)
    before = refused._value.get()
    client = api.sdk().with_options(max_retries=3)
    with pytest.raises(openai.ConflictError) as conflict:
        client.videos.create(prompt="b", size="1280x720", extra_headers=headers)
    assert conflict.value.response.headers["x-should-retry"] == "false"
    assert refused._value.get() == before + 1  # asked once, not four times


def test_a_bug_answers_500_in_openai_shape_without_a_path(api, monkeypatch):
    def broken(*args):
        raise OSError(f"disk gone at {api.settings.storage_dir}")

    monkeypatch.setattr(api.store, "page", broken)
    client = TestClient(api.app, raise_server_exceptions=False)
    error = _openai_error(client.get("/v1/videos"), 500)
    assert (error["type"], error["code"]) == ("server_error", "server_error") and "OSError" in error["message"]
    assert api.settings.storage_dir not in error["message"]


def test_unfinished_jobs_say_when_to_poll_again(api):
    from parallel_wan.serve.routes.video_objects import poll_after

    ids = [api.client.post("/v1/videos", json={"prompt": p}).json()["id"] for p in "ab"]
    assert api.client.get(f"/v1/videos/{ids[0]}").headers["openai-poll-after-ms"] == "1000"  # queued
    api.store.register("me", "here:1")
    api.store.claim("me")
    api.store.progress(ids[0], 2)
    row = api.store.get(ids[0])
    assert poll_after(row, now=row["started_at"] + 10) == {"openai-poll-after-ms": "5000"}  # 10 s for 2 steps
    assert poll_after(row, now=row["started_at"] + 1000) == {"openai-poll-after-ms": "10000"}  # bounded
    api.store.finish(ids[0], "completed", record={})
    assert "openai-poll-after-ms" not in api.client.get(f"/v1/videos/{ids[0]}").headers


def test_characters_answer_in_openai_shape_never_405(api):
    import openai

    client = api.sdk()
    client.videos.create(prompt="a", size="1280x720")
    for call in (
        lambda: client.videos.create_character(name="Ann", video=("a.mp4", b"x", "video/mp4")),
        lambda: client.videos.get_character("char_1"),
    ):
        with pytest.raises(openai.BadRequestError) as refused:
            call()
        assert refused.value.code == "unsupported_endpoint" and "not served" in refused.value.message


def test_thumbnail_and_spritesheet_of_a_completed_job_and_the_preview_of_a_running_one(api):
    """Completed: the images made from its frames (the worker writes them beside the mp4);
    running: a GET asks the loop for a preview (made after its next step: the torchrun server
    test runs that) and gets the latest one with the steps it shows; queued: not yet."""
    import numpy as np
    from PIL import Image

    from parallel_wan.serve.previews import write_variants

    client = api.sdk()
    done, running, queued = (client.videos.create(prompt=p, size="1280x720").id for p in "abc")
    api.store.register("me", "here:1")
    api.store.claim("me")
    write_variants(api.settings, done, np.full((5, 72, 128, 3), 90, np.uint8))
    api.store.finish(done, "completed", record={})
    thumb = Image.open(io.BytesIO(client.videos.download_content(done, variant="thumbnail").content))
    sheet = Image.open(io.BytesIO(client.videos.download_content(done, variant="spritesheet").content))
    assert (thumb.format, thumb.size, sheet.format, sheet.size) == ("WEBP", (128, 72), "JPEG", (4 * 128, 2 * 72))
    api.store.claim("me")
    answer = api.client.get(f"/v1/videos/{running}/content", params={"variant": "thumbnail"})
    assert "no preview yet" in _openai_error(answer, 404)["message"] and "openai-poll-after-ms" in answer.headers
    assert api.store.preview_wanted(running)  # what the loop reads at its next step vote
    write_variants(api.settings, running, np.zeros((2, 72, 128, 3), np.uint8))  # as ServerPreview.show does
    api.store.previewed(running, 3)
    answer = api.client.get(f"/v1/videos/{running}/content", params={"variant": "spritesheet"})
    assert answer.status_code == 200 and answer.headers["x-preview-step"] == "3"
    assert answer.headers["content-type"] == "image/jpeg" and api.store.preview_wanted(running)  # and again
    answer = api.client.get(f"/v1/videos/{queued}/content", params={"variant": "thumbnail"})
    assert "is queued; its thumbnail is there once it is completed" in _openai_error(answer, 404)["message"]
    wrong = _openai_error(api.client.get(f"/v1/videos/{done}/content", params={"variant": "gif"}), 400)
    assert wrong["param"] == "variant" and "thumbnail or spritesheet" in wrong["message"]
    api.client.delete(f"/v1/videos/{done}")
    assert not [f for f in os.listdir(api.settings.videos_dir) if f.startswith(done)]


# ------------------------------------------------------------------ remix and edits (video-to-video)
def _completed_job(api, size="1280x720", **fields):
    """A job marked completed with a small mp4 (the loop is not here; a run would stretch it to
    the job's size): what a remix starts from."""
    from harness.videos import write_source_video

    from parallel_wan.serve.files import video_path

    video_id = api.client.post("/v1/videos", json={"prompt": "a fox", "size": size, **fields}).json()["id"]
    api.store.register("me", "here:1")
    assert api.store.claim("me")["id"] == video_id
    write_source_video(video_path(api.settings, video_id), frames=9, height=64, width=64)
    api.store.finish(video_id, "completed", record={})
    return video_id


def test_a_remix_is_the_source_jobs_settings_with_a_new_prompt_from_its_video(api):
    """OpenAI's SDK in strict mode (Sora's 1280x720): remix answers a queued Video with
    remixed_from_video_id; the job is the source's settings and seed with the new prompt, its
    video a copy of the source's mp4 (a DELETE of the source cannot take it away)."""
    import openai

    from parallel_wan.serve.files import source_video_path, video_path

    source = _completed_job(api, seed=7, num_inference_steps=3)
    client = api.sdk()
    remix = client.videos.remix(source, prompt="the fox in the rain", extra_body={"strength": 0.5})
    assert (remix.status, remix.remixed_from_video_id, remix.size, remix.prompt) == (
        "queued",
        source,
        "1280x720",
        "the fox in the rain",
    )
    settings = json.loads(api.store.get(remix.id)["settings"])
    copy = source_video_path(api.settings, remix.id)
    assert settings == {
        "prompt": "the fox in the rain",
        "seed": 7,
        "steps": 3,
        "width": 1280,
        "height": 720,
        "strength": 0.5,
        "video": copy,
    }
    with open(copy, "rb") as a, open(video_path(api.settings, source), "rb") as b:
        assert a.read() == b.read()
    assert client.videos.retrieve(remix.id).remixed_from_video_id == source
    assert "inputs" not in json.dumps(api.client.get(f"/v1/videos/{remix.id}").json())  # no server path
    queued = client.videos.create(prompt="x", size="1280x720")
    with pytest.raises(openai.BadRequestError, match="is queued; a remix or an edit starts from a completed one"):
        client.videos.remix(queued.id, prompt="y")
    with pytest.raises(openai.NotFoundError):
        client.videos.remix("video_" + "0" * 32, prompt="y")
    client.videos.delete(remix.id)
    assert not os.path.exists(copy)


def test_an_edit_starts_from_a_completed_job_or_an_uploaded_mp4(api, tmp_path):
    import imageio.v3 as iio
    import numpy as np
    from harness.videos import write_source_video

    from parallel_wan.serve.files import source_video_path

    source = _completed_job(api)
    by_id = api.client.post("/v1/videos/edits", json={"prompt": "b", "video": {"id": source}, "strength": 0.6})
    assert by_id.status_code == 200 and by_id.json()["remixed_from_video_id"] == source, by_id.text
    write_source_video(tmp_path / "mine.mp4", frames=13, height=64, width=64)  # stretched to the size when run
    upload = (tmp_path / "mine.mp4").read_bytes()
    edit = api.sdk().videos.edit(prompt="c", video=("mine.mp4", upload, "video/mp4"), extra_body={"size": "1280x720"})
    assert edit.remixed_from_video_id is None and edit.status == "queued"
    assert open(source_video_path(api.settings, edit.id), "rb").read() == upload
    settings = json.loads(api.store.get(edit.id)["settings"])
    assert settings["video"] == source_video_path(api.settings, edit.id) and "strength" not in settings
    assert api.served.spec(settings).video.num_frames == 13  # all of the upload
    # without a size, the upload's own, each side to the nearest multiple of 16 the model takes
    for (width, height), size in (((80, 48), "80x48"), ((74, 50), "80x48")):
        frames = np.full((5, height, width, 3), 90, np.uint8)  # exactly this size (no padding to 16)
        iio.imwrite(tmp_path / "own.mp4", frames, fps=16, codec="libx264", macro_block_size=1)
        files = {"prompt": (None, "e"), "video": ("own.mp4", (tmp_path / "own.mp4").read_bytes(), "video/mp4")}
        own = api.client.post("/v1/videos/edits", files=files).json()  # raw: the strict SDK knows Sora's sizes only
        assert own["size"] == size and json.loads(api.store.get(own["id"])["settings"])["width"] == int(size[:2])
    before = sorted(os.listdir(api.settings.inputs_dir))
    for answer, param, words in (
        (api.client.post("/v1/videos/edits", json={"prompt": "d"}), "video", "video is required"),
        (
            api.client.post("/v1/videos/edits", files={"prompt": (None, "d"), "video": ("x.mp4", b"not a video")}),
            "video",
            "video could not be read as a video",
        ),
        (api.client.post("/v1/videos", json={"prompt": "d", "strength": 0.5}), "strength", "remix or an edit"),
        (
            api.client.post(f"/v1/videos/{source}/remix", json={"prompt": "d", "strength": 2}),
            "strength",
            "strength=2.0 must be above 0 and at most 1",
        ),
    ):
        error = _openai_error(answer, 400)
        assert error["param"] == param and words in error["message"], error
        assert api.settings.storage_dir not in error["message"]
    assert sorted(os.listdir(api.settings.inputs_dir)) == before  # a refused edit leaves no file


def test_a_remix_of_an_image_to_video_job_keeps_its_first_frame(tmp_path):
    """On an I2V server a remix (and an edit of a job) starts from the source job's video *and*
    its first frame, copied (a DELETE of the source cannot take it away); an uploaded edit takes
    the request's input_reference beside the video (two files in one form) and without one is
    refused as a create without an image is; an extension's first frame is the source's last."""
    import base64

    from harness.videos import write_source_video

    i2v = Api(tmp_path / "i2v", ["model=tiny_i2v"])
    picture = png_bytes(48, 32)
    url = "data:image/png;base64," + base64.b64encode(picture).decode()
    source = _completed_job(i2v, size="64x64", input_reference={"image_url": url}, seed=9)
    done = _completed_job(i2v, size="64x64", input_reference={"image_url": url})  # before any job is queued
    remix = i2v.client.post(f"/v1/videos/{source}/remix", json={"prompt": "the fox at dusk"}).json()
    settings = json.loads(i2v.store.get(remix["id"])["settings"])
    assert (settings["seed"], remix["remixed_from_video_id"]) == (9, source)
    assert settings["image"] != json.loads(i2v.store.get(source)["settings"])["image"]  # its own copy
    assert open(settings["image"], "rb").read() == picture
    spec = i2v.served.spec(settings)
    assert (spec.video.image, spec.video.video) == (settings["image"], settings["video"])
    i2v.client.delete(f"/v1/videos/{source}")
    assert os.path.exists(settings["image"]) and os.path.exists(settings["video"])
    write_source_video(tmp_path / "clip.mp4", frames=9, height=64, width=64)
    clip = (tmp_path / "clip.mp4").read_bytes()
    files = {"prompt": (None, "e"), "video": ("c.mp4", clip, "video/mp4"), "input_reference": ("f.png", picture)}
    edit = i2v.client.post("/v1/videos/edits", files=files)
    assert edit.status_code == 200, edit.text
    settings = json.loads(i2v.store.get(edit.json()["id"])["settings"])
    assert open(settings["image"], "rb").read() == picture and settings["video"].endswith(".mp4")
    files.pop("input_reference")
    refused = _openai_error(i2v.client.post("/v1/videos/edits", files=files), 400)
    assert refused["message"] == "model=tiny_i2v generates from an image; set input_reference (a PNG/JPEG)"
    extension = i2v.client.post("/v1/videos/extensions", json={"prompt": "on", "video": {"id": done}})
    assert "image" not in json.loads(i2v.store.get(extension.json()["id"])["settings"])


def test_an_extension_continues_a_video_with_the_image_to_video_model(api, tmp_path):
    """seconds is the whole video's length: the new part is the frames past the source's (its
    first frame the source's last); the answer's seconds is the whole video's. A text-to-video
    server says which models can. The run itself is tests/cli/test_extend.py's."""
    import openai
    from harness.videos import write_source_video

    from parallel_wan.serve.files import source_video_path, video_path

    refused = _openai_error(api.client.post("/v1/videos/extensions", json={"prompt": "a", "video": {"id": "x"}}), 400)
    assert "image-to-video model (I2V-A14B, TI2V-5B)" in refused["message"] and "model=tiny" in refused["message"]
    i2v = Api(tmp_path / "i2v", ["model=tiny_i2v"])
    write_source_video(tmp_path / "nine.mp4", frames=9, height=64, width=64)
    upload = (tmp_path / "nine.mp4").read_bytes()
    client = i2v.sdk()
    video = client.videos.extend(
        prompt="the river goes on",
        seconds="4",
        video=("nine.mp4", upload, "video/mp4"),
        extra_body={"size": "1280x720"},
    )
    assert (video.status, video.seconds, video.size) == ("queued", "4", "1280x720")  # 65 frames at 16 fps
    settings = json.loads(i2v.store.get(video.id)["settings"])
    assert settings["extend"] == source_video_path(i2v.settings, video.id) and settings["num_frames"] == 57
    assert "image" not in settings and i2v.served.spec(settings).video.inputs == {"image"}
    i2v.store.register("me", "here:1")
    i2v.store.claim("me")
    write_source_video(video_path(i2v.settings, video.id), frames=9, height=64, width=64)
    i2v.store.finish(video.id, "completed", record={})
    longer = i2v.client.post("/v1/videos/extensions", json={"prompt": "on", "seconds": "5", "video": {"id": video.id}})
    assert (longer.json()["seconds"], longer.json()["remixed_from_video_id"]) == ("5", None)  # continued, not remixed
    with pytest.raises(openai.BadRequestError, match="seconds=0.25 is the whole video's length"):
        client.videos.extend(prompt="a", seconds="0.25", video=("nine.mp4", upload, "video/mp4"))
    with pytest.raises(openai.BadRequestError, match="video could not be read as a video"):
        client.videos.extend(prompt="a", seconds="4", video=("x.mp4", b"not a video", "video/mp4"))


def test_the_async_sdk_drives_every_endpoint_in_strict_mode(tmp_path):
    """OpenAI's AsyncOpenAI with response validation on, as an asyncio app calls it: create,
    retrieve, list, the models, a thumbnail, remix, edit, extend, delete (Sora's 1280x720; the
    jobs are queued or marked completed here — their runs are the torchrun server tests'). A TI2V
    server (which extends, and remixes a video made without a first frame) at Sora's 1024x1792,
    a size of 32-pixel multiples."""
    import asyncio

    import numpy as np
    import openai

    from parallel_wan.serve.previews import write_variants

    api = Api(tmp_path / "storage", ["model=tiny_ti2v"], served_model_names="sora-2")
    source = _completed_job(api, size="1024x1792")
    write_variants(api.settings, source, np.zeros((5, 72, 128, 3), np.uint8))
    with open(os.path.join(api.settings.videos_dir, f"{source}.mp4"), "rb") as f:
        upload = f.read()

    async def session():
        client = api.sdk(asynchronous=True)
        created = await client.videos.create(model="sora-2", prompt="a cat", size="1024x1792", seconds="4")
        assert (await client.videos.retrieve(created.id)).status == "queued"
        assert [v.id async for v in client.videos.list(limit=1)] == [created.id, source]  # two pages
        assert (await client.models.retrieve("sora-2")).id == "sora-2"
        thumb = await client.videos.download_content(source, variant="thumbnail")
        assert thumb.content[:4] == b"RIFF"  # WebP
        remix = await client.videos.remix(source, prompt="a cat in the rain")
        sora = {"size": "1024x1792"}
        edit = await client.videos.edit(prompt="b", video=("s.mp4", upload, "video/mp4"), extra_body=sora)
        extension = await client.videos.extend(
            prompt="c", seconds="4", video=("s.mp4", upload, "video/mp4"), extra_body=sora
        )
        assert (remix.remixed_from_video_id, edit.status, extension.seconds) == (source, "queued", "4")
        assert (await client.videos.delete(created.id)).deleted
        try:
            await client.videos.retrieve(created.id)
        except openai.NotFoundError as gone:
            return gone.code
        return None

    assert asyncio.run(session()) == "not_found"


# ------------------------------------------------------------------ backpressure and retention
def test_a_full_queue_answers_429_with_retry_after_and_keeps_nothing(tmp_path):
    """max_queued=2: a third waiting job is refused in OpenAI's rate-limit shape with Retry-After
    (30 s before any job finished; then the recent jobs' mean run time per place over the
    servers alive); an Idempotency-Key retry of an accepted request is still answered; a place
    frees when a job starts. OpenAI's SDK raises RateLimitError once its retries are spent."""
    import openai

    api = Api(tmp_path / "storage", ["model=tiny_ti2v"], max_queued="2")  # takes an image, needs none
    first = api.client.post("/v1/videos", json={"prompt": "a"}, headers={"Idempotency-Key": "k1"}).json()["id"]
    api.client.post("/v1/videos", json={"prompt": "b"})
    before = sorted(os.listdir(api.settings.inputs_dir)) if os.path.isdir(api.settings.inputs_dir) else []
    files = {"prompt": (None, "c"), "input_reference": ("f.png", png_bytes())}
    full = api.client.post("/v1/videos", files=files)
    error = _openai_error(full, 429)
    assert (error["type"], error["code"], full.headers["retry-after"]) == ("requests", "queue_full", "30")
    assert "2 videos wait, max_queued=2" in error["message"]
    now = sorted(os.listdir(api.settings.inputs_dir)) if os.path.isdir(api.settings.inputs_dir) else []
    assert now == before and api.store.counts().get("queued") == 2  # nothing of the refused request
    again = api.client.post("/v1/videos", json={"prompt": "a"}, headers={"Idempotency-Key": "k1"})
    assert again.status_code == 200 and again.json()["id"] == first
    with pytest.raises(openai.RateLimitError, match="the queue is full"):
        api.sdk().with_options(max_retries=0).videos.create(prompt="d")
    # one job ran 40 s (started and finished), one server alive: a place frees in 40 s
    claimed = api.store.claim("test")
    api.store._db().execute("UPDATE videos SET started_at = started_at - 40 WHERE id = ?", (claimed["id"],))
    api.store.finish(claimed["id"], "completed", record={})
    assert api.client.post("/v1/videos", json={"prompt": "e"}).status_code == 200  # a place was free
    assert api.client.post("/v1/videos", json={"prompt": "f"}).headers["retry-after"] == "40"
    assert 'parallel_wan_requests_total{answer="queue_full"} 3.0' in api.client.get("/metrics").text


def test_finished_videos_expire_after_keep_hours(tmp_path):
    """keep_hours=: a finished job's expires_at (completed_at + keep) in its answer; past it, GET,
    content, lists and DELETE know it no more (before any sweep), and the sweep turns it into a
    tombstone (a list cursor naming it stays valid) whose files the worker removes. A server
    started without keep_hours keeps every video again."""
    from harness.videos import write_source_video

    from parallel_wan.serve.files import video_path

    api = Api(tmp_path / "storage", keep_hours="2")
    kept, gone = (api.client.post("/v1/videos", json={"prompt": p}).json()["id"] for p in ("a", "b"))
    assert api.client.get(f"/v1/videos/{kept}").json()["expires_at"] is None  # not finished yet
    for video_id in (kept, gone):
        assert api.store.claim("test")["id"] == video_id
        write_source_video(video_path(api.settings, video_id), frames=5, height=32, width=32)
        api.store.finish(video_id, "completed", record={})
    answer = api.client.get(f"/v1/videos/{kept}").json()
    assert answer["expires_at"] == answer["completed_at"] + 7200
    api.store._db().execute("UPDATE videos SET expires_at = expires_at - 7201 WHERE id = ?", (gone,))
    assert api.client.get(f"/v1/videos/{gone}").status_code == 404
    assert api.client.get(f"/v1/videos/{gone}/content").status_code == 404
    assert api.client.delete(f"/v1/videos/{gone}").status_code == 404
    assert [v["id"] for v in api.client.get("/v1/videos").json()["data"]] == [kept]
    assert api.store.expire() == [gone] and api.store.expire() == []
    assert api.store.row(gone)["prompt"] == ""  # a tombstone: nothing of the request
    assert api.client.get(f"/v1/videos?after={gone}").status_code == 200
    kept_forever = Store(api.settings.database)  # a server started without keep_hours
    kept_forever.retain()
    assert api.client.get(f"/v1/videos/{kept}").json()["expires_at"] is None


def test_a_last_frame_comes_as_an_upload_or_a_data_url_and_is_refused_where_it_cannot_be_used(tmp_path):
    """First-last-frame video on an I2V server: `last_image` beside `input_reference`, uploaded
    (multipart) or as {"image_url": data URL} (JSON), stored under the job's id and run as the
    command line's last_image=; a text-to-video server refuses it as the CLI does, a broken one is
    refused by name, and a refused request keeps nothing."""
    import base64

    i2v = Api(tmp_path / "i2v", ["model=tiny_i2v"])
    # GET /v1/models says which inputs a request may give (the page shows a field per input)
    assert i2v.client.get("/v1/models").json()["data"][0]["inputs"] == [
        {"field": "input_reference", "required": True},
        {"field": "last_image", "required": False},
    ]
    first, last = png_bytes(64, 64), png_bytes(32, 32, "JPEG")
    files = {"prompt": (None, "a"), "input_reference": ("f.png", first), "last_image": ("l.jpg", last)}
    answer = i2v.client.post("/v1/videos", files=files)
    assert answer.status_code == 200, answer.text
    settings = json.loads(i2v.store.get(answer.json()["id"])["settings"])
    assert settings["last_image"].endswith(f"{answer.json()['id']}.last.jpg")
    assert open(settings["last_image"], "rb").read() == last and open(settings["image"], "rb").read() == first
    assert i2v.served.spec(settings).video.last_image == settings["last_image"]
    url = "data:image/png;base64," + base64.b64encode(first).decode()
    answer = i2v.client.post(
        "/v1/videos", json={"prompt": "b", "input_reference": {"image_url": url}, "last_image": {"image_url": url}}
    )
    assert answer.status_code == 200, answer.text
    i2v.client.delete(f"/v1/videos/{answer.json()['id']}")
    assert not [n for n in os.listdir(i2v.settings.inputs_dir) if n.startswith(answer.json()["id"])]

    t2v = Api(tmp_path / "t2v")
    assert t2v.client.get("/v1/models").json()["data"][0]["inputs"] == []
    refused = _openai_error(t2v.client.post("/v1/videos", json={"prompt": "c", "last_image": {"image_url": url}}), 400)
    assert "takes no last frame" in refused["message"] and refused["param"] == "last_image", refused
    broken = {"prompt": (None, "d"), "input_reference": ("f.png", first), "last_image": ("l.png", b"not an image")}
    refused = _openai_error(t2v.client.post("/v1/videos", files=broken), 400)
    assert refused["param"] == "last_image" and "could not be read as an image" in refused["message"], refused
    refused = _openai_error(t2v.client.post("/v1/videos", json={"prompt": "e", "last_image": "a.png"}), 400)
    assert refused["param"] == "last_image", refused
    t2v.nothing_queued()


def test_s2v_speech_comes_as_an_upload_or_a_data_url_and_is_checked_before_queueing(tmp_path):
    """S2V on a server: `audio_reference` (vLLM-Omni's field) beside `input_reference`, uploaded
    (multipart) or as {"audio_url": data URL} (JSON), stored under the job's id and run as the
    command line's audio= (the job's answered seconds are the speech's clips'); silence, a file
    that is not audio, or a model that takes none are 400s naming the field, and keep nothing."""
    import base64
    import io

    from parallel_wan.builtin.s2v_examples import speech, write_wav

    def wav(samples) -> bytes:
        out = io.BytesIO()
        write_wav(out, samples)
        return out.getvalue()

    s2v = Api(tmp_path / "s2v", ["model=tiny_s2v", "steps=2", "num_frames=8"])
    assert s2v.client.get("/v1/models").json()["data"][0]["inputs"] == [
        {"field": "input_reference", "required": True},
        {"field": "audio_reference", "required": True},
        {"field": "pose_video", "required": False},
    ]
    assert not s2v.client.get("/v1/models").json()["data"][0]["extends"]
    face, voice = png_bytes(64, 64), wav(speech())
    files = {"prompt": (None, "a"), "input_reference": ("f.png", face), "audio_reference": ("s.wav", voice)}
    answer = s2v.client.post("/v1/videos", files=files)
    assert answer.status_code == 200, answer.text
    job = answer.json()
    settings = json.loads(s2v.store.get(job["id"])["settings"])
    assert settings["audio"].endswith(f"{job['id']}.audio") and open(settings["audio"], "rb").read() == voice
    spec = s2v.served.spec(settings)
    from parallel_wan.serve.fields import seconds_of

    assert spec.video.s2v.audio == settings["audio"] and job["seconds"] == seconds_of(21, 16)  # 5 + 2 × 8 frames
    url = "data:audio/wav;base64," + base64.b64encode(voice).decode()
    image = "data:image/png;base64," + base64.b64encode(face).decode()
    answer = s2v.client.post(
        "/v1/videos",
        json={"prompt": "b", "input_reference": {"image_url": image}, "audio_reference": {"audio_url": url}},
    )
    assert answer.status_code == 200, answer.text
    for id_ in {job["id"], answer.json()["id"]}:
        s2v.client.delete(f"/v1/videos/{id_}")
    assert os.listdir(s2v.settings.inputs_dir) == []
    for audio, words in (
        (wav(speech() * 0), "is silent"),
        (b"not audio at all", "is not an audio file ffmpeg can read"),
        (b"", "is empty"),
    ):
        bad = {"prompt": (None, "c"), "input_reference": ("f.png", face), "audio_reference": ("s.wav", audio)}
        refused = _openai_error(s2v.client.post("/v1/videos", files=bad), 400)
        assert refused["param"] == "audio_reference" and words in refused["message"], refused
        assert str(tmp_path) not in refused["message"]  # the server's paths never reach a client
    refused = _openai_error(
        s2v.client.post("/v1/videos", files={"prompt": (None, "d"), "input_reference": ("f.png", face)}), 400
    )
    assert refused["param"] == "audio_reference" and "set audio_reference" in refused["message"], refused
    s2v.nothing_queued()

    t2v = Api(tmp_path / "t2v")
    refused = _openai_error(
        t2v.client.post("/v1/videos", json={"prompt": "e", "audio_reference": {"audio_url": url}}), 400
    )
    assert refused["param"] == "audio_reference" and "takes no audio" in refused["message"], refused
    t2v.nothing_queued()


def test_animate_videos_come_as_uploads_or_data_urls_and_are_checked_before_queueing(tmp_path):
    """Animate on a server: the character's `input_reference` and the driving videos by
    diffusers' names (`pose_video`, `face_video`; `mode=replace` with `background_video` and
    `mask_video`), uploaded (multipart) or as data: URLs (JSON), stored under the job's id and
    run as the command line's settings (the job's seconds are the pose video's); a missing face
    video, videos of different lengths, a mask that is not a mask, text for a file and a model
    that takes no driving video are 400s naming the field, and keep nothing."""
    import base64

    from parallel_wan.builtin.animate_examples import write_examples
    from parallel_wan.serve.fields import seconds_of

    examples = write_examples(tmp_path / "inputs", 13, 64, 64, 32)
    raw = {k: open(v, "rb").read() for k, v in examples.items()}
    short = write_examples(tmp_path / "short", 9, 64, 64, 32)
    animate = Api(tmp_path / "animate", ["model=tiny_animate", "steps=2", "num_frames=9"])
    assert animate.client.get("/v1/models").json()["data"][0]["inputs"] == [
        {"field": "input_reference", "required": True},
        {"field": "pose_video", "required": True},
        {"field": "face_video", "required": True},
        {"field": "background_video", "required": False},
        {"field": "mask_video", "required": False},
    ]
    files = {k: (f"{k}.mp4", raw[k]) for k in ("pose_video", "face_video", "background_video", "mask_video")}
    files |= {"prompt": (None, "a"), "mode": (None, "replace"), "input_reference": ("c.png", raw["image"])}
    answer = animate.client.post("/v1/videos", files=files)
    assert answer.status_code == 200, answer.text
    job = answer.json()
    settings = json.loads(animate.store.get(job["id"])["settings"])
    for key in ("pose_video", "face_video", "background_video", "mask_video"):
        assert settings[key].endswith(f"{job['id']}.{key}.mp4") and open(settings[key], "rb").read() == raw[key]
    spec = animate.served.spec(settings)
    assert spec.video.animate.mode == "replace" and job["seconds"] == seconds_of(13, spec.model.fps)

    def url(key, source=raw):
        return "data:video/mp4;base64," + base64.b64encode(source[key]).decode()

    image = "data:image/png;base64," + base64.b64encode(raw["image"]).decode()
    body = {"prompt": "b", "input_reference": {"image_url": image}, "pose_video": url("pose_video")}
    answer = animate.client.post("/v1/videos", json=body | {"face_video": {"video_url": url("face_video")}})
    assert answer.status_code == 200, answer.text
    assert json.loads(animate.store.get(answer.json()["id"])["settings"]).get("mode") in (None, "animate")
    for id_ in {job["id"], answer.json()["id"]}:
        animate.client.delete(f"/v1/videos/{id_}")
    assert os.listdir(animate.settings.inputs_dir) == []
    shorter = {"face_video": url("face_video", {"face_video": open(short["face_video"], "rb").read()})}
    for extra, param, words in (
        ({}, "face_video", "set face_video"),
        (shorter, "face_video", "face_video has 9 frames but pose_video has 13"),
        ({"face_video": "data:video/mp4;base64," + base64.b64encode(b"no video").decode()}, "face_video", "video"),
        (
            {"face_video": url("face_video"), "mode": "replace", "background_video": url("background_video")},
            "mask_video",
            "mode=replace needs mask_video",
        ),
        (
            {
                "face_video": url("face_video"),
                "mode": "replace",
                "background_video": url("background_video"),
                "mask_video": url("background_video"),
            },
            "mask_video",
            "is not a mask",
        ),
        ({"face_video": "/etc/passwd"}, "face_video", "is not a data: URL, and this server fetches nothing"),
    ):
        refused = _openai_error(animate.client.post("/v1/videos", json=body | extra), 400)
        assert refused["param"] == param and words in refused["message"], (extra.keys(), refused)
        assert str(tmp_path) not in refused["message"]  # the server's paths never reach a client
    text = {"prompt": (None, "c"), "input_reference": ("c.png", raw["image"]), "pose_video": (None, "pose.mp4")}
    refused = _openai_error(animate.client.post("/v1/videos", files=text), 400)
    assert refused["param"] == "pose_video" and "must be a video file upload, not text" in refused["message"], refused
    animate.nothing_queued()
    source = _completed_job(animate, size="64x64")  # the built-in model's example inputs
    for route, body in (
        (f"/v1/videos/{source}/remix", {"prompt": "r"}),
        ("/v1/videos/extensions", {"video": {"id": source}}),
    ):
        refused = _openai_error(animate.client.post(route, json={"prompt": "r", **body}), 400)
        assert "makes its video from its driving videos" in refused["message"], refused

    t2v = Api(tmp_path / "t2v")
    refused = _openai_error(t2v.client.post("/v1/videos", json={"prompt": "e", "pose_video": url("pose_video")}), 400)
    assert refused["param"] == "pose_video" and "takes no pose_video" in refused["message"], refused
    refused = _openai_error(t2v.client.post("/v1/videos", json={"prompt": "e", "mode": "replace"}), 400)
    assert refused["param"] == "mode" and "takes no mode" in refused["message"], refused
    t2v.nothing_queued()
