"""Where the Hydra configs are: the repository's conf/ (a source checkout or an editable
install), else the copy a wheel installs as parallel_wan/conf (setup.py). A leaf module: the
config checks and the entry points both read it."""

import os


def conf_dir() -> str:
    package = os.path.dirname(os.path.abspath(__file__))
    repository = os.path.join(os.path.dirname(package), "conf")
    return repository if os.path.isfile(os.path.join(repository, "config.yaml")) else os.path.join(package, "conf")
