"""Issue 16: prompt files (one load, many videos), re-runs that resume, and preemption — in one
process (torch) and on 8 JAX CPU devices. The 4-rank torchrun runs are in test_jobs_torchrun.py.

Every comparison here is exact: the same process, mesh and programs must give the same bits
whether an entry ran alone, in a job, or stopped and resumed."""

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
from harness.images import write_png

from parallel_wan.backends import make_backend
from parallel_wan.config import ConfigError
from parallel_wan.jobs import PREEMPTED_EXIT, Preempted, run_job
from parallel_wan.jobs.share import array_share, share_of
from parallel_wan.run import CONF_DIR, compose_settings, run, validate_job

REPO = os.path.dirname(CONF_DIR)


# A small video for the tests whose subject is the loop's stop and resume, not the picture:
# 64×64×5 keeps both experts and every step, at a third of the tiny preset's 128×128×17 work.
SMALL = ["num_frames=5", "height=64", "width=64"]


def job_of(*overrides, world=1, env=None):
    return validate_job(compose_settings(list(overrides)), world, env=env or {})


def write_lines(path, *lines):
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


# ------------------------------------------------------------------ reading and checking the file


def test_plain_text_and_json_lines_entries_names_and_defaults(tmp_path):
    write_png(tmp_path / "first.png", 64, 64)
    prompts = write_lines(
        tmp_path / "p.txt",
        "a red fox in snow",
        "",
        "# a comment",
        {"prompt": "a boat", "seed": 7, "image": "first.png", "name": "boat"},
        {"prompt": "a kite", "height": 96, "width": 64, "steps": 3, "negative_prompt": "blur"},
    )
    job, ckpt = job_of(f"prompts={prompts}", "model=tiny_ti2v", f"output_dir={tmp_path / 'out'}")
    assert ckpt is None and job.total == 3 and not job.single
    first, boat, kite = job.entries
    assert first.line == 1 and first.name == f"0001-{first.key[:8]}" and first.spec.video.prompt == "a red fox in snow"
    assert (boat.line, boat.name, boat.spec.video.seed, boat.spec.video.image) == (
        4,
        "boat",
        7,
        str(tmp_path / "first.png"),
    )
    assert (
        kite.spec.video.height,
        kite.spec.video.width,
        kite.spec.sampling.steps,
        kite.spec.video.negative_prompt,
    ) == (96, 64, 3, "blur")
    assert len({first.key, boat.key, kite.key}) == 3
    # a first-last-frame entry (I2V): its last frame relative to the file too
    flf = write_lines(tmp_path / "flf.jsonl", {"prompt": "a bridge", "image": "first.png", "last_image": "first.png"})
    (entry,) = job_of(f"prompts={flf}", "model=tiny_i2v", f"output_dir={tmp_path / 'flf'}")[0].entries
    assert entry.spec.video.last_image == str(tmp_path / "first.png") and entry.key != boat.key
    # One mesh for the job (the first entry's), every entry writes into the one output folder.
    assert {e.spec.mesh for e in job.entries} == {first.spec.mesh}
    assert {e.spec.output.dir for e in job.entries} == {str(tmp_path / "out")}


def test_default_output_folder_is_named_after_the_file_so_a_rerun_finds_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    prompts = write_lines(tmp_path / "cats.jsonl", {"prompt": "a cat"})
    job, _ = job_of(f"prompts={prompts}")
    assert job.output_dir == str(tmp_path / "outputs" / "cats")


def test_a_setting_change_makes_new_names_not_overwrites(tmp_path):
    prompts = write_lines(tmp_path / "p.txt", "a fox")
    a = job_of(f"prompts={prompts}", f"output_dir={tmp_path}")[0].entries[0]
    b = job_of(f"prompts={prompts}", f"output_dir={tmp_path}", "steps=12")[0].entries[0]
    c = job_of(f"prompts={prompts}", f"output_dir={tmp_path}", "mesh=single")[0].entries[0]
    assert a.name != b.name and a.name == c.name  # the mesh decides how, not what


BAD_FILES = {
    "empty": ("", "holds no prompt"),
    "comments only": ("# nothing\n\n", "holds no prompt"),
    "bad JSON on line 2": ('a fox\n{"prompt": "a cat", seed: 3}\n', "line 2: not valid JSON"),
    "unknown key": ('{"prompt": "a cat", "sampler": "euler"}\n', "line 1: 'sampler' is not an entry key"),
    "bad seed": ('a fox\na dog\n{"prompt": "a cat", "seed": -4}\n', "line 3: seed=-4 must be between 0"),
    "seed not a number": ('{"prompt": "a cat", "seed": "x"}\n', "line 1: seed='x' is not a whole number"),
    "NaN guidance": ('{"prompt": "a cat", "guidance_high": NaN}\n', "line 1: NaN is not a number JSON allows"),
    "bad frames": ('a fox\n{"prompt": "a cat", "num_frames": 8}\n', "line 2: num_frames=8 must be 4k+1"),
    "missing image": ('{"prompt": "a cat", "image": "nowhere.png"}\n', "line 1: image="),
    "a last frame on TI2V": ('{"prompt": "a cat", "last_image": "x.png"}\n', "x.png was given but model=tiny_ti2v"),
    "not an object": ('["a cat"]\n', "line 1: a JSON line must be an object"),
    "list line": ('{"prompt": ["a", "b"]}\n', 'line 1: "prompt" must be a non-empty string'),
    "duplicate names": (
        '{"prompt": "a", "name": "x"}\n{"prompt": "b", "name": "x"}\n',
        "line 2: name 'x' is also the name of line 1",
    ),
    "name with a slash": ('{"prompt": "a", "name": "../x"}\n', "line 1: name='../x' must be"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_prompt_files_name_the_line_before_anything_loads(tmp_path, case):
    text, expected = BAD_FILES[case]
    prompts = tmp_path / "p.txt"
    prompts.write_text(text)
    with pytest.raises(ConfigError) as err:
        job_of(f"prompts={prompts}", "model=tiny_ti2v", f"output_dir={tmp_path / 'out'}")
    message = str(err.value)
    assert expected in message and f"prompts={prompts}" in message and "\n" not in message, message
    assert not (tmp_path / "out").exists()


def test_a_bad_line_on_the_command_line_exits_2_with_one_line_and_no_outputs(tmp_path):
    prompts = tmp_path / "p.txt"
    prompts.write_text('a fox\n{"prompt": "a cat", "seed": 3,}\n')
    proc = subprocess.run(
        [sys.executable, "-m", "parallel_wan.run", f"prompts={prompts}", f"output_dir={tmp_path / 'o'}"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        env={**os.environ, "PYTHONPATH": REPO},
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"parallel_wan: error: prompts={prompts} line 2: not valid JSON")
    assert sorted(os.listdir(tmp_path)) == ["p.txt"]


def test_array_tasks_take_contiguous_shares():
    assert array_share({}) is None
    assert array_share({"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "3"}) == (
        2,
        4,
    )
    entries = list(range(10))
    shares = [share_of(entries, (i, 4)) for i in range(4)]
    assert shares == [[0, 1], [2, 3, 4], [5, 6], [7, 8, 9]]
    assert share_of(entries[:1], (0, 2)) == [] and share_of(entries[:1], (1, 2)) == [0]  # more tasks than entries
    for env, fragment in (
        ({"SLURM_ARRAY_TASK_ID": "x", "SLURM_ARRAY_TASK_COUNT": "2"}, "not a whole number"),
        ({"SLURM_ARRAY_TASK_ID": "6", "SLURM_ARRAY_TASK_COUNT": "4"}, "contiguous range"),
    ):
        with pytest.raises(ConfigError, match=fragment):
            array_share(env)


def test_an_array_task_plans_only_its_share_but_checks_every_line(tmp_path):
    prompts = write_lines(tmp_path / "p.txt", "a", "b", "c", "d", "e")
    env = {"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "2"}
    job, _ = job_of(f"prompts={prompts}", f"output_dir={tmp_path}", env=env)
    assert [e.line for e in job.entries] == [3, 4, 5] and job.share == (1, 2) and job.total == 5
    write_lines(prompts, "a", "b", "c", "d", {"prompt": "e", "bogus": 1})
    with pytest.raises(ConfigError, match="line 5"):
        job_of(f"prompts={prompts}", f"output_dir={tmp_path}", env={**env, "SLURM_ARRAY_TASK_ID": "0"})


# ------------------------------------------------------------------ one process, torch


class SignalAtVote:
    """Sends this process a real SIGTERM when the preemption vote is asked for the `at`-th time
    (after step `at` of the first generation), as SLURM or torchrun would mid-denoise."""

    def __init__(self, backend, at: int, signum=signal.SIGTERM):
        self.backend, self.at, self.signum, self.votes = backend, at, signum, 0
        self.vote = backend.any_rank
        backend.any_rank = self

    def __call__(self, flag):
        self.votes += 1
        if self.votes == self.at:
            os.kill(os.getpid(), self.signum)
            flag = True  # the handler has run by now; the runner read its flag just before
        return self.vote(flag)


def frames(out, name):
    return np.load(out / f"{name}.frames.npy")


@pytest.fixture(scope="module")
def ti2v_job(tmp_path_factory):
    """A 3-entry TI2V job: two shapes, one entry with an image, written once."""
    folder = tmp_path_factory.mktemp("ti2v_job")
    write_png(folder / "first.png", 64, 64)
    prompts = write_lines(
        folder / "p.jsonl",
        {"prompt": "a fox", "seed": 1, "num_frames": 5, "height": 64, "width": 64},
        {
            "prompt": "a boat",
            "seed": 2,
            "image": "first.png",
            "num_frames": 5,
            "height": 64,
            "width": 64,
            "name": "boat",
        },
        {"prompt": "a kite", "seed": 3, "num_frames": 9, "height": 96, "width": 64, "steps": 4},
    )
    overrides = [f"prompts={prompts}", "model=tiny_ti2v", "save_frames=true", "steps=3", "backend=torch"]
    return folder, overrides


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_a_job_loads_once_and_each_video_equals_its_single_run(ti2v_job, monkeypatch):
    from parallel_wan.jobs import runner
    from parallel_wan.pipeline import checkpoint

    folder, overrides = ti2v_job
    out = folder / "out"
    job, ckpt = job_of(*overrides, f"output_dir={out}")
    loads = []
    real_load = checkpoint.load
    monkeypatch.setattr(runner, "load", lambda *a, **k: loads.append(1) or real_load(*a, **k))
    report = run_job(job, ckpt)
    assert len(loads) == 1 and report.made == [e.name for e in job.entries] and not report.skipped
    names = [e.name for e in job.entries]
    assert sorted(os.listdir(out)) == sorted(
        ["job.json"] + [f"{n}{s}" for n in names for s in (".mp4", ".json", ".frames.npy")]
    )
    for entry in job.entries:
        single = run(entry.spec.replace(output_dir=str(folder / f"single_{entry.name}")))
        ref = np.load(folder / f"single_{entry.name}" / "frames.npy")
        ours = frames(out, entry.name)
        assert ours.shape == ref.shape and np.array_equal(ours, ref), entry.name
        sidecar = json.loads((out / f"{entry.name}.json").read_text())
        assert sidecar["job"]["line"] == entry.line and sidecar["job"]["result_key"] == entry.key
        assert (
            sidecar["frames_sha256"]
            == json.loads((folder / f"single_{entry.name}" / "video.json").read_text())["frames_sha256"]
        )
        assert single["video"].endswith("video.mp4")
    assert frames(out, "boat").shape == (5, 64, 64, 3) and frames(out, job.entries[2].name).shape == (9, 96, 64, 3)


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_an_i2v_job_takes_each_entrys_image_and_equals_its_single_runs(tmp_path):
    write_png(tmp_path / "a.png", 64, 64)
    write_png(tmp_path / "b.png", 96, 48)
    prompts = write_lines(
        tmp_path / "p.jsonl",
        {"prompt": "a fox", "image": "a.png", "num_frames": 5, "height": 64, "width": 64},
        {"prompt": "a boat", "image": str(tmp_path / "b.png"), "num_frames": 9, "height": 48, "width": 96, "seed": 4},
    )
    job, ckpt = job_of(
        f"prompts={prompts}",
        "model=tiny_i2v",
        "steps=2",
        "save_frames=true",
        f"output_dir={tmp_path / 'job'}",
        "backend=torch",
    )
    assert run_job(job, ckpt).made == [e.name for e in job.entries]
    for entry in job.entries:
        run_job(
            *validate_job(
                compose_settings(
                    [
                        "model=tiny_i2v",
                        "steps=2",
                        "save_frames=true",
                        "backend=torch",
                        f"output_dir={tmp_path / entry.name}",
                        f"image={entry.spec.video.image}",
                        f"prompt='{entry.spec.video.prompt}'",
                        f"seed={entry.spec.video.seed}",
                        f"num_frames={entry.spec.video.num_frames}",
                        f"height={entry.spec.video.height}",
                        f"width={entry.spec.video.width}",
                    ]
                ),
                1,
            )
        )
        assert np.array_equal(frames(tmp_path / "job", entry.name), np.load(tmp_path / entry.name / "frames.npy"))
    images = [json.loads((tmp_path / "job" / f"{e.name}.json").read_text())["image"] for e in job.entries]
    assert images[0] != images[1]


def test_rerun_skips_verified_entries_and_redoes_a_damaged_one(ti2v_job, monkeypatch, caplog):
    from parallel_wan.jobs import runner

    folder, overrides = ti2v_job
    out = folder / "out"
    job, ckpt = job_of(*overrides, f"output_dir={out}")
    if not (out / "boat.json").exists():
        run_job(job, ckpt)
    before = frames(out, "boat")
    monkeypatch.setattr(runner, "load", lambda *a, **k: pytest.fail("a finished job loaded the model"))
    with caplog.at_level("INFO", logger="parallel_wan"):
        report = run_job(job, ckpt)
    assert report.made == [] and len(report.skipped) == 3 and "job complete" in caplog.text
    monkeypatch.undo()
    # A damaged video (one byte changed) and a half-written one (the sidecar never came) are made again.
    video = bytearray((out / "boat.mp4").read_bytes())
    video[len(video) // 2] ^= 0xFF
    (out / "boat.mp4").write_bytes(bytes(video))
    (out / f"{job.entries[2].name}.json").unlink()
    report = run_job(job, ckpt)
    assert report.made == ["boat", job.entries[2].name] and report.skipped == [job.entries[0].name]
    assert np.array_equal(frames(out, "boat"), before)


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_a_swap_job_loads_the_experts_again_between_videos_keeping_its_texts(tmp_path, monkeypatch):
    """memory=swap frees the high-noise expert during each video: the experts — and only they —
    load again before the next (jobs/one_entry.py reload_experts, the server's reload too), and
    the texts encoded once up front go on to the next video with the released encoder."""
    from parallel_wan.jobs import runner
    from parallel_wan.pipeline.text_sources import EncodedUpFront

    prompts = write_lines(tmp_path / "p.jsonl", {"prompt": "a fox"}, {"prompt": "a boat", "seed": 3})
    overrides = [f"prompts={prompts}", "model=tiny", "memory=swap", "steps=2", *SMALL, "backend=torch"]
    job, ckpt = job_of(*overrides, f"output_dir={tmp_path / 'out'}")
    reloads, real = [], runner.reload_experts

    def reload_experts(spec, backend, ckpt, loaded):
        fresh = real(spec, backend, ckpt, loaded)
        reloads.append((loaded, fresh))
        return fresh

    monkeypatch.setattr(runner, "reload_experts", reload_experts)
    assert run_job(job, ckpt).made == [e.name for e in job.entries]
    [(before, after)] = reloads
    assert after is not before and after.experts is not before.experts
    assert isinstance(after.texts, EncodedUpFront) and after.texts is before.texts
    assert after.text_encoder is before.text_encoder and after.text_encoder.model is None  # released, not reloaded
    assert after.vae_params is before.vae_params  # only the experts load again: not the VAE, not the text encoder


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_preempted_mid_denoise_saves_exits_75_and_resumes_to_the_same_frames(tmp_path, monkeypatch):
    prompts = write_lines(tmp_path / "p.txt", {"prompt": "a fox", "name": "fox"}, {"prompt": "a dog", "seed": 5})
    args = [f"prompts={prompts}", "save_frames=true", "steps=8", "backend=torch", *SMALL]
    full, ckpt = job_of(*args, f"output_dir={tmp_path / 'full'}")
    run_job(full, ckpt)

    out = tmp_path / "cut"
    marker = tmp_path / "marker.json"
    monkeypatch.setenv("PARALLEL_WAN_PREEMPTED_FILE", str(marker))
    job, ckpt = job_of(*args, f"output_dir={out}")
    backend = make_backend(job.base)
    SignalAtVote(backend, at=4)  # vote 1 is before the entry, vote k+1 after its step k: stops after step 3
    with pytest.raises(Preempted, match=r"preempted \(SIGTERM\): stopped after step 3 of 8 of fox"):
        run_job(job, ckpt, backend=backend)
    state = out / ".parallel_wan" / "resume" / "fox"
    assert sorted(os.listdir(state)) == ["state.rank0.json", "state.rank0.safetensors"]
    assert json.loads(marker.read_text())["exit_code"] == PREEMPTED_EXIT == 75
    assert not (out / "fox.mp4").exists()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the handler is gone with the run

    report = run_job(*job_of(*args, f"output_dir={out}"))
    assert report.resumed == {"fox": 3} and len(report.made) == 2
    for entry in job.entries:
        assert np.array_equal(frames(out, entry.name), frames(tmp_path / "full", entry.name)), entry.name
    assert json.loads((out / "fox.json").read_text())["resumed_from_step"] == 3
    assert "resumed_from_step" not in json.loads((out / f"{job.entries[1].name}.json").read_text())
    assert not state.exists()
    report = run_job(*job_of(*args, f"output_dir={out}"))
    assert report.made == [] and len(report.skipped) == 2


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_a_signal_between_entries_stops_before_the_next_with_nothing_to_save(tmp_path, monkeypatch):
    marker = tmp_path / "marker.json"
    monkeypatch.setenv(
        "PARALLEL_WAN_PREEMPTED_FILE", str(marker)
    )  # written on this path too (torchrun's agent exits 1)
    prompts = write_lines(tmp_path / "p.txt", "a fox", "a dog")
    job, ckpt = job_of(f"prompts={prompts}", "steps=2", f"output_dir={tmp_path}", "backend=torch")
    backend = make_backend(job.base)
    SignalAtVote(backend, at=3, signum=signal.SIGUSR1)  # votes: entry 1, its step 1, entry 2 → stop
    with pytest.raises(Preempted, match=r"SIGUSR1.*before 0002-"):
        run_job(job, ckpt, backend=backend)
    assert (tmp_path / f"{job.entries[0].name}.mp4").exists() and not (tmp_path / ".parallel_wan").exists()
    assert json.loads(marker.read_text())["entry"] == job.entries[1].name


def test_a_saved_state_from_other_settings_is_refused_never_used(tmp_path):
    prompts = write_lines(tmp_path / "p.txt", {"prompt": "a fox", "name": "fox"})
    args = [f"prompts={prompts}", "steps=6", f"output_dir={tmp_path}", "backend=torch", *SMALL]
    job, ckpt = job_of(*args)
    backend = make_backend(job.base)
    SignalAtVote(backend, at=3)
    with pytest.raises(Preempted):
        run_job(job, ckpt, backend=backend)
    for change, what in (
        ("steps=7", "steps: 6 → 7"),
        ("shift=3.0", "shift: 12.0 → 3.0"),
        ("mesh=cp2", None),
        ("dtype=float32", "dtype"),
    ):
        with pytest.raises(ConfigError) as err:
            job_of(*args, change, world=2 if change == "mesh=cp2" else 1)
        message = str(err.value)
        assert ".parallel_wan/resume/fox" in message and "delete" in message, message
        if what:
            assert "saved under other settings" in message and what in message, message
    # The single run's state (no prompt file) is checked the same way.
    assert job_of(*args)[0].entries[0].name == "fox"


@pytest.mark.parametrize("cache", ["none", "taylorseer"])
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_a_single_run_preempted_resumes_with_the_same_output_dir(tmp_path, cache):
    # A step cache's state (TaylorSeer's factors, its skip log) travels in the saved state too.
    args = ["steps=6", f"output_dir={tmp_path / 'cut'}", "save_frames=true", "backend=torch", f"cache={cache}", *SMALL]
    job, ckpt = job_of(*args)
    backend = make_backend(job.base)
    SignalAtVote(backend, at=3)
    with pytest.raises(Preempted, match="after step 2 of 6 of video"):
        run_job(job, ckpt, backend=backend)
    report = run_job(*job_of(*args))
    assert report.resumed == {"video": 2}
    run_job(
        *validate_job(
            compose_settings(
                ["steps=6", f"output_dir={tmp_path / 'full'}", "save_frames=true", f"cache={cache}", *SMALL]
            ),
            1,
        )
    )
    assert np.array_equal(np.load(tmp_path / "cut" / "frames.npy"), np.load(tmp_path / "full" / "frames.npy"))
    cut, full = (json.loads((tmp_path / d / "video.json").read_text()) for d in ("cut", "full"))
    assert cut["resumed_from_step"] == 2 and cut.get("cache") == full.get("cache")


def test_a_single_run_without_output_dir_names_its_folder_to_resume(tmp_path, monkeypatch):
    """Without output_dir= a run makes a folder of its own, and the same command would make a new
    one and start over (issue 22 item 5): the message names the folder to pass back, and passing
    it resumes. A stop before anything was saved leaves no folder behind."""
    monkeypatch.chdir(tmp_path)
    args = ["steps=4", "num_frames=1", "height=32", "width=32", "backend=torch"]
    job, ckpt = job_of(*args)
    backend = make_backend(job.base)
    SignalAtVote(backend, at=3)
    with pytest.raises(Preempted) as stop:
        run_job(job, ckpt, backend=backend)
    (folder,) = (tmp_path / "outputs").iterdir()
    assert f"run it again with output_dir={folder} to resume" in str(stop.value), str(stop.value)
    assert "run the same command again" not in str(stop.value)
    report = run_job(*job_of(*args, f"output_dir={folder}"))
    assert report.resumed == {"video": 2} and (folder / "video.mp4").is_file()

    job, ckpt = job_of(*args)
    backend = make_backend(job.base)
    SignalAtVote(backend, at=1)  # the vote before the entry: nothing to save
    with pytest.raises(Preempted, match=r"nothing to save\); run the same command again to start it"):
        run_job(job, ckpt, backend=backend)
    assert list((tmp_path / "outputs").iterdir()) == [folder]  # its empty folder was removed


def test_reruns_keep_every_runs_record_and_a_changed_named_entry_names_what_changed(tmp_path, caplog):
    """Issue 22 items 8 and 12: job.json keeps each run's record (a re-run that only skips wrote
    `made: []` over the first run's); a named entry whose settings changed is refused naming each
    setting as `key: old → new` and the two ways out (before: truncated JSON); the log names the
    built-in model (not "diffusers checkpoint") and the memory mode; prompts= a folder says so."""
    prompts = write_lines(tmp_path / "p.txt", {"prompt": "a fox", "name": "fox"}, "a dog")
    args = [
        f"prompts={prompts}",
        f"output_dir={tmp_path / 'out'}",
        "steps=2",
        "num_frames=1",
        "height=32",
        "width=32",
        "backend=torch",
    ]
    with caplog.at_level("INFO", logger="parallel_wan"):
        first = run_job(*job_of(*args))
    assert "loaded the built-in tiny model (random weights)" in caplog.text and "one load for 2 entries" in caplog.text
    assert "memory=resident" in caplog.text and "diffusers checkpoint" not in caplog.text
    second = run_job(*job_of(*args))
    assert second.made == [] and len(second.skipped) == 2
    record = json.loads((tmp_path / "out" / "job.json").read_text())
    assert [run["made"] for run in record["runs"]] == [first.made, []], record
    assert [run["skipped"] for run in record["runs"]] == [[], second.skipped]
    assert record["made"] == [] and all(run["started"] <= run["finished"] for run in record["runs"])

    with pytest.raises(ConfigError) as err:
        job_of(*args, "cache=taylorseer", "guidance_high=3.5")
    message = str(err.value)
    assert "\n" not in message and '{"' not in message, message
    for words in (
        'cache.kind: "none" → "taylorseer"',
        "guidance_high: 4.0 → 3.5",
        f"prompts={prompts} line 1",
        'give this entry another "name"',
        "another output_dir",
        "delete fox.mp4 and fox.json",
    ):
        assert words in message, message

    (tmp_path / "folder").mkdir()
    with pytest.raises(ConfigError, match=r"prompts=\S+folder is a folder, not a file"):
        job_of(f"prompts={tmp_path / 'folder'}")


# ------------------------------------------------------------------ JAX, 8 CPU devices


@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_jax_job_compiles_each_shape_once_and_resumes_bit_for_bit(tmp_path):
    import jax

    from parallel_wan.backends.jax.compile_log import CompileLog

    if jax.device_count() < 8:
        pytest.fail("JAX needs 8 host devices (tests/conftest.py sets XLA_FLAGS)")
    jax.clear_caches()
    prompts = write_lines(
        tmp_path / "p.txt",
        {"prompt": "a fox", "num_frames": 5, "name": "fox"},
        {"prompt": "a dog", "num_frames": 9, "height": 48, "width": 80},
        {"prompt": "a cat", "num_frames": 5, "seed": 9},
    )
    args = [f"prompts={prompts}", "backend=jax", "mesh=dp2_cp4", "save_frames=true", "steps=3"]
    full, ckpt = job_of(*args, f"output_dir={tmp_path / 'full'}", world=8)
    with CompileLog() as log:
        run_job(full, ckpt)
    steps = [fn for fn, _ in log.events if "noise_prediction_step" in fn]
    assert len(steps) == 2, log.events  # one step program per shape: the third entry reuses the first's

    job, ckpt = job_of(*args, f"output_dir={tmp_path / 'cut'}", world=8)
    backend = make_backend(job.base)
    SignalAtVote(backend, at=3)  # stops "fox" after step 2; dog and cat not begun
    with pytest.raises(Preempted, match="after step 2 of 3 of fox"):
        run_job(job, ckpt, backend=backend)
    assert sorted(os.listdir(tmp_path / "cut" / ".parallel_wan" / "resume" / "fox")) == [
        "state.rank0.json",
        "state.rank0.safetensors",
    ]  # one controller saves the global arrays
    report = run_job(*job_of(*args, f"output_dir={tmp_path / 'cut'}", world=8))
    assert report.resumed == {"fox": 2} and len(report.made) == 3
    for entry in job.entries:
        assert np.array_equal(frames(tmp_path / "cut", entry.name), frames(tmp_path / "full", entry.name)), entry.name


def test_the_vote_under_nccl_goes_over_a_gloo_group_on_the_host(monkeypatch):
    """On GPUs the default group is NCCL, which takes CUDA tensors only: the per-step preemption
    vote must use a gloo group made once (at the first vote, which every rank reaches at the same
    step) and a CPU tensor — never a device tensor, so asking costs no GPU sync."""
    import torch
    import torch.distributed as dist

    from parallel_wan.backends.torch.backend import TorchBackend
    from parallel_wan.backends.torch.collectives import CountingCollectives, NullCollectives, ProcessGroupCollectives
    from parallel_wan.backends.torch.mesh import TorchMesh
    from parallel_wan.parallel.mesh import MeshSpec

    # The backend's vote goes through the mesh's Collectives (so counting and fake-GPU collectives see it).
    counted = CountingCollectives(NullCollectives(rank=0, world=2))
    backend = TorchBackend(torch.device("cpu"), TorchMesh.build(MeshSpec(name="cp2", cp=2, ulysses=2), counted))
    assert backend.any_rank(True) and not backend.any_rank(False)
    assert counted.calls["vote"] == 2 and counted.by_call["vote"] == 8

    calls = []
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 4)
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "nccl")
    monkeypatch.setattr(dist, "new_group", lambda **kw: calls.append(("new_group", kw)) or "gloo-group")

    def all_reduce(tensor, op=None, group=None):
        calls.append(("all_reduce", tensor.device.type, tensor.dtype, op, group))
        tensor.fill_(1 if len(calls) > 3 else int(tensor.item()))  # another rank saw a signal at the 3rd vote

    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    comm = ProcessGroupCollectives()
    assert [comm.vote(False), comm.vote(True), comm.vote(False)] == [False, True, True]
    assert calls[0] == ("new_group", {"backend": "gloo"}) and sum(c[0] == "new_group" for c in calls) == 1
    assert all(c[1:] == ("cpu", torch.int32, dist.ReduceOp.MAX, "gloo-group") for c in calls[1:])


def test_result_keys_are_the_same_as_before_the_settings_had_sections():
    """Default entry names and the skip check hash the settings under their command-line names
    (RunSpec.to_dict). Issue 23 gave RunSpec sections; this key was computed by the flat RunSpec
    (commit 5586f3c) for the same settings, so outputs made before are still found. A new setting
    changes every key (and every default name): then update this value on purpose."""
    from parallel_wan.jobs.keys import result_key

    job, _ = validate_job(
        compose_settings(["output_dir=/tmp/kk", "seed=5", "steps=7", "cache=taylorseer", "prompt=a fox"]), 1, env={}
    )
    assert result_key(job.base) == "ce9759a83561871828ff64540cc7d1fcc4c4f240a430d4dd910238922336246d"
