"""A job: the generations one command makes. Without `prompts=` it is the command line's one
generation (outputs video.mp4 + video.json, as always); with `prompts=FILE` one entry per line
of the file, each written as NAME.mp4 + NAME.json. Every entry is resolved and checked here,
before anything loads: a bad line stops the job with its line number and nothing runs.

Cheap: no torch, no jax (the checks read settings, headers and small files only).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from ..config import ConfigError, RunSpec, resolve
from .keys import result_key
from .prompt_file import read_prompt_file
from .share import array_share, share_of

SINGLE_NAME = "video"


@dataclass(frozen=True)
class Entry:
    name: str  # NAME.mp4 / NAME.json (a single run: video.mp4, or video_000.mp4 … for a prompt batch)
    spec: RunSpec
    key: str  # keys.result_key(spec)
    line: int | None = None  # its line in the prompt file; None: the command line's generation


@dataclass(frozen=True)
class Job:
    entries: tuple[Entry, ...]  # this process's share, in file order
    output_dir: str
    prompts_file: str | None = None
    total: int = 1  # entries in the whole file
    share: tuple[int, int] | None = None  # (index, count) of a SLURM array task
    first: RunSpec | None = None  # the file's first entry's settings (an array task may have no entry)
    fresh_output: bool = False  # output_dir is the single run's default outputs/<date_time>: claim a new folder

    @property
    def base(self) -> RunSpec:
        """The settings every entry shares (model, checkpoint, mesh, memory, …): the first entry's."""
        return self.entries[0].spec if self.entries else self.first

    @property
    def single(self) -> bool:
        return self.prompts_file is None


def prompts_setting(raw: dict) -> str | None:
    value = raw.get("prompts")
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ConfigError(f"prompts={value!r} must be the path of a prompt file (one prompt per line, or JSON Lines)")
    return os.path.abspath(os.path.expanduser(value))


def check_no_prompt_beside(raw: dict, prompts_file: str) -> None:
    """Every line of a prompt file gives its video's prompt, so a `prompt=` on the command line
    would be ignored without a word: refused (told from conf/config.yaml's default prompt — the
    same text given explicitly changes nothing either way)."""
    from ..config.checks import default_value

    if raw.get("prompt") != default_value("prompt"):
        raise ConfigError(
            f"prompt={raw.get('prompt')!r} was given beside prompts={prompts_file}, whose lines give "
            "every video its prompt (prompt= would be ignored); drop prompt=, or add it to the file "
            "as a line"
        )


def default_output_dir(raw: dict, prompts_file: str) -> dict:
    """A prompt-file job without output_dir writes to outputs/<file name without suffix>, the
    same folder every time: running the command again resumes it."""
    if raw.get("output_dir") not in (None, ""):
        return raw
    stem = os.path.splitext(os.path.basename(prompts_file))[0] or "prompts"
    return {**raw, "output_dir": os.path.join("outputs", stem)}


def build_job(raw: dict, world_size: int, node_size: int | None = None, env=os.environ, check=None) -> Job:
    """The job of `raw` (composed settings) for a world of `world_size`; `check(spec)` runs the
    checkpoint-side checks of each entry (run.validate_job passes preflight's). Raises ConfigError;
    an entry's error starts with `prompts=FILE line N:`."""
    check = check or (lambda spec: None)
    path = prompts_setting(raw)
    if path is None:
        spec = resolve(raw, world_size, node_size)
        check(spec)
        return Job(
            (Entry(SINGLE_NAME, spec, result_key(spec)),),
            spec.output.dir,
            fresh_output=raw.get("output_dir") in (None, ""),
        )
    check_no_prompt_beside(raw, path)
    raw = default_output_dir(raw, path)
    file_entries = read_prompt_file(path)
    share = array_share(env)  # checked before the entries: a bad array setting is one line too
    entries, names, mesh = [], {}, None
    for item in file_entries:
        fields = {k: v for k, v in item.fields.items() if k != "name"}
        entry_raw = {**raw, **fields}
        if mesh is not None:  # one mesh for the whole job: the first entry's (mesh=auto decides it there)
            entry_raw["mesh"] = mesh
        try:
            spec = resolve(entry_raw, world_size, node_size)
            check(spec)
        except ConfigError as exc:
            raise ConfigError(f"prompts={path} line {item.line}: {exc}", setting=exc.setting) from None
        if mesh is None:
            m = spec.mesh
            mesh = m.to_dict()
        key = result_key(spec)
        name = item.fields.get("name") or f"{item.line:04d}-{key[:8]}"
        if name in names:
            raise ConfigError(
                f"prompts={path} line {item.line}: name {name!r} is also the name of line {names[name]}; "
                "give every entry its own name (NAME.mp4 and NAME.json would be overwritten)"
            )
        names[name] = item.line
        entries.append(Entry(name, spec, key, item.line))
    mine = share_of(entries, share)
    return Job(tuple(mine), entries[0].spec.output.dir, path, len(entries), share, entries[0].spec)


def with_output_dir(job: Job, output_dir: str) -> Job:
    entries = tuple(replace(e, spec=e.spec.replace(output_dir=output_dir)) for e in job.entries)
    return replace(job, entries=entries, output_dir=output_dir)
