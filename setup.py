"""Only what pyproject.toml cannot say statically: conf/ stays at the repository top, where users
look for it, and a wheel carries it as the package `parallel_wan.conf` (run.py reads the
repository's copy first, then the installed one)."""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["parallel_wan", "parallel_wan.*"]) + ["parallel_wan.conf"],
    package_dir={"parallel_wan.conf": "conf"},
    package_data={"parallel_wan.conf": ["*.yaml", "*/*.yaml"]},
)
