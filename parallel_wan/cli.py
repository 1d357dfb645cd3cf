"""What every entry point does with the words that are not settings: `--help`, `--version`, and
for `parallel_wan.run` (the `parallel-wan` script) `--nproc N` and `--cfg job`. Settings are
Hydra's `key=value` words and go to config/compose.py; this module never composes them.

The help texts live here, side by side, so they name the same settings and point at each other;
tests/cli/test_cli.py composes every setting they show, so a renamed setting breaks the test, not
the help.
"""

from __future__ import annotations

import os
import sys

PROGRAMS = {
    "run": "python -m parallel_wan.run",
    "plan": "python -m parallel_wan.plan",
    "doctor": "python -m parallel_wan.doctor",
    "launch": "python -m parallel_wan.launch",
    "serve": "python -m parallel_wan.serve",
    "quantize": "python -m parallel_wan.quantize",
}

_OTHERS = """Other entry points:
  parallel-wan / python -m parallel_wan.run   make videos
  python -m parallel_wan.plan                 per-device memory of a run, before it runs (no weights read)
  python -m parallel_wan.doctor               check this machine (devices, attention kernel, NCCL, plan)
  python -m parallel_wan.launch               what a process started here would see (rank, world, launcher)
  python -m parallel_wan.serve                serve videos over HTTP (OpenAI's Videos API), the model loaded once
  python -m parallel_wan.quantize             write a checkpoint's experts as FP8/INT8/NVFP4 files (weights_high= …)
Every one takes --help and --version; README.md has the whole story."""

HELP = {
    "run": f"""usage: parallel-wan [--nproc N] [key=value ...]
       python -m parallel_wan.run [key=value ...]
       torchrun --nproc-per-node N -m parallel_wan.run [key=value ...]

Make Wan 2.2 videos: text-to-video, image-to-video, on one device or split across many (PyTorch
under torchrun, or JAX on a device mesh), with the same settings. With no settings it runs the
built-in tiny model (random weights, nothing downloaded) and writes outputs/<date>_<time>/video.mp4.

Most used settings (every one: python -m parallel_wan.run --cfg job):
  model=wan2.2_t2v_a14b checkpoint_dir=/ckpt/Wan2.2-T2V-A14B   model preset and its weights (either layout)
  prompt="a corgi surfing at sunset" negative_prompt="blurry"  what to make
  image=first_frame.png                                         the first frame (I2V, TI2V)
  num_frames=81 height=720 width=1280 steps=40 seed=7           the video and the sampling
  guidance_high=4 guidance_low=3                                each expert's CFG scale
  prompts=examples/prompts.jsonl                                many videos from one load (re-run resumes)
  mesh=dp2_cp4 backend=jax                                      how the work is split; JAX instead of PyTorch
  memory=sharded cache=magcache lora=my_lora.safetensors        memory mode, step cache, LoRA
  model=wan2.2_t2v_a14b_lightning                               4-step Lightning recipe
  output_dir=outputs/run1 save_frames=true                      where the video and its sidecar go

Options:
  --nproc N     start N processes on this machine (torchrun --standalone --nproc-per-node N),
                then exit as the first rank that stopped: its line once, its exit code
                (torchrun's own flag is --nproc-per-node: its --nproc is ambiguous and refused)
  --cfg job     print every setting as the run would see it, and exit
  -h, --help    this text;  -V, --version  the version

Exit codes: 0 done, 1 failed (one line says why), 2 a bad setting or input (nothing ran),
75 preempted (state saved: run it again to resume), 130 Ctrl-C.

{_OTHERS}""",
    "plan": f"""usage: python -m parallel_wan.plan device_memory_gb=N [device_tflops=T] [key=value ...]

Print a run's memory per device before it runs — weights, the denoising loop, the text encoder,
the VAE decode, the peak of each phase — and whether it fits in N GB, with what to try when it
does not; then its compute per device and roughly how long it takes on this machine's device
(measured) and, with device_tflops=T, on a device of T dense TFLOP/s (e.g. 989: H100 SXM bf16).
The same settings and checks as parallel_wan.run; no weights and no image are read (a preset's
architecture is known; checkpoint_dir= reads only its configs).

Examples:
  python -m parallel_wan.plan model=wan2.2_t2v_a14b mesh=dp2_cp4 device_memory_gb=80 device_tflops=989
  python -m parallel_wan.plan model=wan2.2_i2v_a14b memory=swap height=480 width=832 device_memory_gb=24
  python -m parallel_wan.plan model=wan2.2_ti2v_5b mesh=cp4 memory=sharded device_memory_gb=40

Exit codes: 0 fits, 1 does not fit, 2 a bad setting.

{_OTHERS}""",
    "doctor": f"""usage: python -m parallel_wan.doctor [key=value ...]
       torchrun --nproc-per-node N -m parallel_wan.doctor [key=value ...]

Check this machine before renting a big job, without loading weights: the devices torch sees and
the one this process takes, the attention kernel sequence-parallel attention will run (run once on
a small input; a slow fallback is a loud WARNING), whether the process group (NCCL, gloo on CPU)
starts and one all_reduce completes, the mesh and its launch command (under torchrun: a PROBLEM
when the processes started are not the mesh's world, which the run refuses), and the memory
planner's verdict for this device's memory. Under torchrun rank 0 reports; another rank prints
only its problems, tagged [rank r/world].

Examples:
  python -m parallel_wan.doctor model=wan2.2_t2v_a14b mesh=dp2_cp4
  torchrun --nproc-per-node 8 -m parallel_wan.doctor model=wan2.2_t2v_a14b mesh=dp2_cp4 dtype=bfloat16

Exit codes: 0 ready, 1 a problem (each on a line starting PROBLEM), 2 a bad setting.

{_OTHERS}""",
    "serve": f"""usage: python -m parallel_wan.serve [key=value ...] [host=H] [port=P] [storage_dir=DIR]
       torchrun --standalone --nproc-per-node N -m parallel_wan.serve [key=value ...]

Load the model once and serve OpenAI's Videos API: POST /v1/videos, poll GET /v1/videos/ID,
download GET /v1/videos/ID/content, DELETE to cancel; GET / is a page to try it. The run settings
given here (model, checkpoint, mesh, memory, dtype, cache, LoRA, …) hold for every request; a
request sets its prompt, size, frames, steps, seed, guidance and image. The queue and the videos
live in storage_dir (SQLite): nothing accepted is lost, SIGTERM saves the running job (exit 75)
and a restart resumes it. Rank 0 alone listens; PARALLEL_WAN_API_KEY set: every endpoint but
/health needs Authorization: Bearer KEY.

Server settings: host=127.0.0.1 port=8000 storage_dir=outputs/serve max_body_mb=32
  served_model_names= max_queued= keep_hours= queue_url=postgresql://… lease_s=60
  lora_dir=FOLDER (LoRAs a request names) max_batch=1 batch_wait_s=0 (compatible requests run
  together: README "Serving")

Examples:
  python -m parallel_wan.serve model=tiny steps=4
  torchrun --standalone --nproc-per-node 8 -m parallel_wan.serve model=wan2.2_t2v_a14b \
      checkpoint_dir=/ckpt/Wan2.2-T2V-A14B mesh=dp2_cp4
  XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m parallel_wan.serve backend=jax mesh=dp2_cp4

Exit codes: 75 stopped by SIGTERM/SIGUSR1 (start it again to resume), 1 failed (a rank is gone),
2 a bad setting or the port is taken.

{_OTHERS}""",
    "quantize": f"""usage: python -m parallel_wan.quantize checkpoint_dir=DIR quantize=fp8|int8|nvfp4 output_dir=DIR

Write every expert of a checkpoint (diffusers or official layout) once as a quantized single file:
each transformer block's linear weights in float8_e4m3fn or int8 with one float32 scale per output
channel (what quantize=fp8|int8 does at load), everything else as stored, official names
(LightX2V's layout); quantize=nvfp4 writes ComfyUI's NVFP4 format (e2m1 pairs, an e4m3 scale per
16 inputs, a float32 scale per tensor), which ComfyUI reads too. Runs then read them with
weights_high= / weights_low= (A14B) or weights= (TI2V-5B) and give the video of quantize= on the
checkpoint (fp8/int8; an nvfp4 file's per-tensor scale rounds slightly otherwise than at load).
One tensor at a time: memory holds one tensor, not the expert. The files appear whole or not at
all; nothing is overwritten. The built-in models' folders under ~/.cache/parallel_wan/builtin/
are checkpoints too.

Examples:
  python -m parallel_wan.quantize checkpoint_dir=/ckpt/Wan2.2-T2V-A14B quantize=fp8 output_dir=/ckpt/T2V-A14B-fp8
  python -m parallel_wan.run model=wan2.2_t2v_a14b checkpoint_dir=/ckpt/Wan2.2-T2V-A14B \\
      weights_high=/ckpt/T2V-A14B-fp8/high_noise_model_fp8.safetensors \\
      weights_low=/ckpt/T2V-A14B-fp8/low_noise_model_fp8.safetensors

Exit codes: 0 written, 1 the disk failed, 2 a bad setting, checkpoint or weight (NaN/inf), 130
Ctrl-C; nothing is left behind by a failure.

{_OTHERS}""",
    "launch": f"""usage: python -m parallel_wan.launch [first-host HOSTLIST]

Print who a process started here would be: its rank, the world size, its rank on the node and the
coordinator, from torchrun, JAX, TPU/XPK or SLURM variables (the order parallel_wan.run reads them).
`first-host HOSTLIST` prints the first host of a SLURM host list (the SLURM scripts use it).

Examples:
  python -m parallel_wan.launch
  srun -N2 --ntasks-per-node 4 python -m parallel_wan.launch
  python -m parallel_wan.launch first-host 'gpu[07-09,12]'

{_OTHERS}""",
}


def version_line() -> str:
    from . import __version__

    return f"parallel_wan {__version__}"


def front(program: str, argv: list[str]) -> list[str]:
    """Handle `program`'s flags in `argv` and return the rest (its settings). --help and
    --version print and exit 0; a flag the program does not have exits 2 with one line."""
    if any(a in ("-h", "--help") for a in argv):
        print(HELP[program])
        sys.exit(0)
    if any(a in ("-V", "--version") for a in argv):
        print(version_line())
        sys.exit(0)
    if program != "run":
        return argv
    nproc, rest = _take_nproc(argv)
    if rest[:2] == ["--cfg", "job"]:
        _print_settings(rest[2:])
        sys.exit(0)
    flags = [a for a in rest if a.startswith("-")]
    if flags:
        hint = (
            '; many videos in one run: prompts=FILE (README "Prompt files")' if flags[0] in ("-m", "--multirun") else ""
        )
        _refuse(
            f"{flags[0]} is not an option of {PROGRAMS[program]}; it takes --nproc N, --cfg job, --help, "
            f"--version and key=value settings{hint}"
        )
    if nproc is not None and nproc > 1:
        _start_ranks(nproc, rest)
    return rest


def _take_nproc(argv: list[str]) -> tuple[int | None, list[str]]:
    """(N, the other words) for `--nproc N`, `--nproc=N`, `--nproc-per-node N` (or its `_` spelling)."""
    names = ("--nproc", "--nproc-per-node", "--nproc_per_node")
    nproc, rest, words = None, [], iter(argv)
    for word in words:
        name, eq, value = word.partition("=")
        if name not in names:
            rest.append(word)
            continue
        if not eq:
            value = next(words, None)
        if value is None or not value.isdigit() or int(value) < 1:
            _refuse(
                f"{name} {value if value is not None else ''}".rstrip() + " must be followed by a number of "
                "processes ≥ 1, e.g. --nproc 4"
            )
        nproc = int(value)
    if nproc is not None and "LOCAL_RANK" in os.environ:
        _refuse(
            f"--nproc {nproc} starts torchrun itself, but this process was already started by a launcher "
            "(LOCAL_RANK is set); drop --nproc"
        )
    return nproc, rest


def _start_ranks(nproc: int, settings: list[str]) -> None:
    """Start N ranks of parallel_wan.run as torchrun would (launch/nproc.py), and exit as the
    first rank that stopped: its one line, once, and its code (75 after a preemption). A setting
    that cannot mean N processes is refused first, before any starts."""
    from .backends.capabilities import capabilities
    from .config import ConfigError, backend_name
    from .config.compose import compose_settings

    try:
        backend = backend_name(compose_settings(settings))
    except ConfigError as exc:
        _refuse(str(exc))
    if backend != "auto" and capabilities(backend).single_controller:
        _refuse(
            f"--nproc {nproc} with backend={backend}: JAX runs one process per host, which drives all of its devices; "
            "drop --nproc (python -m parallel_wan.run backend=jax mesh=…), or use backend=torch for one process "
            "per device"
        )
    print(
        f"parallel_wan: starting {nproc} processes: torchrun --standalone --nproc-per-node {nproc} "
        f"-m parallel_wan.run {' '.join(settings)}".rstrip(),
        file=sys.stderr,
        flush=True,
    )
    from .launch.nproc import run_ranks

    sys.exit(run_ranks(nproc, settings))


def _print_settings(overrides: list[str]) -> None:
    from omegaconf import OmegaConf

    from .config import ConfigError
    from .config.compose import compose_settings

    try:
        print(OmegaConf.to_yaml(compose_settings(overrides)), end="")
    except ConfigError as exc:
        _refuse(str(exc))


def _refuse(message: str) -> None:
    from .entry import refuse

    refuse(message)
