"""The dependencies `pyproject.toml` declares are the ones the server needs, in ranges the suite
has passed on (issue 32 §1): a plain `pip install .` or `scripts/serve` (no dev group) gives a
server that starts. `.ci/run` proves both on a fresh clone; these tests say why when it fails."""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

# Reads the source, the documents or the help: the SQLite half of scripts/test runs it.
pytestmark = pytest.mark.any_database

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "multibank"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
LOCK = tomllib.loads((ROOT / "uv.lock").read_text())


def declared() -> dict[str, Requirement]:
    reqs = (Requirement(r) for r in PROJECT["dependencies"])
    return {canonicalize_name(r.name): r for r in reqs}


def locked() -> dict[str, Version]:
    return {canonicalize_name(p["name"]): Version(p["version"]) for p in LOCK["package"]}


def imported_top_level_modules() -> dict[str, str]:
    """Every top-level module `src/` imports, anywhere in a module (functions included), with
    one file that imports it."""
    found: dict[str, str] = {}
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                found.setdefault(name.split(".")[0], str(path.relative_to(ROOT)))
    return found


# The pytest plugin (the `pytest11` entry point) is loaded by a client's pytest, never by the
# server: pytest is a dependency of the client's tests, not of multibank. Only that package may
# import it, and nothing else in src/ imports that package.
PLUGIN_PACKAGE = SRC / "testing"
PLUGIN_ONLY = {"pytest"}


def test_every_module_src_imports_is_a_declared_dependency() -> None:
    owners = packages_distributions()
    deps = declared()
    missing = []
    for module, where in sorted(imported_top_level_modules().items()):
        if module in sys.stdlib_module_names or module in ("multibank", "__future__"):
            continue
        if module in PLUGIN_ONLY:
            continue  # test_only_the_pytest_plugin_imports_pytest
        dists = {canonicalize_name(d) for d in owners.get(module, [])}
        assert dists, f"{module} (imported in {where}) is installed by no distribution"
        if not dists & deps.keys():
            missing.append(f"{module} ({where}) from {sorted(dists)}")
    assert not missing, "imported at run time but not in [project] dependencies: " + ", ".join(
        missing
    )


def test_only_the_pytest_plugin_imports_pytest() -> None:
    for path in SRC.rglob("*.py"):
        in_plugin = path.is_relative_to(PLUGIN_PACKAGE)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                where = path.relative_to(ROOT)
                if name.split(".")[0] in PLUGIN_ONLY:
                    assert in_plugin, f"{where} imports {name}: only the pytest plugin may"
                if name.startswith("multibank.testing"):
                    assert in_plugin, f"{where} imports {name}, which only pytest loads"
    entry = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    assert entry["pytest11"] == {"multibank": "multibank.testing.pytest_plugin"}


def test_every_lower_bound_is_the_locked_version_the_suite_runs_on() -> None:
    versions = locked()
    for name, req in declared().items():
        assert name in versions, f"{name} is declared but not locked: run `uv lock`"
        lows = [Version(s.version) for s in req.specifier if s.operator in (">=", "==")]
        assert lows, f"{req}: no lower bound"
        assert max(lows) == versions[name], (
            f"{req}: its lower bound is not the locked {versions[name]}, the version the suite "
            "passes on; a lower one was never tested"
        )
        assert req.specifier.contains(versions[name]), f"{req} excludes the locked version"


def test_no_dependency_is_held_below_a_newer_release() -> None:
    """src/ uses only what its dependencies publish (tests/test_private_names.py), so none is
    capped: a user takes a dependency's security release the day it ships."""
    for name, req in declared().items():
        capped = [s for s in req.specifier if s.operator in ("<", "<=", "==", "~=", "===")]
        assert not capped, f"{name}: {req} refuses newer releases"


def test_the_installed_versions_are_the_locked_ones() -> None:
    """The suite runs on what the lock says (scripts/bootstrap.sh installs it `--frozen`)."""
    from importlib.metadata import version

    versions = locked()
    for name in declared():
        assert Version(version(name)) == versions[name], name
