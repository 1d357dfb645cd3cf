"""Docstrings, comments and the docs cite files that exist: a path to a .py or .md file in the
package, the benchmarks, README.md or docs/ names a file of this repository (a moved or deleted
file leaves no stale pointer behind). Files of other projects are named with their project
(the official `wan/…` package, diffusers' `scripts/…`, MagCache's repository, SageAttention's
`core.py`); NAME, DIR, … are placeholders."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CITED = re.compile(r"[\w./-]*[\w-]+\.(?:py|md)\b")
# other projects' files, cited as theirs
FOREIGN = re.compile(r"^(wan/|scripts/|MagCache|core\.py$|vae2_2\.py$|setup\.py$)")


PLACEHOLDERS = {"NAME", "DIR", "STEM", "PATH", "OUTPUT_DIR", "FILE", "FOLDER"}
WRITTEN = {"BENCHMARKS_rows.md"}  # files our commands write (the GPU acceptance command's rows)


def _placeholder(ref: str) -> bool:
    parts = ref.split("/")
    return parts[-1] in WRITTEN or any(part.split(".")[0] in PLACEHOLDERS for part in parts)


def _sources():
    yield from (ROOT / "parallel_wan").rglob("*.py")
    yield from (ROOT / "benchmarks").rglob("*.py")
    yield from (ROOT / "docs").rglob("*.md")
    yield ROOT / "README.md"
    yield ROOT / "BENCHMARKS.md"


def stale_citations() -> list[str]:
    files = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if ".git" not in p.parts and p.is_file()]
    names = {f.rsplit("/", 1)[-1] for f in files}
    stale = []
    for path in _sources():
        text = path.read_text()
        for m in CITED.finditer(text):
            ref = m.group(0).lstrip("./")
            if "://" in text[max(0, m.start() - 80) : m.start()].split()[-1:][0:1] or FOREIGN.match(ref):
                continue
            if _placeholder(ref):
                continue
            found = any(f == ref or f.endswith("/" + ref) for f in files) if "/" in ref else ref in names
            if not found:
                stale.append(f"{path.relative_to(ROOT)}:{text[: m.start()].count(chr(10)) + 1}: {ref}")
    return stale


def test_every_cited_file_exists():
    assert stale_citations() == []
