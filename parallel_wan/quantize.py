"""`python -m parallel_wan.quantize checkpoint_dir=DIR quantize=fp8|int8|nvfp4 output_dir=DIR`: every
expert of a checkpoint (either layout; the built-in model's stored folder is one) written once as
a quantized single file, which `weights_high=` / `weights_low=` / `weights=` read back
(weights/expert_export.py says what the files hold; nvfp4 files are ComfyUI's format). The run's
conventions: --help, --version, a bad setting or checkpoint is one line and exit 2 with nothing
written; the files are written under temporary names and renamed into place together once all
are whole (exit 1 with one line if the disk fails; exit 2 for a NaN/±inf weight), so nothing
half-written is ever left.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from .errors import BadWeights, ConfigError
from .models.experts import OFFICIAL_FOLDERS, SINGLE, setting_of

PROGRAM = "python -m parallel_wan.quantize"
PROGRAM_NAME = "parallel_wan.quantize"  # how its lines start
SETTINGS = ("checkpoint_dir", "quantize", "output_dir")
KINDS = ("fp8", "int8", "nvfp4")
FILE_STEM = {**OFFICIAL_FOLDERS, SINGLE: "model"}  # an expert's file: named as its official folder


def main(argv: list[str]) -> int:
    from .cli import front
    from .entry import refusal

    try:
        settings = _settings(front("quantize", argv))
        ckpt, kind, folder = _checked(settings)
        plans = _plans(ckpt, kind)
        _check_room(folder, plans, kind)
    except ConfigError as exc:
        return refusal(exc, PROGRAM_NAME)
    try:
        paths = _write_all(ckpt, plans, kind, folder)
    except BadWeights as exc:
        return refusal(exc, PROGRAM_NAME)
    except OSError as exc:
        print(
            f"parallel_wan.quantize: error: writing to output_dir={folder} failed ({exc.strerror or exc}); nothing "
            "was written",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        print("parallel_wan.quantize: interrupted; nothing was written", file=sys.stderr)
        return 130
    print(
        f"try them: python -m parallel_wan.run model={_preset(ckpt)} checkpoint_dir={ckpt.root} "
        + " ".join(f"{setting_of('weights', expert)}={path}" for expert, path in paths.items())
    )
    return 0


def _settings(words: list[str]) -> dict[str, str]:
    settings = {}
    for word in words:
        key, eq, value = word.partition("=")
        if not eq or key not in SETTINGS:
            what = f"{word} is not an option" if word.startswith("-") else f"{word} is not a setting"
            raise ConfigError(
                f"{what} of {PROGRAM}; it takes checkpoint_dir=DIR quantize=fp8|int8|nvfp4 output_dir=DIR "
                "(and --help, --version)"
            )
        settings[key] = value
    return settings


def _checked(settings: dict[str, str]):
    """(the checkpoint's description, the kind, the output folder), each checked; ConfigError."""
    from .builtin.stored import cache_home
    from .config.checks import writable_folder
    from .weights.layout import CheckpointError, describe_checkpoint

    if not settings.get("checkpoint_dir"):
        stored = sorted(
            str(p) for p in (cache_home() / "builtin").glob("*-*") if p.is_dir() and not p.name.startswith(".")
        )  # not a folder still being written
        raise ConfigError(
            "checkpoint_dir is missing; give a Wan 2.2 checkpoint folder (diffusers or official "
            "layout) — the built-in models' folders under ~/.cache/parallel_wan/builtin/ are checkpoints "
            "too" + (f" (here: {', '.join(stored)})" if stored else " (the first parallel_wan.run writes them)")
        )
    kind = settings.get("quantize")
    if kind not in KINDS:
        said = "quantize is missing" if kind is None else f"quantize={kind} is not a kind of file this writes"
        raise ConfigError(
            f"{said}; choose quantize=fp8 (float8_e4m3fn) or quantize=int8, one scale per output channel, or "
            "quantize=nvfp4 (ComfyUI's NVFP4 format)"
        )
    if not settings.get("output_dir"):
        raise ConfigError(
            "output_dir is missing; give the folder the expert files go to, e.g. output_dir=/ckpt/Wan2.2-T2V-A14B-fp8"
        )
    folder = Path(writable_folder("output_dir", settings["output_dir"], "e.g. output_dir=/ckpt/Wan2.2-T2V-A14B-fp8"))
    root = os.path.abspath(os.path.expanduser(settings["checkpoint_dir"]))
    try:
        ckpt = describe_checkpoint(root)
    except CheckpointError as exc:
        raise ConfigError(str(exc)) from None
    for expert in ckpt.experts:
        target = folder / _file_name(expert, kind)
        if target.exists():
            raise ConfigError(
                f"output_dir={folder}: {target.name} already exists; remove it or pick another "
                "output_dir (nothing is overwritten)"
            )
    return ckpt, kind, folder


def _file_name(expert: str, kind: str) -> str:
    return f"{FILE_STEM[expert]}_{kind}.safetensors"


def _plans(ckpt, kind: str) -> dict:
    from . import __version__
    from .weights.expert_export import plan, scale_rule

    plans = {}
    for expert in ckpt.experts:
        made = {
            "made_by": f"parallel_wan {__version__}: {PROGRAM}",
            "checkpoint_dir": str(ckpt.root),
            "layout": ckpt.layout,
            "expert": expert,
            "quantize": kind,
            "scales": scale_rule(kind),
            "layers": "the transformer blocks' linear weights (self- and cross-attention q, k, v, o; the FFN's "
            "two); every other tensor as the checkpoint stores it",
            "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        try:
            plans[expert] = plan(ckpt, expert, kind, {"format": "pt", "parallel_wan": json.dumps(made)})
        except ValueError as exc:  # a shard's header the checkpoint check let through
            raise ConfigError(f"checkpoint_dir={ckpt.root}: {exc}") from None
    return plans


def _check_room(folder: Path, plans: dict, kind: str) -> None:
    """The files' total size against the free space where they go, before a byte is written."""
    existing = folder
    while not existing.exists():
        existing = existing.parent
    need, free = sum(p.size for p in plans.values()), shutil.disk_usage(existing).free
    if need > free:
        raise ConfigError(
            f"output_dir={folder}: the {kind} files need {_size(need)} but {_size(free)} are free "
            "there; free some space or pick another output_dir"
        )


def _write_all(ckpt, plans: dict, kind: str, folder: Path) -> dict[str, Path]:
    """Each expert's file under a temporary name in `folder`, then every one renamed into place:
    the files appear together, whole, or not at all."""
    from .weights.expert_export import write

    folder.mkdir(parents=True, exist_ok=True)
    staged: dict[str, tuple[Path, Path]] = {}
    try:
        for expert, plan in plans.items():
            final = folder / _file_name(expert, kind)
            fd, temp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".partial", dir=folder)
            os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 → what open() would give the file
            os.close(fd)
            staged[expert] = (Path(temp), final)
            start = time.perf_counter()
            print(
                f"writing the {expert} expert of the {ckpt.layout}-layout checkpoint {ckpt.root} as {final.name} "
                f"({_size(plan.size)}, {plan.quantized} block linears in {kind})",
                flush=True,
            )
            write(plan, kind, Path(temp))
            print(f"  done in {time.perf_counter() - start:.1f} s", flush=True)
        for temp, final in staged.values():
            os.replace(temp, final)  # atomic: a reader sees no file or the whole file
        _sync_folder(folder)
    except BaseException:
        for temp, _ in staged.values():
            temp.unlink(missing_ok=True)
        raise
    return {expert: final for expert, (_, final) in staged.items()}


def _umask() -> int:
    mask = os.umask(0)  # reading it sets it: put it back at once (this command runs one thread)
    os.umask(mask)
    return mask


def _size(size: int) -> str:
    return f"{size / 1e9:.2f} GB" if size >= 1e9 else f"{size / 1e6:.1f} MB"


def _sync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _preset(ckpt) -> str:
    """The model preset that runs this checkpoint: its architecture's (models/known_architecture.py)."""
    from .models.known_architecture import identify

    tcfg = next(iter(ckpt.transformers.values()))
    return identify(tcfg, ckpt.vae_config) or "…"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
