"""LoRAs chosen per request (serve/lora_registry.py): `lora_dir=` registers a folder's LoRA files
at start (each checked against the model, a bad one stops the start naming it), `GET /v1/models`
lists them with their recipes, a request's `loras` (or vLLM-Omni's `lora`, also inside
`extra_params`) become the run's lora / lora_high / lora_low settings after the ones fixed at
start, a recipe lays its settings under the request's; and on a real 2-rank torchrun server a
request with a LoRA renders the CLI's video with that LoRA, and one without after it renders
bit for bit what the server rendered before it had ever merged one."""

import json

import numpy as np
import pytest
from harness.cli import run_in_process
from harness.frames import assert_same_frames
from harness.lora_files import bad_file, expert_lora_words, lora_pairs, write_lora
from harness.serve import SETTINGS, Server
from test_api import Api, _openai_error

from parallel_wan.builtin.tiny import transformer_config
from parallel_wan.config import ConfigError

pytestmark = pytest.mark.filterwarnings("ignore:The Sora API:DeprecationWarning")


@pytest.fixture(scope="module")
def lora_dir(tmp_path_factory):
    """style (PEFT, alpha ≠ rank), fast (ComfyUI, with a recipe: 2 steps, guidance 1)."""
    folder = tmp_path_factory.mktemp("loras")
    cfg = transformer_config("t2v")
    write_lora(folder / "style.safetensors", lora_pairs(cfg, rank=8, seed=2), "peft", alpha=4.0)
    write_lora(folder / "fast.safetensors", lora_pairs(cfg, rank=4, seed=3), "comfyui", alpha=2.0)
    (folder / "fast.json").write_text(json.dumps({"steps": 2, "guidance_high": 1.0, "guidance_low": 1.0}))
    (folder / "notes.txt").write_text("not a LoRA: left alone")
    return folder


def test_requests_name_registered_loras(lora_dir, tmp_path):
    api = Api(tmp_path / "storage", lora_dir=str(lora_dir))
    listed = api.client.get("/v1/models").json()["data"][0]["loras"]
    assert listed == [
        {"name": "fast", "recipe": {"steps": 2, "guidance_high": 1.0, "guidance_low": 1.0}},
        {"name": "style", "recipe": None},
    ]

    def settings_of(**fields):
        answer = api.client.post("/v1/videos", json={"prompt": "a", **fields})
        assert answer.status_code == 200, answer.text
        return json.loads(api.store.get(answer.json()["id"])["settings"])

    style = str(lora_dir / "style.safetensors")
    both = settings_of(loras=[{"name": "style", "scale": 0.5}])
    assert (both["lora_high"], both["lora_high_scale"], both["lora_low"], both["lora_low_scale"]) == (
        [style],
        [0.5],
        [style],
        [0.5],
    )
    low_only = settings_of(loras=[{"name": "style", "scale_high": 0, "scale_low": 2}])
    assert "lora_high" not in low_only and low_only["lora_low_scale"] == [2.0]
    recipe = settings_of(lora={"name": "fast"})  # vLLM-Omni's one object; the recipe applies
    assert (recipe["steps"], recipe["guidance_high"], recipe["lora_low"]) == (
        2,
        1.0,
        [str(lora_dir / "fast.safetensors")],
    )
    assert settings_of(lora={"name": "fast"}, num_inference_steps=3)["steps"] == 3  # the request's own wins
    assert settings_of(extra_params={"lora": {"name": "style"}})["lora_high"] == [style]
    for fields, words in (
        ({"loras": [{"name": "nope"}]}, "no LoRA named 'nope' is registered; registered: fast, style"),
        ({"loras": [{"name": "style", "path": "/etc/passwd"}]}, "the server opens no path a client sends"),
        ({"loras": [{"name": "style", "scale": -1}]}, "must be a number ≥ 0"),
        ({"loras": [{"name": "style"}] * 2}, "names 'style' twice"),
        ({"loras": [{"name": "style"}], "lora": {"name": "fast"}}, "give one of them"),
        ({"loras": "style"}, 'must be a list of {"name": …, "scale": …}'),
    ):
        error = _openai_error(api.client.post("/v1/videos", json={"prompt": "a", **fields}), 400)
        assert words in error["message"] and error["param"] in ("loras", "lora"), error
    # without lora_dir: no name is registered, and the answer says how to register some
    plain = Api(tmp_path / "plain")
    error = _openai_error(plain.client.post("/v1/videos", json={"prompt": "a", "loras": [{"name": "x"}]}), 400)
    assert "registered: none (start the server with lora_dir=FOLDER)" in error["message"]


def test_a_start_lora_stays_and_a_bad_registered_file_stops_the_start(lora_dir, tmp_path):
    fixed = str(lora_dir / "fast.safetensors")
    api = Api(tmp_path / "storage", [f"lora_low={fixed}", "lora_low_scale=0.7"], lora_dir=str(lora_dir))
    answer = api.client.post("/v1/videos", json={"prompt": "a", "loras": [{"name": "style"}]}).json()
    settings = json.loads(api.store.get(answer["id"])["settings"])
    assert settings["lora_low"] == [fixed, str(lora_dir / "style.safetensors")]
    assert settings["lora_low_scale"] == [0.7, 1.0]
    broken = tmp_path / "broken"
    broken.mkdir()
    path, words = bad_file(broken, "rank_mismatch")
    with pytest.raises(ConfigError) as refused:
        Api(tmp_path / "other", lora_dir=str(broken))
    assert f"lora_dir: {path.name}" in str(refused.value) and all(w in str(refused.value) for w in words)
    # a recipe that cannot run on the server's mesh: fast's guidance 1 leaves CFG parallel nothing to split
    with pytest.raises(ConfigError, match="lora_dir: fast.json: mesh=dp2 has dp=2 but one prompt"):
        Api(tmp_path / "cfg", ["mesh=dp2"], world=2, lora_dir=str(lora_dir))


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_a_lora_request_renders_the_clis_video_and_the_next_one_without_is_untouched(lora_dir, tmp_path):
    # ulysses 2: a CFG-parallel mesh (dp2, what mesh=auto picks) could not run fast's recipe
    # (guidance 1: no CFG halves to split) — the start would refuse it, naming fast.json
    # memory=sharded: each rank loads its rows of every weight again at a switch (FSDP)
    start = [*SETTINGS, "mesh=cp2", "memory=sharded", f"lora_dir={lora_dir}"]
    server = Server(tmp_path / "storage", start, ranks=2).wait_ready()
    try:
        request = {"prompt": "a fox in the snow", "seed": 4}
        before = server.post(**request)
        styled = server.post(**request, loras=[{"name": "style", "scale_high": 1.5, "scale_low": 0.5}])
        after = server.post(**request)
        for job in (before, styled, after):
            assert server.wait_for(job["id"], "completed", "failed")["status"] == "completed"
        plain, with_lora, again = (server.frames(j["id"]) for j in (before, styled, after))
        assert np.array_equal(again, plain)  # bit for bit: nothing of the LoRA stayed
        assert np.abs(with_lora.astype(int) - plain).max() > 20  # the LoRA mattered
        style = lora_dir / "style.safetensors"
        out = tmp_path / "cli"
        run_in_process(
            out,
            *SETTINGS,
            "prompt='a fox in the snow'",
            "seed=4",
            *expert_lora_words(style, 1.5, 0.5),
        )
        assert_same_frames(with_lora, np.load(out / "frames.npy"), "the LoRA request on 2 ranks against the CLI")
        switches = [line for line in server.text().splitlines() if "LoRAs now" in line]
        assert len(switches) == 2 and "none" in switches[1], switches  # to the LoRA, and back
        metrics = server.client.get("/metrics").text
        assert "parallel_wan_lora_switch_seconds_count 2.0" in metrics
    finally:
        server.stop()


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_loras_switch_under_memory_swap_with_int8_weights_as_the_cli_runs_them(lora_dir, tmp_path):
    """One process, memory=swap (the high-noise expert freed during each video) and quantize=int8
    (each LoRA merged before the weights are quantized): a LoRA request is the CLI's video with the
    same settings bit for bit, and the request without it after it is the first one's."""
    quantized = [*SETTINGS, "memory=swap", "quantize=int8"]
    server = Server(tmp_path / "storage", [*quantized, f"lora_dir={lora_dir}"]).wait_ready()
    try:
        request = {"prompt": "a fox in the snow", "seed": 4}
        jobs = [server.post(**request), server.post(**request, loras=[{"name": "style", "scale": 0.8}])]
        jobs.append(server.post(**request))
        for job in jobs:
            assert server.wait_for(job["id"], "completed", "failed")["status"] == "completed"
        plain, with_lora, again = (server.frames(j["id"]) for j in jobs)
    finally:
        server.stop()
    assert np.array_equal(again, plain) and np.abs(with_lora.astype(int) - plain).max() > 20
    style = lora_dir / "style.safetensors"
    run_in_process(
        tmp_path / "cli", *quantized, "prompt='a fox in the snow'", "seed=4", f"lora={style}", "lora_scale=0.8"
    )
    assert np.array_equal(with_lora, np.load(tmp_path / "cli" / "frames.npy"))
