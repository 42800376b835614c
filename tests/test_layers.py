"""The layers hold (issue 33 §11), checked over the import graph of `src/multibank` (every import
statement, those inside functions and under `TYPE_CHECKING` included):

- a domain slice (every package of `multibank` that is not the kernel, the HTTP layer or the
  migrations: accounts, ledger, payments, …) imports neither the HTTP layer (`multibank.api`,
  `multibank.portal`, `multibank.simulator`, FastAPI, Starlette) nor an execution strategy: the
  services say what to read and write, and the kernel's one transaction interface says how;
- the kernel imports no domain slice: the tables it owns (idempotency, outbox, server secrets, …)
  live in it, so it can be tested and replaced without the domain;
- (issue 42 §2) every module has a place in one order of layers, `ORDER` below (kernel <
  configuration < programmes < events < customers < ledger < accounts < linked accounts <
  money movement < due work < webhook delivery < reconciliation < audit < the HTTP adapters <
  app < tools), and reaches, directly or through others, nothing above its own; the slices
  import each other in one direction; no module takes another's underscore names.

The graph is read with `ast`, not by importing, so a cycle hidden by a lazy import counts too."""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterator
from graphlib import CycleError, TopologicalSorter
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


# Issue 42 §2: the order of the layers, lowest first. A module may import (directly or through
# others: the check runs on the transitive closure) only modules of its own tier or a lower
# one, and the slices (each tuple of prefixes below) import each other in one direction: no
# cycle, within a tier either. `identities` and `users` are one slice, customers: an identity
# and its root user are made together. The HTTP adapters are three tiers: the simulator may
# use the interface's request plumbing (`api`), the portal both; the interface imports neither.
ORDER: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...] = (
    ("kernel", (("multibank", "multibank.kernel"),)),
    (
        "configuration",
        (("multibank.settings",), ("multibank.observability",), ("multibank.container",)),
    ),
    ("programmes", (("multibank.programmes",),)),
    ("events", (("multibank.webhooks.events", "multibank.webhooks.models"),)),
    (
        "customers",
        (
            ("multibank.kyc",),
            ("multibank.identities", "multibank.users"),
            ("multibank.access",),
            ("multibank.factors",),
        ),
    ),
    ("ledger", (("multibank.ledger",),)),
    ("accounts", (("multibank.accounts",),)),
    ("linked accounts", (("multibank.linked_accounts",),)),
    (
        "money movement",
        (
            ("multibank.cards",),
            ("multibank.beneficiaries",),
            ("multibank.payments",),
            ("multibank.fees",),
        ),
    ),
    ("due work", (("multibank.due_work",),)),
    ("webhook delivery", (("multibank.webhooks",),)),
    ("reconciliation", (("multibank.reconciliation",),)),
    ("audit", (("multibank.audit",),)),
    ("HTTP: the interface", (("multibank.api",),)),
    ("HTTP: the simulator", (("multibank.simulator",),)),
    ("HTTP: the portal and home page", (("multibank.portal",), ("multibank.landing",))),
    ("app", (("multibank.app",), ("multibank.models", "multibank.migrations"))),
    (
        "tools",
        (
            ("multibank.cli", "multibank.__main__"),
            ("multibank.devloop",),
            ("multibank.sandbox_seed",),
            ("multibank.testing",),
        ),
    ),
)
TIER = {p: i for i, (_, slices) in enumerate(ORDER) for units in slices for p in units}
SLICE = {p: units[0] for _, slices in ORDER for units in slices for p in units}
MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}
Graph = dict[str, set[str]]


def place(module: str) -> str | None:
    """The table's longest prefix of `module` (a module, or a package and all it holds)."""
    found = [p for p in TIER if module == p or module.startswith(p + ".")]
    return max(found, key=len) if found else None


def first_party(path: Path) -> set[str]:
    """The modules of `multibank` that `path` imports, inside functions and under TYPE_CHECKING
    too. `from package import module` is an edge to that module, not to the package's
    `__init__`; `from module import name` to the module."""
    me = module_name(path)
    package = me.split(".") if path.name == "__init__.py" else me.split(".")[:-1]
    named: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            named += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            subs = [f"{module}.{alias.name}" for alias in node.names]
            named += [s for s in subs if s in MODULES]
            if not all(s in MODULES for s in subs):
                named.append(module)
    out = set()
    for name in named:
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name.startswith("multibank") and name != me:
            out.add(name)
    return out


def import_graph() -> Graph:
    return {module: first_party(path) for module, path in MODULES.items()}


def upward(graph: Graph) -> list[str]:
    """Each module that reaches (through any chain of imports) a module of a higher tier, with
    the shortest such chain."""
    found = []
    for start in sorted(graph):
        own = TIER[place(start) or ""]
        came_from: dict[str, str | None] = {start: None}
        queue = deque([start])
        while queue:
            module = queue.popleft()
            for target in sorted(graph.get(module, ())):
                if target in came_from:
                    continue
                came_from[target] = module
                if TIER[place(target) or ""] > own:
                    chain = [target]
                    while (before := came_from[chain[-1]]) is not None:
                        chain.append(before)
                    found.append(" -> ".join(reversed(chain)))
                else:
                    queue.append(target)
    return found


def slice_cycle(graph: Graph) -> list[str] | None:
    """A cycle between slices, or None."""
    slices: Graph = {}
    for module, targets in graph.items():
        here = SLICE[place(module) or ""]
        slices.setdefault(here, set()).update(
            SLICE[place(t) or ""] for t in targets if SLICE[place(t) or ""] != here
        )
    try:
        TopologicalSorter(slices).prepare()
    except CycleError as cycle:
        return list(cycle.args[1])
    return None


def test_every_module_has_a_place_in_the_order() -> None:
    assert sorted(m for m in MODULES if place(m) is None) == []


def test_no_module_reaches_a_higher_layer() -> None:
    found = upward(import_graph())
    assert not found, f"{len(found)} modules reach above their layer:\n" + "\n".join(found)


def test_the_slices_import_each_other_in_one_direction() -> None:
    assert slice_cycle(import_graph()) is None


def test_the_order_checks_can_fail() -> None:
    """A chain up through a lower module is found, as is a cycle between two slices of a tier."""
    graph: Graph = {
        "multibank.kernel.db": {"multibank.kernel.ids"},
        "multibank.kernel.ids": {"multibank.ledger.models"},
        "multibank.ledger.models": set(),
        "multibank.cards.models": {"multibank.payments.models"},
        "multibank.payments.models": {"multibank.cards.models"},
    }
    assert upward(graph) == [
        "multibank.kernel.db -> multibank.kernel.ids -> multibank.ledger.models",
        "multibank.kernel.ids -> multibank.ledger.models",
    ]
    assert set(slice_cycle(graph) or ()) == {"multibank.cards", "multibank.payments"}
