"""What each documented install brings: `.[dev]` every test's packages, keras-hub among them, with
one TensorFlow package; `.[jax]` and `.[jax-hub]` no TensorFlow; CI the README's install; and
the versions the README names, the ones the bounds admit and this environment holds."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from tests import extras

README = (extras.ROOT / "README.md").read_text()
GETTING_STARTED = (extras.ROOT / "docs" / "getting-started.md").read_text()
CI = (extras.ROOT / ".ci" / "run").read_text()
TENSORFLOWS = {"tensorflow", "tensorflow-cpu"}  # two packages, one `tensorflow` module
TEXT = "tensorflow-text"  # keras-hub's, which requires the full `tensorflow` package
# The libraries whose versions the README's table names, and the distributions each comes as.
BOUNDED = {
    "TensorFlow": ("tensorflow", "tensorflow-cpu"),
    "Keras": ("keras",),
    "JAX": ("jax",),
    "keras-hub": ("keras-hub",),
}


def ci_installs() -> list[tuple[str, str]]:
    """(interpreter, what it installs) for each `install` line of .ci/run."""
    return re.findall(r"^install (\S+) (.+?)\s*(?:#.*)?$", CI, flags=re.MULTILINE)


def documented_extras() -> set[str]:
    """Every `.[extras]` the README, the install guide, environment.yml and .ci/run name."""
    text = README + GETTING_STARTED + CI + (extras.ROOT / "environment.yml").read_text()
    return set(re.findall(r"\.\[([\w,-]+)\]", text))


def test_dev_brings_keras_hub_with_the_full_tensorflow_package_only():
    dev = extras.names("dev")
    assert "keras-hub" in dev, '`pip install -e ".[dev]"` must run the keras-hub tests too'
    assert dev & TENSORFLOWS == {"tensorflow"}, dev & TENSORFLOWS


def test_no_documented_install_puts_both_tensorflow_packages_in_one_environment():
    for listed in documented_extras():
        names = extras.names(*listed.split(","))
        assert len(names & TENSORFLOWS) <= 1, f'".[{listed}]" installs {names & TENSORFLOWS}'
        if "keras-hub" in names:
            assert "tensorflow" in names, f'".[{listed}]": keras-hub needs the full tensorflow'


@pytest.mark.parametrize("extra", ["jax", "jax-hub"])
def test_the_jax_extras_bring_no_tensorflow(extra):
    names = extras.names(extra) | {canonicalize_name(d) for d in extras.PROJECT["dependencies"]}
    assert "jax" in extras.names(extra)
    assert not {n for n in names if n.startswith("tensorflow")}, names
    assert "keras-hub" not in names  # its tensorflow-text requires TensorFlow


def test_jax_hub_lists_keras_hubs_requirements_but_tensorflow_text():
    try:
        wanted = importlib.metadata.requires("keras-hub") or []
    except importlib.metadata.PackageNotFoundError:
        pytest.skip('keras-hub is not installed: python -m pip install -e ".[dev]"')
    listed = {canonicalize_name(r.name): r for r in extras.requirements("jax-hub")}
    listed.update(
        (canonicalize_name(r.name), r) for r in map(Requirement, extras.PROJECT["dependencies"])
    )
    for requirement in map(Requirement, wanted):
        name = canonicalize_name(requirement.name)
        if name == TEXT or (requirement.marker and "extra" in str(requirement.marker)):
            continue
        assert name in listed, f"jax-hub lacks keras-hub's requirement {requirement}"
        if name in extras.names("jax-hub"):
            assert listed[name].specifier == requirement.specifier, (listed[name], requirement)


def test_the_readme_and_the_guide_give_one_line_for_keras_hub_on_jax():
    hub = next(r for r in extras.PROJECT["optional-dependencies"]["hub"] if "keras-hub" in r)
    line = f'python -m pip install -e ".[jax-hub]" && python -m pip install --no-deps "{hub}"'
    assert line in README
    assert line in GETTING_STARTED


def test_ci_installs_the_readmes_packages_and_nothing_beside():
    installs = ci_installs()
    assert [args for python, args in installs if python == ".venv/bin/python"] == ['-e ".[dev]"']
    assert 'python -m pip install -e ".[dev]" && pytest' in README
    for _, args in installs:  # the environment without TensorFlow is the guide's JAX-only one
        assert f"python -m pip install {args}" in README + GETTING_STARTED, args


def test_a_dev_install_has_keras_hub():
    if not extras.installed_but("dev", "keras-hub"):
        pytest.skip('not a ".[dev]" install')
    assert importlib.util.find_spec("keras_hub"), 'python -m pip install -e ".[dev]"'


def versions_named(text: str) -> dict[str, tuple[str, str]]:
    """{library: (the version the suite runs on, the bound)} from a page's versions table."""
    rows = re.findall(r"^\| ([\w-]+) \| ([\d.]+) \| `([^`]+)` \|$", text, flags=re.MULTILINE)
    return {library: (version, bound) for library, version, bound in rows}


def declared_bounds(library: str) -> set[str]:
    """Every bound pyproject.toml gives the library, in its dependencies and its extras."""
    lines = extras.PROJECT["dependencies"] + [
        line for listed in extras.PROJECT["optional-dependencies"].values() for line in listed
    ]
    return {
        str(requirement.specifier)
        for requirement in map(Requirement, lines)
        if canonicalize_name(requirement.name) in BOUNDED[library]
    }


def test_the_readme_and_the_guide_name_the_versions_the_suite_runs_on():
    named = versions_named(README)
    assert set(named) == set(BOUNDED), sorted(named)
    assert versions_named(GETTING_STARTED) == named, "README and getting-started disagree"
    assert "| Python | 3.11 (CI's) |" in README and "| Python | 3.11 (CI's) |" in GETTING_STARTED
    for library, (version, bound) in named.items():
        assert declared_bounds(library) == {str(SpecifierSet(bound))}, (library, bound)
        assert SpecifierSet(bound).contains(version), f"{library} {version} is outside {bound}"
        for distribution in BOUNDED[library]:
            try:
                installed = importlib.metadata.version(distribution)
            except importlib.metadata.PackageNotFoundError:
                continue
            # A patch release inside the bound is the same series, whose private names the
            # probe (tests/worker/test_keras_internals.py) checks on every run.
            assert _series(installed) == _series(version), (
                f"the README names {library} {version}, and this environment has {installed}: "
                "name the version the suite runs on in the README and docs/getting-started.md"
            )


def _series(version: str) -> tuple[str, ...]:
    return tuple(version.split(".")[:2])
