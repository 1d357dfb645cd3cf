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
    words = words[words.index("parallel_wan.run") + 1:]
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
    for feature in ("Ulysses", "CFG parallel", "MagCache", "Lightning", "prompt files", "resume", "SLURM", "XPK",
                    "Not yet"):
        assert feature in opening, feature
    assert "land" not in opening  # promises of what is to come belong in the issues, not the opening


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
