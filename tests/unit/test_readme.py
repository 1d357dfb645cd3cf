"""README.md says only what is true (issue 22 item 13): every `parallel_wan.run` command it shows
composes (each setting exists, each group option exists), the set-up says how to get PyTorch's
CPU build, and the opening tells a new user what the project does today."""

import re
import shlex
from pathlib import Path

import pytest

from parallel_wan.run import CONF_DIR, compose_settings

README = (Path(CONF_DIR).parent / "README.md").read_text()


def _commands() -> list[str]:
    """Every command line of a code block (fenced or indented) that runs parallel_wan.run, with
    backslash continuations joined."""
    blocks = re.findall(r"```[^\n]*\n(.*?)```", README, flags=re.S)
    blocks += ["\n".join(m.splitlines()) for m in re.findall(r"(?:^    .*\S.*\n)+", README, flags=re.M)]
    lines = []
    for block in blocks:
        for line in re.sub(r"\\\s*\n\s*", " ", block).splitlines():
            line = line.split(" # ")[0].strip()
            if re.search(r"-m parallel_wan\.run\b", line):
                lines.append(line)
    return sorted(set(lines))


def _settings(line: str) -> list[str]:
    """The key=value words after `-m parallel_wan.run`, placeholders filled as a reader fills them:
    `…`/`...` stand for a value; a `[optional]` word is left out."""
    words = shlex.split(line.replace("…", "x").replace("...", "x"))
    words = words[words.index("parallel_wan.run") + 1 :]
    return [w for w in words if "=" in w and not w.startswith(("-", "["))]


COMMANDS = _commands()


def test_the_readme_shows_many_commands():
    assert len(COMMANDS) >= 20, COMMANDS


@pytest.mark.parametrize("line", COMMANDS)
def test_every_readme_command_composes(line):
    compose_settings(_settings(line))  # raises ConfigError naming an unknown setting or option


def test_the_setup_says_how_to_get_the_cpu_build_of_torch():
    setup = README.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in setup
    assert "CUDA build" in setup


def test_the_opening_says_what_the_project_does_today():
    opening = README.split("\n## ", 1)[0]
    assert len(opening.splitlines()) <= 25
    for feature in (
        "Ulysses",
        "CFG parallel",
        "MagCache",
        "Lightning",
        "prompt files",
        "resume",
        "SLURM",
        "XPK",
        "Not yet",
    ):
        assert feature in opening, feature
    assert "land" not in opening  # promises of what is to come belong in the issues, not the opening


def test_the_attention_tables_are_the_registered_kernels():
    """README's kernel and auto-order tables are what backends/torch/attention_table.py writes from
    the registered kernels (regenerate them from it when a kernel changes), and every value
    attention_impl= accepts has a row in the settings table above them."""
    from parallel_wan.backends.torch.attention_table import auto_table, kernel_table
    from parallel_wan.config import attention_impls

    rewrite = "python -m parallel_wan.backends.torch.attention_table README.md rewrites them"
    assert kernel_table() in README, rewrite
    assert auto_table() in README, rewrite
    section = README[README.index("### Attention kernels") :]
    rows = re.findall(r"^\| `(\w+)`", section.split("\n\n| kernel |")[0], flags=re.M)
    assert sorted(rows) == sorted(set(attention_impls()) - {"ours", "xfuser"})  # old names: no rows


def test_the_architectures_folder_table_matches_the_tree():
    """docs/architecture.md's folder table names every package of parallel_wan/ and nothing that
    is not there (the left column: folders and top-level modules)."""
    doc = (Path(CONF_DIR).parent / "docs" / "architecture.md").read_text()
    table = doc.split("## Folders and the direction of imports", 1)[1].split("```", 2)[1]
    named = set()
    for line in table.splitlines():
        left = line[:38]
        named.update(w.rstrip(",") for w in left.split() if w.rstrip(",").endswith(("/", ".py")))
    package = Path(CONF_DIR).parent / "parallel_wan"
    folders = {p.name + "/" for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert {n for n in named if n.endswith("/")} - {"backends/torch", "backends/jax"} <= folders | {"torch/", "jax/"}
    assert folders <= named, sorted(folders - named)
    for module in (n for n in named if n.endswith(".py")):
        assert (package / module).exists(), module


def test_the_readme_says_what_parallel_wan_nproc_exits_with():
    """Issue 38 item 5: `parallel-wan --nproc N` exits with the first rank's code and says its line
    once; torchrun's own code (1 after any failure or signal) is not what it returns."""
    paragraph = next(p for p in README.split("\n\n") if "takes `--nproc N`" in p)
    assert "as if you had typed it" not in paragraph
    for words in ("printed once", "2 a bad setting", "75", "130", "SIGTERM", "`backend=jax` is refused"):
        assert words in paragraph, words


def test_quantized_weights_shows_how_to_make_expert_files_from_any_checkpoint():
    """Issue 38 item 10: the command that writes expert files, with settings it takes, and the
    built-in model's stored folder named as a checkpoint it can start from."""
    from parallel_wan.quantize import SETTINGS

    section = README.split("\n## Quantized weights", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if "-m parallel_wan.quantize " in line]
    assert len(lines) >= 2, lines
    for line in lines:
        keys = [w.split("=")[0] for w in line.split("parallel_wan.quantize ", 1)[1].split() if "=" in w]
        assert sorted(keys) == sorted(SETTINGS), line
    assert "~/.cache/parallel_wan/builtin/" in section and "tiny models are checkpoints too" in section


def test_the_readme_says_how_close_each_mesh_is_in_bf16():
    """Issue 38 item 9: beside "every mesh renders the one-device video", README says what that
    means in bfloat16, the default — per mesh, against one device and against fp32 — for every
    mesh benchmarks/bf16_meshes.py measures, and names the test that holds it."""
    from benchmarks.bf16_meshes import MESHES

    opening = README.split("\n## ", 1)[0]
    claim = opening.split("render the one-device video", 1)[1]
    assert "bfloat16" in claim and "bit for bit" in claim and "fp32" in claim
    section = README.split("\n## Many GPUs", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.strip().startswith("|")]
    assert "vs one-device bf16" in rows[0] and "vs one-device fp32" in rows[0]
    for name in MESHES:
        assert any(f"`{name}`" in row for row in rows[2:]), name
    assert "benchmarks/bf16_meshes.py" in section and "tests/parallel/test_bf16_meshes.py" in section
    # JAX too: its meshes against its one device, and the limit XLA:CPU leaves at tiny sizes
    jax = section.split("JAX (8 CPU devices", 1)[1].split("\n- ", 1)[0]
    assert "bit for bit" in jax and "ring" in jax and "4096" in jax


def test_the_readme_says_what_the_tiny_model_costs_on_a_cpu_with_jax_and_compile_true():
    """Issue 38 item 12: the JAX section says how the CPU runs the VAE's convolutions, what the
    tiny run's decode and compile cost there and how a repeat run skips the compile (compile_cache=); the
    `compile=true` bullet says what its first step costs on a CPU and where Inductor keeps
    its kernels. Both point at the BENCHMARKS.md section that measured them."""
    benchmarks = (Path(CONF_DIR).parent / "BENCHMARKS.md").read_text()
    heading = "JAX VAE decode on CPU (issue 38)"
    assert f"### {heading}\n" in benchmarks and "benchmarks.jax_cpu_decode" in benchmarks
    jax = README.split("\n## JAX (TPU/GPU/CPU)", 1)[1].split("\n## ", 1)[0]
    cpu = jax.split("- **On a CPU**", 1)[1].split("\n- **", 1)[0]
    assert "backends/jax/cpu_convs.py" in cpu and "TPU and GPU programs" in cpu
    assert "`compile_cache`" in cpu and heading in cpu
    kept = jax.split("- **Compiled programs kept between runs**", 1)[1].split("\n- **", 1)[0]
    assert "compile_cache=off" in kept and "JAX_COMPILATION_CACHE_DIR" in kept and "same bits" in kept
    compile_true = README.split("- `compile=true` runs the hot path", 1)[1].split("\n- ", 1)[0]
    assert "On a CPU" in compile_true and "TORCHINDUCTOR_CACHE_DIR" in compile_true and heading in compile_true


# ------------------------------------------------------------------ issue 38 item 8
def test_the_readme_says_what_has_run_on_a_gpu_and_what_has_not():
    """The H200 run is reported in "Before a big job", which said no GPU had run this code."""
    before = README.split("\n## Before a big job", 1)[1].split("\n## ", 1)[0]
    assert "nothing yet" not in README and "No GPU or TPU has run this code" not in README
    assert "one H200" in before and "2+ GPUs" in before and "TPU" in before


def test_every_tests_path_the_readme_names_exists():
    root = Path(CONF_DIR).parent
    paths = set(re.findall(r"`(tests/[^`\s]+)`", README)) | set(re.findall(r"\((tests/[^)\s]+)\)", README))
    assert len(paths) >= 10, paths
    for path in sorted(paths):
        path = path.split("::")[0].rstrip(".,;:")
        assert list(root.glob(path)), f"README names {path}, which does not exist"


def test_the_launch_examples_coordinator_port_follows_the_formula():
    from parallel_wan.launch import slurm_port

    examples = re.findall(r"job (\d+), \d+ tasks, coordinator [\w.-]+:(\d+)", README)
    assert examples
    for job, port in examples:
        assert int(port) == slurm_port(int(job)), (job, port, slurm_port(int(job)))


# what the built-in tiny model may cost in an example: its default video is 29 GFLOP (~1 s on
# a laptop core); ten times that is still seconds
TINY_EXAMPLE_FLOPS = 300e9


def _tiny_work(raw: dict) -> float:
    from parallel_wan.jobs.job import build_job
    from parallel_wan.memory_plan.compute_time import job_flops
    from parallel_wan.memory_plan.fits import architecture_of

    mesh = raw["mesh"]
    world = int(mesh.get("dp") or 1) * int(mesh.get("cp") or 1) if mesh.get("name") != "auto" else 1
    job = build_job({**raw, "output_dir": raw.get("output_dir") or "unused"}, world)
    return sum(job_flops(e.spec, *architecture_of(e.spec, None)).total for e in job.entries)


@pytest.mark.parametrize("line", [c for c in COMMANDS if "checkpoint_dir" not in c])
def test_every_example_on_the_tiny_model_finishes_in_seconds(line, monkeypatch):
    """Issue 38 item 8: the Serving example asked the tiny CPU server for 832x480 × 81 frames ×
    40 steps (30–90 minutes). Every command on the built-in model does seconds of work."""
    monkeypatch.chdir(Path(CONF_DIR).parent)  # examples/prompts.jsonl
    raw = compose_settings(_settings(line))
    if not raw["model"].get("builtin"):
        return
    assert _tiny_work(raw) <= TINY_EXAMPLE_FLOPS, line


def _requests() -> list[dict]:
    """The Serving section's requests: curl's JSON bodies and -F fields, the SDK's create()."""
    import ast
    import json

    section = README.split("\n## Serving", 1)[1].split("\n## ", 1)[0]
    found = [json.loads(body) for body in re.findall(r"-d '(\{.*?\})'", section)]
    for line in section.splitlines():
        if line.startswith("curl") and " -F " in line:
            found.append(dict(re.findall(r"-F (\w+)=(\S+)", line)))
    for call in re.findall(r"client\.videos\.create\((.*?)\)\n", section, flags=re.S):
        node = ast.parse(f"f({call})").body[0].value
        fields = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
        found.append({**{k: v for k, v in fields.items() if k != "extra_body"}, **fields.get("extra_body", {})})
    return found


def test_every_serving_example_request_finishes_in_seconds_on_the_tiny_server():
    from parallel_wan.serve.fields import request_settings

    section = README.split("\n## Serving", 1)[1].split("\n## ", 1)[0]
    start = re.search(r"python -m parallel_wan\.serve (model=tiny .*?)\s+#", section).group(1).split()
    requests = _requests()
    assert len(requests) >= 3, requests
    for fields in requests:
        fields = {k: v for k, v in fields.items() if k != "input_reference"}
        settings, _, _ = request_settings(fields, fps=16)
        raw = compose_settings([*start, *(f"{k}={v}" for k, v in settings.items() if k != "prompt")])
        assert _tiny_work(raw) <= TINY_EXAMPLE_FLOPS, fields
    words = " ".join(section.split())
    assert "a request costs what the same run costs" in words and "device_tflops=" in words
