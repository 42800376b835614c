"""The layers hold (issue 33 §11), checked over the import graph of `src/multibank` (every import
statement, those inside functions and under `TYPE_CHECKING` included):

- a domain slice (every package of `multibank` that is not the kernel, the HTTP layer or the
  migrations: accounts, ledger, payments, …) imports neither the HTTP layer (`multibank.api`,
  `multibank.portal`, `multibank.simulator`, FastAPI, Starlette) nor an execution strategy: the
  services say what to read and write, and the kernel's one transaction interface says how;
- the kernel imports no domain slice: the tables it owns (idempotency, outbox, server secrets, …)
  live in it, so it can be tested and replaced without the domain.

The graph is read with `ast`, not by importing, so a cycle hidden by a lazy import counts too."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

# Reads the source, the documents or the help: the SQLite half of scripts/test runs it.
pytestmark = pytest.mark.any_database

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "multibank"

KERNEL = "multibank.kernel"
HTTP = ("multibank.api", "multibank.portal", "multibank.simulator", "fastapi", "starlette")
# Modules that exist to pick how statements run; a domain slice that imports one is bound to it.
# (They go with issue 33; naming them here keeps them from coming back under the same names.)
STRATEGIES = (
    "multibank.kernel.direct",
    "multibank.kernel.greenlets",
    "multibank.kernel.sqlite_inline",
    "multibank.api.lean",
)
# The command line (`multibank.cli`, a package of one module per command group) drives the
# server as the API does, so it is no domain slice: it was one module, `cli.py`, which this list
# of packages never saw.
NOT_DOMAIN = {"kernel", "api", "portal", "simulator", "migrations", "cli"}
DOMAIN_SLICES = sorted(
    path.parent.name for path in PACKAGE.glob("*/__init__.py") if path.parent.name not in NOT_DOMAIN
)


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, module) for each module a file imports; `from m import n` yields `m` and `m.n`
    (n may be a submodule), relative imports resolved."""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            yield node.lineno, module
            for alias in node.names:
                yield node.lineno, f"{module}.{alias.name}"


def within(module: str, prefixes: tuple[str, ...]) -> str | None:
    return next((p for p in prefixes if module == p or module.startswith(p + ".")), None)


def violations(slice_prefix: str, forbidden: tuple[str, ...]) -> list[str]:
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        if not within(module_name(path), (slice_prefix,)):
            continue
        for line, module in imports(path):
            hit = within(module, forbidden)
            if hit:
                found.add((str(path.relative_to(SRC)), line, hit))
    return [f"{where}:{line}: imports {what}" for where, line, what in sorted(found)]


def test_the_slices_are_found() -> None:
    assert {"accounts", "ledger", "payments", "fees", "webhooks"} <= set(DOMAIN_SLICES)


@pytest.mark.parametrize("slice_name", DOMAIN_SLICES)
def test_a_domain_slice_imports_no_http_layer_and_no_execution_strategy(slice_name: str) -> None:
    found = violations(f"multibank.{slice_name}", HTTP + STRATEGIES)
    assert not found, "\n".join(found)


def test_the_kernel_imports_no_domain_slice() -> None:
    found = violations(KERNEL, tuple(f"multibank.{name}" for name in DOMAIN_SLICES))
    assert not found, "\n".join(found)


def test_the_kernel_imports_neither_the_settings_nor_the_container() -> None:
    """Issue 42 §1: the settings sit above the kernel (they check values with its parsers), and
    the container above both; the kernel takes what it needs as parameters or a protocol."""
    found = violations(KERNEL, ("multibank.settings", "multibank.container"))
    assert not found, "\n".join(found)


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_names_taken(path: Path) -> Iterator[str]:
    """Each underscore name of another first-party module that `path` takes: imported by name
    (`from multibank.x import _y`), a private module (`multibank._x`), or an attribute of a
    first-party module it imported (`x._y`)."""
    tree = ast.parse(path.read_text(), str(path))
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("multibank"):
            module = node.module or ""
            if any(private(part) for part in module.split(".")):
                yield module
            for alias in node.names:
                if private(alias.name):
                    yield f"{module}.{alias.name}"
                modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("multibank"):
                    modules.add(alias.asname or alias.name.split(".")[0])
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and private(node.attr)
        ):
            yield f"{node.value.id}.{node.attr}"


def test_no_module_takes_another_modules_private_names() -> None:
    """Issue 42 §2: an underscore name is its module's own. Another module that needs it gets a
    public name instead, so a module can change what it keeps to itself without breaking
    another."""
    taken = {
        f"{path.relative_to(SRC)}: {name}"
        for path in PACKAGE.rglob("*.py")
        for name in private_names_taken(path)
    }
    assert taken == set()


def test_a_private_name_taken_is_caught(tmp_path: Path) -> None:
    """The check above can fail: each way of taking another module's underscore name is found."""
    taker = tmp_path / "taker.py"
    taker.write_text(
        "from multibank.sandbox_seed import _Client\n"
        "from multibank._hidden import thing\n"
        "from multibank.accounts import statement_pdf as pdf\n"
        "import multibank.kernel\n"
        "x = pdf._ROW\n"
        "y = multibank.__name__\n"
    )
    assert set(private_names_taken(taker)) == {
        "multibank.sandbox_seed._Client",
        "multibank._hidden",
        "pdf._ROW",
    }
