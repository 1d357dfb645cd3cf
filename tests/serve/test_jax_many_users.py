"""A JAX server for many users (issue 41 on backend=jax, 8 CPU devices): its queue in PostgreSQL
(queue_url=, a throwaway cluster: harness/postgres.py), LoRAs chosen per request (lora_dir=), a
bounded queue (max_queued=) and retention (keep_hours=). A request with a LoRA renders the
command line's video with that LoRA (torch, one process: within a level), the same request
without a LoRA before and after it is the same video bit for bit, a third waiting request is 429,
and a finished video is gone after keep_hours."""

import json
import time

import numpy as np
import pytest
from harness.cli import run_in_process
from harness.frames import assert_same_frames
from harness.hold import Hold
from harness.lora_files import expert_lora_words, lora_pairs, write_lora
from harness.postgres import running
from harness.serve import SETTINGS, Server

from parallel_wan.builtin.tiny import transformer_config
from parallel_wan.serve.store import Store


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_a_jax_server_switches_loras_per_request_on_a_postgresql_queue_bounded_and_expiring(tmp_path):
    loras = tmp_path / "loras"
    loras.mkdir()
    write_lora(loras / "style.safetensors", lora_pairs(transformer_config("t2v"), rank=8, seed=2), "peft", alpha=4.0)
    hold = Hold(tmp_path, step=2)  # the first job holds before its step 2 while the queue fills
    with running() as cluster:
        storage = tmp_path / "storage"
        start = [
            *SETTINGS,
            "backend=jax",
            "mesh=cp8",
            f"queue_url={cluster.url}",
            f"lora_dir={loras}",
            "max_queued=2",
            "keep_hours=0.001",  # 3.6 s: expires_at = completed_at + 4
        ]
        server = Server(storage, start, env=hold.env()).wait_ready(timeout=600)
        try:
            request = {"prompt": "a fox in the snow", "seed": 4}
            before = server.post(**request)
            hold.wait_held(alive=server.alive, context=server.text)
            styled = server.post(**request, loras=[{"name": "style", "scale_high": 1.5, "scale_low": 0.5}])
            after = server.post(**request)
            full = server.client.post("/v1/videos", json={"prompt": "one too many"})
            assert (full.status_code, full.json()["error"]["code"]) == (429, "queue_full"), full.text
            hold.release_all()
            frames, records = [], []
            for job in (before, styled, after):  # each read as it completes: it expires 4 s later
                assert server.wait_for(job["id"], "completed", "failed", timeout=600)["status"] == "completed"
                frames.append(server.frames(job["id"]))
                records.append(json.loads((storage / "videos" / f"{job['id']}.json").read_text()))
            plain, with_lora, again = frames
            metrics = server.client.get("/metrics").text
            # retention: the first video is gone for clients once past its expires_at, its files removed
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and server.client.get(f"/v1/videos/{before['id']}").status_code == 200:
                time.sleep(0.1)
            assert server.client.get(f"/v1/videos/{before['id']}").status_code == 404
            while time.monotonic() < deadline and list((storage / "videos").glob(f"{before['id']}*")):
                time.sleep(0.1)
            assert not list((storage / "videos").glob(f"{before['id']}*"))
            rows = [Store(cluster.url).row(job["id"]) for job in (before, styled, after)]
        finally:
            hold.release_all()
            server.stop()
    assert not (storage / "queue.sqlite3").exists() and all(rows)  # the queue is PostgreSQL's
    assert np.array_equal(again, plain)  # bit for bit: nothing of the LoRA stayed
    assert np.abs(with_lora.astype(int) - plain).max() > 20  # the LoRA mattered
    assert "parallel_wan_lora_switch_seconds_count 2.0" in metrics  # to the LoRA, and back
    assert 'parallel_wan_requests_total{answer="queue_full"} 1.0' in metrics
    style = loras / "style.safetensors"
    run_in_process(
        tmp_path / "cli",
        *SETTINGS,
        "backend=torch",
        "prompt='a fox in the snow'",
        "seed=4",
        *expert_lora_words(style, 1.5, 0.5),
    )
    assert_same_frames(with_lora, np.load(tmp_path / "cli" / "frames.npy"), "the JAX server's LoRA request vs the CLI")
    assert records[1]["lora"] and "lora" not in records[2]  # the sidecars record it
