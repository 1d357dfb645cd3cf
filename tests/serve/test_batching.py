"""Batching compatible requests (jobs/batch.py, serve/worker.py): queued jobs that differ only in
prompt, negative prompt and seed run through the denoiser together, up to max_batch= (the sizes
the mesh splits over dp, and the planner's fit). Each keeps its own seed and negative prompt and
equals the video it makes alone on the same mesh — bit for bit on CPU (float32 and bfloat16,
torch; JAX: bfloat16 bit for bit, float32 within 2e-6 relative — XLA:CPU's GEMMs sum a batch of
rows in another order than one row). A DELETE of one member stops the batch after
its step; the others' states are saved and they resume together. SIGTERM saves every member's
state; the restarted server resumes them together."""

import re
import signal

import numpy as np
import pytest
from harness.hold import EVERY, Hold
from harness.jax_runs import raw_config
from harness.serve import SETTINGS, Server, sidecar

from parallel_wan.jobs.batch import batch_key, batch_sizes, batched, member
from parallel_wan.jobs.batch_states import batch_state, member_states
from parallel_wan.run import validate_job
from parallel_wan.serve.store import Store

REQUESTS = [
    {"prompt": "a fox in the snow", "seed": 3},
    {"prompt": "a red kite over hills", "seed": 11, "negative_prompt": "blurry"},
    {"prompt": "waves at dusk", "seed": 7, "negative_prompt": "dark, grainy"},
    {"prompt": "a cat on a wall", "seed": 1},
]
# JAX on CPU, float32: |batched − alone| over max |alone| of the latents measured ≤ 1.4e-6 (cp8,
# ulysses8; 2026-11-28), frames within 1 level. bfloat16 on dp2_cp4 measured equal bit for bit.
JAX_REL = {"dtype=float32": 2e-6, "dtype=bfloat16": 0.0}
TINY = ["steps=3", "num_frames=9", "height=48", "width=48"]


def specs_of(settings: list, world: int = 1) -> list:
    specs = []
    for r in REQUESTS:
        words = [f"prompt='{r['prompt']}'", f"seed={r['seed']}"]
        if "negative_prompt" in r:
            words.append(f"negative_prompt='{r['negative_prompt']}'")
        job, ckpt = validate_job(raw_config([*settings, *words]), world)
        specs.append(job.base)
    return specs, ckpt


def test_only_prompt_negative_prompt_and_seed_may_differ_in_a_batch():
    specs, _ = specs_of(["dtype=float32", *TINY])
    assert len({batch_key(s) for s in specs}) == 1
    other_steps, _ = specs_of(["dtype=float32", "steps=4", "num_frames=9", "height=48", "width=48"])
    assert batch_key(other_steps[0]) != batch_key(specs[0])
    cached, _ = specs_of(["dtype=float32", "cache=fbcache", *TINY])
    assert batch_key(cached[0]) is None  # a step cache decides from the whole batch: it runs alone
    together = batched(specs)
    assert together.video.prompts == tuple(r["prompt"] for r in REQUESTS)
    assert [together.video.seed_of(i) for i in range(4)] == [3, 11, 7, 1]
    assert together.video.negative_prompts == (None, "blurry", "dark, grainy", None)

    class Dp2:
        dp = 2

    assert batch_sizes(Dp2, 5) == [4, 2, 1]  # dp splits a batch in equal shares; one prompt is CFG parallel


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_a_batch_is_no_larger_than_the_planner_fits_and_bad_batch_settings_are_one_line(tmp_path):
    from parallel_wan.config import ConfigError
    from parallel_wan.jobs.batch import largest_batch
    from parallel_wan.memory_plan.report import plan
    from parallel_wan.serve.settings import server_settings

    specs, ckpt = specs_of(["dtype=float32", *TINY])
    two, three, four = (plan(batched(specs[:1] * k)).peak for k in (2, 3, 4))
    assert two < three < four
    assert largest_batch(specs[0], ckpt, ((two + three) / 2, "test"), 4) == 2
    assert largest_batch(specs[0], ckpt, (four, "test"), 4) == 4
    assert largest_batch(specs[0], ckpt, (four, "test"), 3) == 3
    for key, value, words in (
        ("max_batch", "0", "max_batch='0' must be a whole number of jobs ≥ 1, e.g. max_batch=4"),
        ("max_batch", "two", "max_batch='two' must be a whole number"),
        ("batch_wait_s", "-1", "batch_wait_s='-1' must be a number of seconds ≥ 0, e.g. batch_wait_s=2"),
    ):
        with pytest.raises(ConfigError, match=re.escape(words)):
            server_settings(
                {"host": "127.0.0.1", "port": "0", "storage_dir": str(tmp_path), "max_body_mb": "32", key: value}
            )
    # the HTTP side files each request under its batch key (max_batch > 1 only)
    from test_api import Api

    for max_batch, same in (("4", True), ("1", None)):
        api = Api(tmp_path / f"storage{max_batch}", max_batch=max_batch)
        keys = []
        for fields in (REQUESTS[0], REQUESTS[1], {**REQUESTS[0], "num_inference_steps": 3}):
            answer = api.client.post("/v1/videos", json=fields)
            assert answer.status_code == 200, answer.text
            keys.append(api.store.row(answer.json()["id"])["batch_key"])
        assert (keys[0] == keys[1] != keys[2]) if same else keys == [None] * 3


@pytest.mark.parametrize(
    "settings",
    [
        ["backend=torch", "dtype=float32"],
        ["backend=torch", "dtype=bfloat16"],
        ["backend=jax", "dtype=float32", "mesh=cp8"],
        ["backend=jax", "dtype=bfloat16", "mesh=dp2_cp4"],
    ],
    ids=["torch-fp32", "torch-bf16", "jax-cp8-fp32", "jax-dp2cp4-bf16"],
)
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_each_member_of_a_batch_is_the_video_it_makes_alone(settings):
    """Four requests with their own seeds and negative prompts as one generation, against each
    alone on the same backend and mesh; then the batch stopped after step 1, split into the
    members' states and resumed in other groupings ([0, 1] together, 2 and 3 alone)."""
    import jax

    from parallel_wan.backends import make_backend
    from parallel_wan.pipeline import generate

    world = jax.device_count() if "backend=jax" in settings else 1
    specs, ckpt = specs_of([*settings, *TINY], world)
    backend = make_backend(specs[0])
    together = generate(batched(specs), backend, ckpt)
    stopped = generate(batched(specs), backend, ckpt, stop_after=1)
    states = member_states(stopped.state, batched(specs), backend)
    regrouped = [
        generate(batched(specs[:2]), backend, ckpt, start=batch_state(states[:2], batched(specs[:2]), backend))
    ]
    regrouped += [
        generate(specs[i], backend, ckpt, start=batch_state(states[i : i + 1], specs[i], backend)) for i in (2, 3)
    ]
    resumed = [member(regrouped[0], 0, 2), member(regrouped[0], 1, 2), regrouped[1], regrouped[2]]
    for i, spec in enumerate(specs):
        alone = generate(spec, backend, ckpt)
        mine = member(together, i, 4)
        assert mine.info["videos"] == alone.info["videos"] and mine.info["batch"] == {"size": 4, "index": i}
        err = np.abs(mine.latents - alone.latents).max() / np.abs(alone.latents).max()
        frames = np.abs(mine.videos[0].astype(int) - alone.videos[0]).max()
        print(f"member {i}: latents max rel {err:.1e}, frames max abs {frames}")
        if "backend=jax" in settings:  # XLA:CPU's GEMMs sum a 4-row batch in another order than 1 row
            assert err <= JAX_REL[settings[1]] and frames <= 1
        else:
            assert np.array_equal(mine.latents, alone.latents) and np.array_equal(mine.videos[0], alone.videos[0])
        # stopped, split, regrouped: the batch's video (torch: its bits)
        again = np.abs(resumed[i].latents - mine.latents).max() / np.abs(mine.latents).max()
        assert again <= (JAX_REL[settings[1]] if "backend=jax" in settings else 0.0)


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_a_two_rank_server_batches_parts_a_batch_for_a_delete_and_resumes_one_after_sigterm(tmp_path):
    """mesh=dp2 (one request: CFG parallel; a batch: the prompts split over dp), max_batch=4."""
    storage, start = tmp_path / "storage", [*SETTINGS, "mesh=dp2", "max_batch=4"]
    hold = Hold(tmp_path, step=2, released=EVERY)
    server = Server(storage, start, ranks=2, agent=False, env=hold.env()).wait_ready()
    try:
        blocker = {"prompt": "a blocker", "num_inference_steps": 5}  # other steps: never in the batch
        hold.hold_next()
        server.post(**blocker)
        hold.wait_held(processes=2, alive=server.alive, context=server.text)
        jobs = [server.post(**r) for r in REQUESTS]  # queued behind the blocker: one batch of 4
        hold.release()
        hold.wait_held(processes=2, arrival=hold.arrival + 1, alive=server.alive, context=server.text)
        assert [server.video(j["id"])["progress"] for j in jobs] == [50] * 4  # every member is at step 2 of 4
        assert server.client.delete(f"/v1/videos/{jobs[1]['id']}").status_code == 200
        hold.release_all()
        kept = [jobs[0], jobs[2], jobs[3]]
        for job in kept:
            assert server.wait_for(job["id"], "completed", "failed")["status"] == "completed"
        assert server.client.get(f"/v1/videos/{jobs[1]['id']}").status_code == 404
        assert re.search(rf"{jobs[1]['id']}: deleted: stopped after step 3 of 4", server.text())
        # held before step 2, stopped after it: the three go on from step 3, two together (dp2
        # splits 2, not 3), the last alone
        assert sidecar(server, jobs[2]["id"])["batch"] == {"size": 2, "index": 1}
        assert "batch" not in sidecar(server, jobs[3]["id"])
        assert [server.video(j["id"])["resumed_from_step"] for j in kept] == [3, 3, 3]

        hold.hold_next()
        server.post(**blocker)
        hold.wait_held(processes=2, alive=server.alive, context=server.text)
        cut = [server.post(**r) for r in REQUESTS[2:]]
        hold.release()
        hold.wait_held(processes=2, arrival=hold.arrival + 1, alive=server.alive, context=server.text)
        server.signal(signal.SIGTERM, rank=0)
        hold.wait_signal("SIGTERM", alive=server.alive, context=server.text)
        hold.release_all()
        assert server.wait_exit() == [75, 75], server.text()[-3000:]
    finally:
        server.stop()
    again = Server(storage, start, ranks=2, agent=False, port=server.port).wait_ready()
    try:
        for job in cut:
            assert again.wait_for(job["id"], "completed")["resumed_from_step"] == 3
        assert re.search(rf"{cut[0]['id']}, {cut[1]['id']}: resuming together from step 3 of 4", again.text())
        assert sidecar(again, cut[1]["id"])["batch"] == {"size": 2, "index": 1}
        # each alone, on the same mesh: the same frames, bit for bit
        for request, batched_jobs in zip(REQUESTS, ([jobs[0]], [], [jobs[2], cut[0]], [jobs[3], cut[1]])):
            if not batched_jobs:
                continue
            alone = again.post(**request)
            again.wait_for(alone["id"], "completed")
            assert "batch" not in sidecar(again, alone["id"])
            for job in batched_jobs:
                assert np.array_equal(again.frames(job["id"]), again.frames(alone["id"])), request
        metrics = again.client.get("/metrics").text
        assert "parallel_wan_batch_size_count 4.0" in metrics and "parallel_wan_batch_size_sum 5.0" in metrics
    finally:
        again.stop()


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_a_job_waits_for_its_batch_no_longer_than_batch_wait_s(tmp_path):
    """A job that starts alone waits up to batch_wait_s for others to join: the one posted right
    after it joins; a SIGTERM while a lone job waits stops the server at once (exit 75) and sends
    the job back to the queue; with batch_wait_s=2 it then runs alone once the wait is over."""
    storage = tmp_path / "storage"
    server = Server(storage, [*SETTINGS, "max_batch=2", "batch_wait_s=600"], agent=False).wait_ready()
    try:
        first, second = (server.post(**r) for r in REQUESTS[:2])
        for job in (first, second):
            assert server.wait_for(job["id"], "completed", "failed")["status"] == "completed"
        lone = server.post(**REQUESTS[2])
        server.wait_for(lone["id"], "in_progress")  # claimed, waiting for a second
        server.signal(signal.SIGTERM)
        assert server.wait_exit(timeout=60) == [75], server.text()[-3000:]
    finally:
        server.stop()
    assert [sidecar(server, j["id"])["batch"] for j in (first, second)] == [{"size": 2, "index": i} for i in (0, 1)]
    assert Store(str(storage / "queue.sqlite3")).row(lone["id"])["status"] == "queued"  # back where it stood
    again = Server(storage, [*SETTINGS, "max_batch=2", "batch_wait_s=2"], port=server.port).wait_ready()
    try:
        assert again.wait_for(lone["id"], "completed", "failed")["status"] == "completed"
        assert "batch" not in sidecar(again, lone["id"])
    finally:
        again.stop()
