"""A fresh virtualenv that sees the packages of the environment the tests run in — a venv or a
system Python alike: its site-packages as plain path lines (site.getsitepackages() of this
interpreter, not of the base interpreter that --system-site-packages would expose), so .pth
files such as this checkout's editable install do not apply; its `pip` installs offline with
this environment's setuptools (no build isolation)."""

import os
import pathlib
import site
import subprocess
import sys


def environment_venv(tmp_path):
    """A venv with no packages of its own that sees this environment's site-packages (plain path
    lines, so their .pth files, e.g. this checkout's editable install, do not apply), and a `pip`
    that installs into it offline with this environment's setuptools (no build isolation)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    own = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    user = [site.getusersitepackages()] if site.ENABLE_USER_SITE else []
    paths = [p for p in [*site.getsitepackages(), *user] if os.path.isdir(p)]
    # Sorted after the editable install's own .pth: the venv's package is found first.
    (pathlib.Path(own) / "~environment.pth").write_text("\n".join(paths) + "\n")
    pip = venv / "bin" / "pip"
    pip.write_text(
        f'#!/bin/sh\nif [ "$1" = install ]; then shift; set -- install --no-index --no-build-isolation "$@"; fi\n'
        f'exec "{python}" -m pip "$@"\n'
    )
    pip.chmod(0o755)
    return venv
