"""The catalogue of bad input (issue 17): settings, meshes, checkpoints in both layouts, images,
LoRA files and cache settings. Every case must stop in validation — the function run.py calls
before anything loads (`compose_settings` + `validate_job`) — with ONE line naming the setting or
file and the fix, and leave nothing on disk. Most cases are checked in-process (a subprocess
costs seconds of imports each); a sample goes through the real CLI to prove exit code 2, one
line on stderr, no traceback and no files. A few unusual-but-valid inputs must render."""

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from harness.lora_files import bad_file
from harness.settings import assert_words, refusal

from parallel_wan.run import CONF_DIR

REPO = os.path.dirname(CONF_DIR)
BIG_SEED = 2**70


# ------------------------------------------------------------------------------ settings
SETTINGS = {
    "num_frames_not_4k1": (["num_frames=10"], ["num_frames=10", "4k+1", "num_frames=9"]),
    "num_frames_zero": (["num_frames=0"], ["num_frames=0", "4k+1"]),
    "num_frames_negative": (["num_frames=-3"], ["num_frames=-3"]),
    "num_frames_float": (["num_frames=9.5"], ["num_frames=9.5", "whole number"]),
    "height_not_multiple": (["height=100"], ["height=100", "multiple of 16", "height=96"]),
    "width_zero": (["width=0"], ["width=0", "multiple of 16"]),
    "steps_zero": (["steps=0"], ["steps=0", "at least 1"]),
    "steps_text": (["steps=many"], ["steps='many'", "whole number"]),
    "guidance_high_nan": (["guidance_high=nan"], ["guidance_high=nan", "finite", "guidance_high=5.0"]),
    "guidance_low_inf": (["guidance_low=inf"], ["guidance_low=inf", "finite"]),
    "guidance_negative": (["guidance_high=-1"], ["guidance_high=-1.0", "negative"]),
    "shift_zero": (["shift=0"], ["shift=0.0", "positive"]),
    "shift_nan": (["shift=nan"], ["shift=nan", "finite"]),
    "seed_negative": (["seed=-1"], ["seed=-1", "between 0 and"]),
    "seed_2_to_70": ([f"seed={BIG_SEED}"], [f"seed={BIG_SEED}", "64-bit", "smaller seed"]),
    "seed_text": (["seed=abc"], ["seed='abc'", "whole number"]),
    "sampler_unknown": (["sampler=ddim"], ["sampler='ddim'", "unipc, euler"]),
    "schedule_unknown": (["schedule=karras"], ["schedule='karras'", "official"]),
    "dtype_unknown": (["dtype=int8"], ["dtype='int8'", "bfloat16"]),
    "device_cuda_absent": (["device=cuda"], ["device=cuda", "no CUDA", "device=cpu"]),
    "device_unknown": (["device=banana"], ["device='banana'", "auto, cpu, cuda"]),
    "backend_unknown": (["backend.name=tensorflow"], ["backend='tensorflow'", "torch, jax"]),
    "attention_unknown": (["attention_impl=flashy"], ["attention_impl='flashy'", "auto, sdpa, flash, cudnn, sage"]),
    "attention_sage_on_cpu": (
        ["attention_impl=sage", "device=cpu"],
        ["attention_impl=sage", "CUDA", "attention_impl=auto"],
    ),
    "attention_cudnn_on_jax": (
        ["backend.name=jax", "attention_impl=cudnn"],
        ["attention_impl=cudnn", "backend=jax", "attention_impl=auto"],
    ),
    "memory_unknown": (["memory=disk"], ["memory='disk'", "resident"]),
    "swap_one_expert": (["model=tiny_ti2v", "memory=swap"], ["memory=swap", "one expert"]),
    "swap_prefetch_negative": (["swap_prefetch_steps=-1"], ["swap_prefetch_steps=-1", "≥ 0"]),
    "scan_loop_on_torch": (["backend=torch", "scan_loop=true"], ["scan_loop=true", "backend=jax"]),
    "compile_not_bool": (["compile=maybe"], ["compile='maybe'", "compile=true"]),
    "dist_timeout_zero": (["dist_timeout_s=0"], ["dist_timeout_s=0.0", "positive"]),
    "dist_timeout_nan": (["dist_timeout_s=nan"], ["dist_timeout_s=nan", "finite"]),
    "save_frames_not_bool": (["save_frames=2"], ["save_frames=2", "save_frames=true"]),
    "key_added_with_plus": (["+frame_count=9"], ["frame_count=9", "not a setting", "num_frames"]),
    "key_mistyped": (["frame_count=9"], ["frame_count", "not a setting", "num_frames"]),
    "model_unknown": (["model=nope"], ["model=nope", "tiny, tiny_animate, tiny_i2v"]),
    "override_syntax": (["seed=="], ["seed==", "key=value"]),
    "interpolation_missing": (["seed=${nothing}"], ["nothing", "not found"]),
    "prompt_empty_list": (["prompt=[]"], ["prompt=[]", "non-empty list"]),
    "prompt_numbers": (["prompt=[1,2]"], ["prompt=[1, 2]", "strings"]),
    "negative_prompt_list": (["negative_prompt=[a,b]"], ["negative_prompt=['a', 'b']", "string"]),
    "checkpoint_missing": (["checkpoint_dir=/no/such/dir"], ["checkpoint_dir=/no/such/dir", "not a folder"]),
    "a14b_without_weights": (["model=wan2.2_t2v_a14b"], ["checkpoint_dir=DIR", "model=tiny"]),
    "video_beyond_rope": (
        ["num_frames=100001", "height=4096", "width=4096"],
        ["num_frames=100001", "RoPE", "num_frames ≤ 4093"],
    ),
    "height_beyond_rope": (["height=32768"], ["height=32768", "RoPE", "height ≤ 16384"]),
    "sigmas_nan": (["sigmas=[1.0,nan]"], ["sigmas=", "non-empty list of numbers"]),
    "sigmas_increasing": (["sigmas=[0.5,0.9]"], ["sigmas=[0.5, 0.9]", "decrease strictly"]),
    "sigmas_and_timesteps": (["sigmas=[1.0,0.5]", "timesteps=[1000,500]"], ["both given", "give one of them"]),
    "recipe_unknown": (["recipe=turbo"], ["recipe=", "turbo"]),
    "output_dir_read_only": (
        ["output_dir=/sys/parallel_wan_out"],
        ["output_dir=/sys/parallel_wan_out", "not writable"],
    ),
    "cache_dir_read_only": (
        ["weights_cache_dir=/sys/pw_cache"],
        ["weights_cache_dir=/sys/pw_cache", "not writable", "weights_cache_dir=null"],
    ),
    # the built-in model's weights are wide: without quantize=fp8 no layer would multiply in FP8
    "fp8_compute_without_quantize": (
        ["quant_compute=fp8"],
        ["quant_compute=fp8", "quantize=none", "quantize=fp8", "quant_compute=dequant"],
    ),
}

MESHES = {
    "mesh_unknown": (["mesh=nope"], 1, ["mesh=nope", "single"]),
    "mesh_world_too_small": (["mesh=usp2x2"], 2, ["4 processes but 2 were started", "--nproc-per-node 4"]),
    "mesh_world_too_large": (["mesh=single"], 4, ["1 processes but 4 were started"]),
    "mesh_cp_mismatch": (["mesh=cp4", "mesh.ulysses=4"], 4, ["cp=4 must equal ulysses×ring=4×2"]),
    "mesh_dp_without_guidance": (["mesh=dp2", "guidance_high=1", "guidance_low=1"], 2, ["dp=2", "guidance"]),
    "mesh_dp_zero": (["mesh=cp2", "mesh.dp=0"], 0, ["mesh.dp=0"]),
    "mesh_unknown_key": (["mesh=single", "+mesh.foo=1"], 1, ["foo", "a mesh sets"]),
    "mesh_prompts_uneven": (["mesh=dp2", "prompt=[a,b,c]"], 2, ["3 prompts were given", "multiple of 2"]),
    "mesh_heads_ulysses": (
        ["mesh=cp8", "mesh.cp=16", "mesh.ulysses=16", "mesh.ring=1"],
        16,
        ["ulysses=16 does not divide the model's 8 attention heads"],
    ),
}

CACHE = {
    "cache_threshold_nan": (["cache=magcache", "cache.threshold=nan"], ["cache.threshold=nan", "not finite"]),
    "cache_threshold_negative": (["cache=fbcache", "cache.threshold=-1"], ["cache.threshold=-1.0", "negative"]),
    "cache_max_skips_zero": (["cache=magcache", "cache.max_skips=0"], ["cache.max_skips=0", "≥ 1"]),
    "cache_retention_one": (["cache=magcache", "cache.retention=1.0"], ["cache.retention=1.0", "[0, 1)"]),
    "cache_ratios_missing": (["cache=magcache", "cache.ratios=/no/such.json"], ["cache.ratios=/no/such.json"]),
    "cache_unknown_key": (["cache=fbcache", "+cache.max_skips=2"], ["cache.max_skips", "cache.threshold"]),
    "cache_order_zero": (["cache=taylorseer", "cache.order=0"], ["cache.order=0", "≥ 1"]),
}


@pytest.mark.parametrize("case", sorted(SETTINGS))
def test_bad_setting(case, tmp_path):
    overrides, words = SETTINGS[case]
    assert_words(refusal(overrides, tmp_path), words)


@pytest.mark.parametrize("case", sorted(MESHES))
def test_bad_mesh(case, tmp_path):
    overrides, world, words = MESHES[case]
    assert_words(refusal(overrides, tmp_path, world), words)


@pytest.mark.parametrize("case", sorted(CACHE))
def test_bad_cache_setting(case, tmp_path):
    overrides, words = CACHE[case]
    assert_words(refusal(overrides, tmp_path), words)


def test_output_dir_under_a_file(tmp_path):
    (tmp_path / "file").write_text("")
    msg = refusal([f"output_dir={tmp_path / 'file' / 'out'}"], tmp_path)
    assert_words(msg, ["output_dir=", "is a file, not a folder"])


def test_prompt_beside_a_prompt_file(tmp_path):
    """Every line of a prompt file gives its video's prompt, so a prompt= beside it would be ignored."""
    (tmp_path / "prompts.txt").write_text("a red fox walks through fresh snow\n")
    msg = refusal([f"prompts={tmp_path / 'prompts.txt'}", "prompt=a cat surfing"], tmp_path)
    assert_words(msg, ["prompt='a cat surfing'", f"prompts={tmp_path / 'prompts.txt'}", "ignored", "drop prompt="])


def test_weights_cache_dir_under_a_file(tmp_path):
    (tmp_path / "file").write_text("")
    assert_words(
        refusal([f"weights_cache_dir={tmp_path / 'file' / 'c'}"], tmp_path),
        ["weights_cache_dir=", "is a file", "weights_cache_dir=null"],
    )


def test_a_video_too_large_for_the_device_gets_the_planners_verdict(tmp_path, monkeypatch):
    # The device is made small (100 kB) so that a tiny-model video exceeds it: the refusal quotes
    # the planner's peak and its suggestions, before anything loads.
    from parallel_wan.memory_plan import fits

    monkeypatch.setattr(fits, "device_memory", lambda spec: (1e5, "a 100 kB test device"))
    msg = refusal(["num_frames=17", "height=128", "width=128", "dtype=float32"], tmp_path)
    assert_words(
        msg,
        [
            "num_frames=17 height=128 width=128 does not fit",
            "the planner puts its peak at",
            "a 100 kB test device",
            "try:",
            "dtype=bfloat16",
            "smaller height/width/num_frames",
        ],
    )


@pytest.mark.parametrize(
    "size, peak",
    [(["num_frames=4001", "height=1024", "width=1024"], "156.55 GB"), (["height=16384", "width=16384"], "645.12 GB")],
)
def test_a_video_over_the_device_but_over_no_floor_is_refused_by_the_planner(tmp_path, monkeypatch, size, peak):
    """Issue 38 item 1: these passed the frames-and-latents floor (12.6 GB and 13.7 GB of a 24 GB
    host), started, and were OOM-killed; the planner puts them far over it."""
    from parallel_wan.memory_plan import fits

    monkeypatch.setattr(fits, "device_memory", lambda spec: (24e9, "a 24 GB test host"))
    msg = refusal(size, tmp_path)
    assert_words(
        msg,
        [
            "does not fit",
            f"the planner puts its peak at {peak}",
            "a 24 GB test host has 24.00 GB",
            "smaller height/width/num_frames",
            "python -m parallel_wan.plan",
        ],
    )


# ------------------------------------------------------------------------------ images
IMAGES = {
    "image_not_an_image": (lambda p: p.write_text("not a png"), ["could not be read as an image"]),
    "image_empty_file": (lambda p: p.write_bytes(b""), ["could not be read as an image"]),
    "image_truncated_png": (lambda p: _png(p, cut=60), ["could not be read as an image"]),
    "image_is_a_folder": (lambda p: p.mkdir(), ["does not exist", "PNG or JPEG"]),
}


def _png(path, cut=None):
    from PIL import Image

    Image.new("RGB", (64, 64), (10, 200, 30)).save(path, format="PNG")
    if cut:
        path.write_bytes(path.read_bytes()[:cut])


@pytest.mark.parametrize("case", sorted(IMAGES))
def test_bad_image(case, tmp_path):
    make, words = IMAGES[case]
    image = tmp_path / "first_frame.png"
    make(image)
    assert_words(refusal(["model=tiny_i2v", f"image={image}"], tmp_path), [f"image={image}", *words])


def test_image_missing_for_i2v(tmp_path):
    assert_words(refusal(["model=tiny_i2v"], tmp_path), ["model=tiny_i2v", "image=PATH"])


def test_image_on_a_text_to_video_model(tmp_path):
    _png(tmp_path / "x.png")
    assert_words(refusal(["model=tiny", f"image={tmp_path / 'x.png'}"], tmp_path), ["text-to-video", "drop image="])


# ------------------------------------------------------------------------------ LoRA files
LORA_KINDS = [
    "not_safetensors",
    "corrupt",
    "unknown_key",
    "rank_mismatch",
    "shape_mismatch",
    "half_pair",
    "dora",
    "pickle_with_code",
]


@pytest.mark.parametrize("kind", LORA_KINDS)
def test_bad_lora_file(kind, tmp_path):

    (tmp_path / "in").mkdir()
    path, words = bad_file(tmp_path / "in", kind)
    assert_words(refusal([f"lora_low={path}"], tmp_path), words)


def test_lora_missing_file(tmp_path):
    assert_words(refusal(["lora=/no/such.safetensors"], tmp_path), ["lora=/no/such.safetensors", "does not exist"])


def test_lora_scale_nan(tmp_path):

    (tmp_path / "in").mkdir()
    path, _ = bad_file(tmp_path / "in", "rank_mismatch")
    assert_words(refusal([f"lora={path}", "lora_scale=nan"], tmp_path), ["lora_scale=nan", "finite"])


# ------------------------------------------------------------------------------ checkpoints
@pytest.fixture(scope="module")
def checkpoints(tiny_t2v):
    """The tiny T2V model written in both layouts (the official one with sharded experts)."""
    return tiny_t2v.layouts


EXPERT = {"diffusers": "transformer", "official": "high_noise_model"}


def rewrite_header(path: Path, edit) -> None:
    """Edit a safetensors file's JSON header in place, keeping its data bytes."""
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    edit(header)
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + length :])


def _shard(folder: Path) -> Path:
    return sorted(folder.glob("*.safetensors"))[0]


def _last_tensor(header: dict) -> str:
    return max((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][1])


def _index(folder: Path) -> Path:
    return next(folder.glob("*.safetensors.index.json"))


def _point_index_at(folder: Path, target: str) -> None:
    index = _index(folder)
    data = json.loads(index.read_text())
    first = next(iter(data["weight_map"]))
    data["weight_map"][first] = target
    index.write_text(json.dumps(data))


def _truncate(path: Path, keep: float = 0.5) -> None:
    path.write_bytes(path.read_bytes()[: int(path.stat().st_size * keep)])


def _offsets_past_end(header):
    name = _last_tensor(header)
    header[name]["data_offsets"] = [o + 4096 for o in header[name]["data_offsets"]]


def _span_wrong(header):
    name = _last_tensor(header)
    header[name]["shape"] = [*header[name]["shape"][:-1], header[name]["shape"][-1] * 2]


def _set(key, value):
    def edit(header):
        header[_last_tensor(header)][key] = value

    return edit


def _symlink_out(folder: Path, outside: Path) -> None:
    shard = _shard(folder)
    shutil.copy(shard, outside / shard.name)
    shard.unlink()
    shard.symlink_to(outside / shard.name)


# case → (layouts, edit(ckpt_root, expert_folder, outside_folder), words)
CHECKPOINTS = {
    "index_names_parent_path": (
        ("diffusers", "official"),
        lambda r, e, o: _point_index_at(e, "../../outside/stolen.safetensors"),
        ["../../outside/stolen.safetensors", "outside", "re-download that index"],
    ),
    "index_names_absolute_path": (
        ("diffusers",),
        lambda r, e, o: _point_index_at(e, str(o / "stolen.safetensors")),
        ["stolen.safetensors", "outside"],
    ),
    "shard_symlink_leads_out": (("official",), lambda r, e, o: _symlink_out(e, o), ["is a symlink to", "outside"]),
    "folder_symlink_leads_out": (
        ("diffusers",),
        lambda r, e, o: (shutil.move(r / "vae", o / "vae"), (r / "vae").symlink_to(o / "vae")),
        ["vae is a symlink to", "outside the checkpoint folder"],
    ),
    "shard_truncated": (
        ("diffusers", "official"),
        lambda r, e, o: _truncate(_shard(e)),
        ["truncated", "safetensors", "re-download"],
    ),
    "data_offsets_past_end": (
        ("diffusers",),
        lambda r, e, o: rewrite_header(_shard(e), _offsets_past_end),
        ["truncated or corrupt", "ends at byte", "re-download that file"],
    ),
    "data_span_disagrees_with_shape": (
        ("official",),
        lambda r, e, o: rewrite_header(_shard(e), _span_wrong),
        ["needs", "bytes but its data offsets span"],
    ),
    "unknown_dtype": (
        ("diffusers",),
        lambda r, e, o: rewrite_header(_shard(e), _set("dtype", "F8_XX")),
        ["dtype 'F8_XX'", "BF16"],
    ),
    "negative_shape": (
        ("official",),
        lambda r, e, o: rewrite_header(_shard(e), _set("shape", [-1, 4])),
        ["shape [-1, 4]", "non-negative"],
    ),
    "header_length_past_end": (
        ("diffusers",),
        lambda r, e, o: _shard(e).write_bytes(struct.pack("<Q", 10**7) + _shard(e).read_bytes()[8:]),
        ["header length 10000000", "truncated"],
    ),
    "header_not_json": (
        ("official",),
        lambda r, e, o: _shard(e).write_bytes(struct.pack("<Q", 8) + b"{notjson" + b"\0" * 64),
        ["not a readable safetensors file"],
    ),
    "index_not_json": (("diffusers",), lambda r, e, o: _index(e).write_text("{"), ["not a safetensors index"]),
    "shard_missing": (("official",), lambda r, e, o: _shard(e).unlink(), ["missing", "re-download that shard"]),
    "config_not_json": (
        ("diffusers",),
        lambda r, e, o: (e / "config.json").write_text("{"),
        ["config.json", "not valid JSON"],
    ),
    "config_disagrees": (
        ("official",),
        lambda r, e, o: (e / "config.json").write_text(
            (e / "config.json").read_text().replace('"ffn_dim": ', '"ffn_dim": 1')
        ),
        ["tensors disagree with", "config.json"],
    ),
    "vae_pth_truncated": (
        ("official",),
        lambda r, e, o: _truncate(next(r.glob("Wan2.*_VAE.pth"))),
        ["VAE.pth", "weights-only torch zip"],
    ),
    "t5_missing": (
        ("official",),
        lambda r, e, o: (r / "models_t5_umt5-xxl-enc-bf16.pth").unlink(),
        ["models_t5_umt5-xxl-enc-bf16.pth is missing"],
    ),
    "model_index_missing": (
        ("diffusers",),
        lambda r, e, o: (r / "model_index.json").unlink(),
        ["lost its model_index.json"],
    ),
    "low_noise_expert_missing": (("diffusers",), lambda r, e, o: shutil.rmtree(r / "transformer_2"), ["transformer_2"]),
}
CHECKPOINT_CASES = [(case, layout) for case, (layouts, _, _) in sorted(CHECKPOINTS.items()) for layout in layouts]


def broken_checkpoint(checkpoints, tmp_path, case, layout) -> Path:
    root, outside = tmp_path / "ckpt", tmp_path / "outside"
    shutil.copytree(checkpoints[layout], root)
    outside.mkdir()
    CHECKPOINTS[case][1](root, root / EXPERT[layout], outside)
    return root


@pytest.mark.parametrize("case, layout", CHECKPOINT_CASES)
def test_bad_checkpoint(case, layout, checkpoints, tmp_path):
    root = broken_checkpoint(checkpoints, tmp_path, case, layout)
    msg = refusal([f"checkpoint_dir={root}"], tmp_path)
    assert_words(msg, [f"checkpoint_dir={root}", *CHECKPOINTS[case][2]])


def test_i2v_preset_on_t2v_weights(checkpoints, tmp_path):
    _png(tmp_path / "x.png")
    msg = refusal(
        [f"checkpoint_dir={checkpoints['official']}", "model=tiny_i2v", f"image={tmp_path / 'x.png'}"], tmp_path
    )
    assert_words(msg, ["36", "model=tiny_i2v"])


@pytest.mark.parametrize("layout", ["diffusers", "official"])
def test_index_traversal_opens_nothing_outside_the_checkpoint(layout, checkpoints, tmp_path, monkeypatch):
    """Audit every path opened while the run validates a checkpoint whose index names
    ../../outside/stolen.safetensors (a real safetensors file there): none lies outside."""
    import builtins
    import io
    import mmap

    root = broken_checkpoint(checkpoints, tmp_path, "index_names_parent_path", layout)
    shutil.copy(_shard(root / EXPERT[layout]), tmp_path / "outside" / "stolen.safetensors")
    opened = []

    def audit(real):
        def opener(file, *args, **kwargs):
            if isinstance(file, (str, bytes, os.PathLike)):
                opened.append(Path(os.fsdecode(file)).absolute())
            return real(file, *args, **kwargs)

        return opener

    monkeypatch.setattr(builtins, "open", audit(builtins.open))
    monkeypatch.setattr(io, "open", audit(io.open))
    monkeypatch.setattr(os, "open", audit(os.open))
    real_mmap = mmap.mmap

    def mapped(fileno, *args, **kwargs):
        opened.append(Path(os.readlink(f"/proc/self/fd/{fileno}")))
        return real_mmap(fileno, *args, **kwargs)

    monkeypatch.setattr(mmap, "mmap", mapped)
    msg = refusal([f"checkpoint_dir={root}"], tmp_path)
    assert "../../outside/stolen.safetensors" in msg
    monkeypatch.undo()
    outside = [p for p in opened if tmp_path in p.parents and root not in p.parents]
    assert not outside, outside
    assert any(root in p.parents for p in opened)  # the audit saw the checkpoint's own files
    # The loader's own entry point refuses it too, whoever calls it.
    from parallel_wan.weights.safetensors_io import shard_files

    with pytest.raises(ValueError, match="outside"):
        shard_files(root / EXPERT[layout])


def test_catalogue_has_at_least_sixty_cases():
    count = (
        len(SETTINGS)
        + len(MESHES)
        + len(CACHE)
        + len(IMAGES)
        + len(LORA_KINDS)
        + len(CHECKPOINT_CASES)
        + 2
        + 1
        + 1
        + 2
        + 2
        + 1
        + 2
    )  # the single tests above: dirs under files, prompt beside prompts=,
    # too large, images, LoRA, i2v
    assert count >= 60, count


# ------------------------------------------------------------------------------ the real CLI
def run_cli(tmp_path, *overrides, timeout=300):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "parallel_wan.run", f"output_dir={out}", *overrides],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": REPO},
    )
    return proc, out


CLI = {
    "guidance_high_nan": ["guidance_high=nan"],
    "seed_2_to_70": [f"seed={BIG_SEED}"],
    "key_added_with_plus": ["+frame_count=9"],
    "key_mistyped": ["frame_count=9"],
    "model_unknown": ["model=nope"],
    "override_syntax": ["seed=="],
    "device_cuda_absent": ["device=cuda"],
    "video_beyond_rope": ["num_frames=100001", "height=4096", "width=4096"],
    "cache_threshold_nan": ["cache=magcache", "cache.threshold=nan"],
}


@pytest.mark.parametrize(
    "case",
    sorted(CLI)
    + ["output_dir_under_a_file", "checkpoint_traversal", "checkpoint_truncated", "image_not_an_image", "lora_corrupt"],
)
def test_cli_refuses_in_one_line_with_exit_2_and_writes_nothing(case, tmp_path, checkpoints):
    inputs = tmp_path / "in"
    inputs.mkdir()
    overrides = CLI.get(case)
    if case == "output_dir_under_a_file":
        (inputs / "file").write_text("")
        overrides = [f"output_dir={inputs / 'file' / 'out'}"]
    elif case in ("checkpoint_traversal", "checkpoint_truncated"):
        kind, layout = (
            ("index_names_parent_path", "official")
            if case == "checkpoint_traversal"
            else ("shard_truncated", "diffusers")
        )
        overrides = [f"checkpoint_dir={broken_checkpoint(checkpoints, inputs, kind, layout)}"]
    elif case == "image_not_an_image":
        (inputs / "x.png").write_text("hello")
        overrides = ["model=tiny_i2v", f"image={inputs / 'x.png'}"]
    elif case == "lora_corrupt":
        overrides = [f"lora={bad_file(inputs, 'corrupt')[0]}"]
    listing = sorted(p for p in inputs.rglob("*"))
    proc, out = run_cli(tmp_path, *overrides)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("parallel_wan: error: "), proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "HYDRA_FULL_ERROR" not in proc.stderr
    assert not out.exists() and sorted(os.listdir(tmp_path)) == ["in"]
    assert sorted(p for p in inputs.rglob("*")) == listing  # nothing written beside the inputs either


# ------------------------------------------------------------------------------ unusual but valid
@pytest.mark.slow  # over 5 s in the suite's run (tests/README.md)
def test_empty_long_and_non_latin_prompts_render(tmp_path):
    long_prompt = " ".join(["a red fox jumps over the lazy dog"] * 90)  # ≈ 700 tokens: cut to 512
    prompts = ["", long_prompt, "一只猫在海滩上奔跑", "Кошка бежит по пляжу", "قطة تجري على الشاطئ"]
    listed = ",".join(json.dumps(p, ensure_ascii=False) for p in prompts)
    proc, out = run_cli(tmp_path, f"prompt=[{listed}]", "steps=1", "num_frames=1", "height=32", "width=32")
    assert proc.returncode == 0, proc.stderr[-3000:]
    sidecar = json.loads((out / "video.json").read_text())
    assert [v["prompt"] for v in sidecar["videos"]] == prompts
    assert sorted(os.listdir(out)) == ["video.json"] + [f"video_{i:03d}.mp4" for i in range(len(prompts))]
