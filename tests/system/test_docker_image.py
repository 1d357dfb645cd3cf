"""The XPK image (launchers/xpk/Dockerfile) without a container engine: its steps replayed from an
empty folder. The build context is the repository's git-tracked files; COPY copies from it into
an empty image root, WORKDIR moves in it, ENV and ARG defaults apply; the RUN steps after the
first COPY (the project's install) run as written, with `pip` and `python` from a fresh venv
that sees this environment's packages; the RUN steps before it (torch, jax: no file of the
repository) are stood in for by this environment, whose versions must meet their requirements.
Then the image's CMD, from its WORKDIR, makes a tiny video. A real build with buildah:
launchers/xpk/build_local.sh."""

import importlib.metadata
import json
import os
import re
import shlex
import shutil
import subprocess

import pytest
from harness.paths import REPO
from harness.venvs import environment_venv
from packaging.requirements import InvalidRequirement, Requirement

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    from pip._vendor import tomli as tomllib

pytestmark = pytest.mark.system

DOCKERFILE = os.path.join(REPO, "launchers", "xpk", "Dockerfile")
# Options of `pip install` whose next word is a value, not a requirement.
PIP_VALUE_OPTIONS = {
    "-i",
    "--index-url",
    "--extra-index-url",
    "-f",
    "--find-links",
    "-c",
    "--constraint",
    "-r",
    "--requirement",
    "-t",
    "--target",
    "--prefix",
    "--root",
}


def instructions(text):
    """(INSTRUCTION, arguments) per Dockerfile instruction: comments dropped, `\\` lines joined."""
    steps, pending = [], ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        keyword, _, rest = (pending + line).strip().partition(" ")
        steps.append((keyword.upper(), rest.strip()))
        pending = ""
    return steps


def substitute(text, variables):
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: variables.get(m.group(1) or m.group(2), ""), text)


def requirements_of(command):
    """The requirements a `pip install …` shell command names."""
    words = shlex.split(command)
    found = []
    for before, word in zip(["pip", *words], words):
        if word.startswith("-") or before in PIP_VALUE_OPTIONS or word in ("pip", "install"):
            continue
        try:
            found.append(Requirement(word))
        except InvalidRequirement:
            pass
    return found


def tracked_context(dest):
    """The build context as a fresh clone has it: the git-tracked files only."""
    listed = subprocess.run(["git", "-C", REPO, "ls-files", "-z"], capture_output=True, timeout=60)
    if listed.returncode != 0:
        pytest.skip(f"{REPO} is not a git checkout: the build context is its tracked files")
    for name in filter(None, listed.stdout.decode().split("\0")):
        if os.path.isfile(os.path.join(REPO, name)):  # a tracked file deleted in the working tree is not
            os.makedirs(os.path.join(dest, os.path.dirname(name)), exist_ok=True)
            shutil.copy2(os.path.join(REPO, name), os.path.join(dest, name))


def copy_step(arguments, context, root, workdir):
    *sources, target = shlex.split(arguments)
    inside = os.path.join(root, os.path.join(workdir, target).lstrip("/"))
    for source in sources:
        path = os.path.join(context, source)
        assert os.path.exists(path), f"COPY {source}: not in the build context (the repository's tracked files)"
        if os.path.isdir(path):
            shutil.copytree(path, inside, dirs_exist_ok=True)
        else:
            into = (
                os.path.join(inside, os.path.basename(source)) if target.endswith("/") or len(sources) > 1 else inside
            )
            os.makedirs(os.path.dirname(into) or ".", exist_ok=True)
            shutil.copy2(path, into)


def test_the_xpk_image_installs_and_runs_from_what_it_copies(tmp_path):
    context, root = tmp_path / "context", tmp_path / "root"
    root.mkdir()
    tracked_context(context)
    venv = environment_venv(tmp_path)
    # The venv's pip builds with this environment's setuptools (no isolation): as new as asked for.
    with open(context / "pyproject.toml", "rb") as f:
        for requirement in map(Requirement, tomllib.load(f)["build-system"]["requires"]):
            have = importlib.metadata.version(requirement.name)
            assert requirement.specifier.contains(have), (requirement, have)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    variables, workdir, copied, cmd, stood_in = {}, "/", False, None, []
    with open(DOCKERFILE) as f:
        steps = instructions(f.read())
    for keyword, arguments in steps:
        arguments = substitute(arguments, variables) if keyword not in ("RUN", "CMD") else arguments
        if keyword in ("ARG", "ENV"):
            for pair in shlex.split(arguments):
                name, _, value = pair.partition("=")
                variables[name] = value
                if keyword == "ENV":
                    env[name] = value
        elif keyword == "WORKDIR":
            workdir = os.path.join(workdir, arguments)
            os.makedirs(root / workdir.lstrip("/"), exist_ok=True)
        elif keyword == "COPY":
            copy_step(arguments, context, root, workdir)
            copied = True
        elif keyword == "RUN" and not copied:
            # No repository file yet: this environment stands in for the layer.
            for requirement in requirements_of(substitute(arguments, variables)):
                have = importlib.metadata.version(requirement.name)
                assert requirement.specifier.contains(have, prereleases=True), (requirement, have)
                stood_in.append(requirement.name)
        elif keyword == "RUN":
            run = subprocess.run(
                ["/bin/sh", "-c", arguments],
                cwd=root / workdir.lstrip("/"),
                env={**env, **variables},
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert run.returncode == 0, f"RUN {arguments} failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
        elif keyword == "CMD":
            cmd = json.loads(arguments)
        else:
            assert keyword == "FROM", f"{keyword}: this test does not replay it; teach it or keep the Dockerfile simple"
    assert {"torch", "jax"} <= set(stood_in), stood_in
    app = root / workdir.lstrip("/")
    assert cmd[:3] == ["python", "-m", "parallel_wan.run"], cmd

    # The install is the venv's, of the image's folder, from anywhere (conf/ beside the package).
    where = subprocess.run(
        ["python", "-c", "import parallel_wan.run as r; print(r.__file__); print(r.CONF_DIR)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert where.returncode == 0, where.stderr[-3000:]
    assert where.stdout.split() == [str(app / "parallel_wan" / "run.py"), str(app / "conf")], where.stdout

    helped = subprocess.run([*cmd, "--help"], cwd=app, env=env, capture_output=True, text=True, timeout=300)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: parallel-wan"), helped.stderr[-3000:]
    # The image's command as xpk runs it (in WORKDIR, no output_dir=), on a tiny generation.
    made = subprocess.run(
        [*cmd, "mesh=single", "steps=2", "num_frames=5", "height=48", "width=48"],
        cwd=app,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert made.returncode == 0, made.stderr[-4000:]
    videos = list(app.glob("outputs/*/video.mp4"))
    assert len(videos) == 1 and videos[0].stat().st_size > 0, videos
    sidecar = json.loads(videos[0].with_suffix(".json").read_text())
    assert sidecar["config"]["backend"] == "jax" and sidecar["frames_shape"] == [5, 48, 48, 3], sidecar
