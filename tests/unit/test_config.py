"""Bad input stops the run early with one clear line and writes nothing."""

import os
import subprocess
import sys

import pytest
from harness.settings import assert_refused, spec_for

from parallel_wan.config import ConfigError
from parallel_wan.config.compose import compose_spec
from parallel_wan.run import CONF_DIR

REPO = os.path.dirname(CONF_DIR)


def test_defaults_resolve_from_the_model_preset():
    spec = spec_for("model=wan2.2_t2v_a14b", "checkpoint_dir=/tmp")
    assert (spec.video.num_frames, spec.video.height, spec.video.width, spec.sampling.steps) == (81, 720, 1280, 40)
    assert (spec.sampling.guidance_high, spec.sampling.guidance_low, spec.sampling.shift) == (4.0, 3.0, 12.0)
    spec = spec_for("model=wan2.2_ti2v_5b", "checkpoint_dir=/tmp", "steps=7")
    assert (spec.video.num_frames, spec.video.height, spec.sampling.steps, spec.model.fps) == (121, 704, 7, 24)


def test_fps_and_boundary_replace_the_presets_and_key_the_result_only_when_they_differ():
    from parallel_wan.jobs.keys import result_key

    spec = spec_for("model=wan2.2_t2v_a14b", "checkpoint_dir=/tmp", "fps=24", "boundary=0.9")
    assert (spec.model.fps, spec.model.boundary) == (24, 0.9)
    plain = result_key(spec_for("model=wan2.2_t2v_a14b", "checkpoint_dir=/tmp"))
    same = result_key(spec_for("model=wan2.2_t2v_a14b", "checkpoint_dir=/tmp", "fps=16", "boundary=0.875"))
    assert plain == same != result_key(spec)
    assert plain != result_key(spec_for("model=wan2.2_t2v_a14b", "checkpoint_dir=/tmp", "boundary=0.9"))
    assert plain != result_key(spec_for("model=wan2.2_t2v_a14b", "checkpoint_dir=/tmp", "fps=24"))


@pytest.mark.parametrize(
    "overrides, words",
    [
        (["num_frames=10"], ["num_frames=10", "4k+1", "num_frames=9"]),
        (["height=100"], ["height=100", "multiple of 16"]),
        (["width=0"], ["width=0", "multiple of 16"]),
        (["model=tiny_ti2v", "height=48"], ["height=48", "multiple of 32"]),
        (["model=wan2.2_ti2v_5b", "checkpoint_dir=/tmp", "width=720"], ["width=720", "multiple of 32"]),
        (["sampler=ddim"], ["sampler='ddim'", "unipc, euler"]),
        (["schedule=karras"], ["schedule='karras'", "official"]),
        (["dtype=int8"], ["dtype='int8'", "bfloat16"]),
        (["steps=0"], ["steps=0", "at least 1"]),
        (["guidance_high=-1"], ["guidance_high=-1.0", "negative"]),
        (["guidance_low=-0.5"], ["guidance_low=-0.5", "negative"]),
        (["seed=abc"], ["seed='abc'", "whole number"]),
        (["model=tiny_i2v"], ["image=PATH"]),
        (["model=tiny_i2v", "image=/no/such.png"], ["image=/no/such.png", "does not exist"]),
        (["model=wan2.2_t2v_a14b"], ["checkpoint_dir=DIR", "model=tiny"]),
        (["checkpoint_dir=/no/such/dir"], ["checkpoint_dir=/no/such/dir", "not a folder"]),
        (["model=tiny", "image=README.md"], ["text-to-video"]),
        (["fps=0"], ["fps=0", "1 to 240", "own: 16"]),
        (["fps=12.5"], ["fps=12.5", "whole number"]),
        (["boundary=1"], ["boundary=1.0", "between 0 and 1", "own: 0.875"]),
        (["boundary=nan"], ["boundary=nan", "finite"]),
        (["model=tiny_ti2v", "boundary=0.5"], ["boundary=0.5", "one expert", "drop boundary="]),
    ],
)
def test_bad_settings_name_the_setting_and_the_fix(overrides, words):
    assert_refused(overrides, words)


def test_unreadable_image(tmp_path):
    bad = tmp_path / "frame.png"
    bad.write_bytes(b"not a png at all")
    with pytest.raises(ConfigError, match="could not be read as an image"):
        spec_for("model=tiny_i2v", f"image={bad}")


def run_cli(tmp_path, *overrides):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "parallel_wan.run", f"output_dir={out}", *overrides],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": REPO},
    )
    return proc, out


@pytest.mark.parametrize(
    "overrides, words",
    [
        (["num_frames=12"], ["num_frames=12"]),
        (["model=no_such_model"], ["no_such_model"]),
        (["mesh=no_such_mesh"], ["no_such_mesh"]),
    ],
)
def test_cli_fails_fast_and_writes_nothing(tmp_path, overrides, words):
    proc, out = run_cli(tmp_path, *overrides)
    assert proc.returncode != 0
    for w in words:
        assert w in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()
    assert sorted(os.listdir(tmp_path)) == []  # no Hydra run folder or logs either


def test_cli_config_error_is_one_line(tmp_path):
    proc, out = run_cli(tmp_path, "height=99")
    assert proc.returncode == 2
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert lines == [lines[0]] and lines[0].startswith("parallel_wan: error: height=99")


@pytest.fixture(scope="module")
def tiny_folder(tiny_t2v):
    return tiny_t2v.layouts["diffusers"]


def _broken_copy(src, dst, edit):
    import shutil

    shutil.copytree(src, dst)
    edit(dst)
    return dst


@pytest.mark.parametrize(
    "case, words",
    [
        ("missing_low_noise_expert", ["transformer_2"]),
        ("missing_shard", ["safetensors"]),
        ("config_disagrees_with_weights", ["ffn"]),
        ("i2v_preset_on_t2v_weights", ["36", "model=tiny_i2v"]),
    ],
)
def test_cli_rejects_a_broken_checkpoint_before_loading(tmp_path, tiny_folder, case, words):
    import json
    import shutil

    def edit(d):
        if case == "missing_low_noise_expert":
            shutil.rmtree(d / "transformer_2")
        elif case == "missing_shard":
            next((d / "transformer").glob("*-00002-of-*.safetensors")).unlink()
        elif case == "config_disagrees_with_weights":
            cfg = json.loads((d / "transformer" / "config.json").read_text())
            cfg["ffn_dim"] = 999
            (d / "transformer" / "config.json").write_text(json.dumps(cfg))

    ckpt = _broken_copy(tiny_folder, tmp_path / "ckpt", edit)
    extra = ["model=tiny_i2v", f"image={tmp_path / 'x.png'}"] if case == "i2v_preset_on_t2v_weights" else []
    if extra:
        from PIL import Image

        Image.new("RGB", (64, 64)).save(tmp_path / "x.png")
    proc, out = run_cli(tmp_path, f"checkpoint_dir={ckpt}", *extra)
    assert proc.returncode == 2, proc.stderr
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("parallel_wan: error:"), proc.stderr
    for w in words:
        assert w in lines[0], lines[0]
    assert not out.exists()


@pytest.mark.parametrize(
    "overrides, world, words",
    [
        (["mesh=usp2x2"], 2, ["dp×cp=1×4=4 processes but 2 were started", "torchrun --nproc-per-node 4"]),
        (["mesh=single"], 4, ["1 processes but 4 were started"]),
        (["mesh=cp4", "mesh.ulysses=4"], 4, ["cp=4 must equal ulysses×ring=4×2"]),
        (["mesh=dp2", "guidance_high=1", "guidance_low=1"], 2, ["dp=2", "guidance"]),
        (["mesh=cp2", "mesh.dp=0"], 0, ["mesh.dp=0"]),
    ],
)
def test_bad_meshes(overrides, world, words):
    with pytest.raises(ConfigError) as err:
        compose_spec(overrides, world, output_dir="/tmp/unused")
    for w in words:
        assert w in str(err.value), str(err.value)


def test_heads_not_divisible_by_ulysses_names_a_ring_factor_that_works():
    from parallel_wan.config import mesh_spec

    with pytest.raises(ConfigError) as err:
        mesh_spec({"name": "ulysses8", "dp": 1, "cp": 8, "ulysses": 8, "ring": 1}, 8, heads=12)
    assert "ulysses=8 does not divide the model's 12 attention heads" in str(err.value)
    assert "mesh.ulysses=4 mesh.ring=2" in str(err.value)
    # A14B: 40 heads split 8 ways is fine; TI2V-5B: 24 heads too.
    mesh_spec({"name": "ulysses8", "dp": 1, "cp": 8, "ulysses": 8, "ring": 1}, 8, heads=40)
    mesh_spec({"name": "ulysses8", "dp": 1, "cp": 8, "ulysses": 8, "ring": 1}, 8, heads=24)


def test_cli_heads_check_runs_before_loading(tmp_path):
    # The tiny model has 8 heads; ulysses 16 (with 16 "processes" claimed) must be refused at once.
    env_world = {"RANK": "0", "WORLD_SIZE": "16", "LOCAL_RANK": "0"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "parallel_wan.run",
            f"output_dir={tmp_path / 'out'}",
            "mesh=cp8",
            "mesh.cp=16",
            "mesh.ulysses=16",
            "mesh.ring=1",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": REPO, **env_world},
    )
    assert proc.returncode == 2
    assert "ulysses=16 does not divide the model's 8 attention heads" in proc.stderr
    assert "mesh.ulysses=8 mesh.ring=2" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_xfuser_without_cuda_is_refused_before_loading(tmp_path):
    proc, out = run_cli(tmp_path, "attention_impl=xfuser")
    assert proc.returncode == 2
    assert "attention_impl=xfuser needs CUDA" in proc.stderr and "attention_impl=auto" in proc.stderr
    assert not out.exists()


def test_attention_impl_defaults_to_auto_and_ours_is_its_old_name():
    assert spec_for().execution.attention_impl == "auto"
    assert spec_for("attention_impl=ours").execution.attention_impl == "auto"
    assert spec_for("attention_impl=sage").execution.attention_impl == "sage"  # checked against the device later
    # a loop state's key still names it "ours", as states saved before the rename do
    from parallel_wan.jobs.keys import state_settings

    assert state_settings(spec_for(), 1)["attention_impl"] == "ours"
    assert state_settings(spec_for("attention_impl=sage"), 1)["attention_impl"] == "sage"


def test_prompt_batches_must_split_evenly_over_dp():
    with pytest.raises(ConfigError, match="3 prompts were given; give a multiple of 2"):
        compose_spec(["mesh=dp2", "prompt=[a,b,c]"], 2, output_dir="/tmp/unused")
    spec = spec_for("prompt=[a,b]")
    assert spec.video.prompts == ("a", "b") and spec.video.seed_of(1) == spec.video.seed + 1


def test_jax_fsdp_is_an_alias_of_memory_sharded_on_jax():
    """The spec holds one fact, memory=sharded; jax_fsdp (the older spelling, still recorded in
    sidecars and result keys) is derived from it and the backend's capabilities."""
    import dataclasses

    from parallel_wan.config.schema import MemorySettings

    alias, sharded = spec_for("backend=jax", "jax_fsdp=true"), spec_for("backend=jax", "memory=sharded")
    assert alias.to_dict() == sharded.to_dict() and alias.memory.mode == "sharded"
    assert sharded.shards_weights_over_mesh and sharded.to_dict()["jax_fsdp"] is True
    assert spec_for("backend=jax").to_dict()["jax_fsdp"] is False
    assert spec_for("memory=sharded").to_dict()["jax_fsdp"] is False  # torch shards rank rows, not a mesh
    assert "jax_fsdp" not in {f.name for f in dataclasses.fields(MemorySettings)}


def test_video_to_video_settings_are_checked_before_anything_loads(tmp_path):
    from harness.videos import write_source_video

    from parallel_wan.jobs.keys import result_key

    source = tmp_path / "source.mp4"
    write_source_video(source, frames=11, height=32, width=32)
    spec = spec_for(f"video={source}")
    assert (spec.video.video, spec.video.strength, spec.video.num_frames) == (str(source), 0.8, 9)  # 4k+1 ≤ 11
    moved = tmp_path / "moved.mp4"
    moved.write_bytes(source.read_bytes())
    assert result_key(spec) == result_key(spec_for(f"video={moved}"))  # the content decides, not the path
    assert result_key(spec) != result_key(spec_for(f"video={source}", "strength=0.5"))
    assert "video" not in spec_for().to_dict()  # runs without one keep their keys
    for overrides, words in (
        ([f"video={tmp_path / 'none.mp4'}"], ["does not exist"]),
        (["video=README.md"], ["video=README.md could not be read as a video", "mp4"]),
        ([f"video={source}", "strength=0"], ["strength=0.0", "above 0 and at most 1"]),
        ([f"video={source}", "strength=1.5"], ["strength=1.5"]),
        ([f"video={source}", "steps=4", "strength=0.2"], ["runs no step", "strength=0.25"]),
        ([f"video={source}", "num_frames=13"], ["num_frames=13", "has 11 frames", "num_frames=9"]),
        ([f"video={source}", "model=tiny_i2v"], ["model=tiny_i2v generates from an image; set image="]),
        ([f"video={source}", "cache=magcache", "cache.calibrate=true"], ["cache.calibrate=true", "without video="]),
    ):
        assert_refused([str(o) for o in overrides], words)
