"""The files a new user installs from say what the README promises."""

from __future__ import annotations

import pathlib
import tomllib

import yaml

ROOT = pathlib.Path(__file__).parent.parent


def test_environment_yml_is_a_conda_environment_installing_this_checkout():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert "python=3.11" in env["dependencies"] and "pip" in env["dependencies"]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert pip == ["-e .[dev]"]


def test_pyproject_declares_the_command_the_two_tensorflow_builds_and_jax():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["gpk"] == "gpu_parallel_kit.cli:main"
    extras = project["optional-dependencies"]
    assert extras["cpu"][0].startswith("tensorflow-cpu>=2.21")
    assert extras["gpu"][0].startswith("tensorflow[and-cuda]>=2.21")
    assert extras["jax"][0].startswith("jax>=")
    assert "gpu_parallel_kit[jax,test,hub,docs]" in extras["dev"]  # CI runs the JAX tests too
    assert not any(d.startswith("tensorflow") for d in project["dependencies"])  # JAX-only works


def test_readme_opens_with_the_two_commands():
    head = (ROOT / "README.md").read_text().split("## ")[0]
    assert 'python -m pip install -e ".[dev]" && gpk demo' in head
    assert 'python -m pip install -e ".[dev]" && pytest' in head
