"""`src/` stands on the published APIs of the packages it uses (issue 33 §1): it imports no module
or name starting with `_` from another package, reads or sets no private attribute of another
package's objects, swaps no `__class__` and subclasses no class of their internal modules. A minor
release may change any of those without notice, silently changing the server.

The scan is syntactic (`ast`), so it is deliberately strict about attribute access: any `._name`
is counted unless it is taken on `self`, `cls`, or a name the same file defines or imports from
`multibank` (ours). An attribute of one of our own objects reached through another (`self.a._b`)
must then be published by that object (no underscore) — which is also what our house style asks.

`MULTIBANK_PRIVATE_NAMES_SRC` points the scan at another source tree (e.g. another checkout's
`src`), to count what a branch still uses."""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

# Reads the source, the documents or the help: the SQLite half of scripts/test runs it.
pytestmark = pytest.mark.any_database

ROOT = Path(__file__).resolve().parents[1]
SRC = Path(os.environ.get("MULTIBANK_PRIVATE_NAMES_SRC", ROOT / "src")).resolve()
FIRST_PARTY = "multibank"

# Underscore names whose owners' documentation publishes them; each with where it says so.
ALLOWED_ATTRIBUTES = {
    # SQLAlchemy ORM/Core "Row": `Row._mapping`, `Row._asdict()`, `Row._fields`, `Row._tuple()`
    # are documented members (docs.sqlalchemy.org/en/20/core/connections.html#sqlalchemy.engine.Row;
    # the underscore only avoids clashing with column names, as for namedtuple).
    "_mapping",
    "_asdict",
    "_fields",
    "_tuple",
    # collections.namedtuple: `_make`, `_asdict`, `_replace`, `_fields`, `_field_defaults`
    # (docs.python.org/3/library/collections.html#collections.somenamedtuple._make).
    "_make",
    "_replace",
    "_field_defaults",
    # `sys._getframe` is documented in the standard library (docs.python.org/3/library/sys.html).
    "_getframe",
    # `os._exit` is documented (docs.python.org/3/library/os.html#os._exit): exit without cleanup.
    "_exit",
}
ALLOWED_IMPORTS: set[str] = set()

# Modules a package documents as internal although their names carry no underscore. The issue names
# these: SQLAlchemy's `sqlalchemy.util` (its `await_`, its `AsyncAdaptedQueue`) is not part of
# SQLAlchemy's API reference and changes between minor releases.
INTERNAL_MODULES = ("sqlalchemy.util",)


@dataclass(frozen=True, order=True)
class Finding:
    where: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.where}:{self.line}: {self.what}"


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_module(module: str) -> bool:
    return any(is_private(part) for part in module.split("."))


def internal_module(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in INTERNAL_MODULES)


def is_ours(module: str) -> bool:
    return module == FIRST_PARTY or module.startswith(FIRST_PARTY + ".")


def own_names(tree: ast.Module) -> set[str]:
    """Names a module binds at module level to something of ours: its own definitions and the names
    it imports from `multibank`. Names imported from another package are theirs."""
    names = {"self", "cls"}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.ImportFrom) and (node.level > 0 or is_ours(node.module or "")):
            names.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if is_ours(alias.name):
                    names.add(alias.asname or alias.name.split(".")[0])
    for node in tree.body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            for sub in ast.walk(target):
                if isinstance(sub, ast.Name):
                    names.add(sub.id)
    return names


def foreign_bases(tree: ast.Module) -> dict[str, str]:
    """Names imported from another package's private or internal module, with that module."""
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module):
            continue
        if private_module(node.module) or internal_module(node.module):
            for alias in node.names:
                found[alias.asname or alias.name] = node.module
    return found


def scan(path: Path, label: str) -> Iterator[Finding]:
    tree = ast.parse(path.read_text(), str(path))
    ours = own_names(tree)
    internal = foreign_bases(tree)
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if is_ours(node.module):
                continue
            if private_module(node.module) or internal_module(node.module):
                for alias in node.names:
                    yield Finding(label, line, f"from {node.module} import {alias.name}")
                continue
            for alias in node.names:
                if is_private(alias.name) and alias.name not in ALLOWED_IMPORTS:
                    yield Finding(label, line, f"from {node.module} import {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if not is_ours(alias.name) and (
                    private_module(alias.name) or internal_module(alias.name)
                ):
                    yield Finding(label, line, f"import {alias.name}")
        elif isinstance(node, ast.Attribute):
            if node.attr == "__class__" and isinstance(node.ctx, ast.Store):
                yield Finding(label, line, f"{ast.unparse(node)} = … (swaps an object's class)")
                continue
            if not is_private(node.attr) or node.attr in ALLOWED_ATTRIBUTES:
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ours:
                continue
            yield Finding(label, line, ast.unparse(node))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            # getattr(obj, "_name") / setattr(obj, "_name", …) / hasattr / delattr
            if node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) > 1:
                obj, name = node.args[0], node.args[1]
                if (
                    isinstance(name, ast.Constant)
                    and isinstance(name.value, str)
                    and is_private(name.value)
                    and name.value not in ALLOWED_ATTRIBUTES
                    and not (isinstance(obj, ast.Name) and obj.id in ours)
                ):
                    yield Finding(label, line, ast.unparse(node))
                elif (
                    node.func.id == "setattr"
                    and isinstance(name, ast.Constant)
                    and name.value == "__class__"
                ):
                    yield Finding(label, line, f"{ast.unparse(node)} (swaps an object's class)")
        elif isinstance(node, ast.ClassDef):
            for written in node.bases:
                base = written.value if isinstance(written, ast.Subscript) else written
                if isinstance(base, ast.Name) and base.id in internal:
                    yield Finding(
                        label,
                        line,
                        f"class {node.name}({base.id}) subclasses {internal[base.id]}.{base.id}",
                    )
                elif isinstance(base, ast.Attribute) and (
                    is_private(base.attr) or private_module(ast.unparse(base))
                ):
                    yield Finding(label, line, f"class {node.name}({ast.unparse(base)})")


def findings(src: Path = SRC) -> list[Finding]:
    out: list[Finding] = []
    for path in sorted(src.rglob("*.py")):
        out.extend(scan(path, str(path.relative_to(src))))
    return sorted(set(out))


def test_src_takes_no_private_name_from_another_package() -> None:
    assert SRC.is_dir(), f"{SRC} is not a directory"
    found = findings()
    report = "\n".join(str(f) for f in found)
    assert not found, (
        f"{len(found)} private names of other packages used in {SRC} (a minor release may "
        f"change them; use their published API, or allowlist a name its documentation "
        f"publishes, with the reference):\n{report}"
    )


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from fastapi._compat import ModelField\n", "from fastapi._compat import ModelField"),
        ("import starlette._utils\n", "import starlette._utils"),
        ("from fastapi.routing import _ctx\n", "from fastapi.routing import _ctx"),
        ("from sqlalchemy.util.queue import Q\n", "from sqlalchemy.util.queue import Q"),
        ("def f(request):\n    return request._body\n", "request._body"),
        ("def f(conn):\n    conn._transaction = 1\n", "conn._transaction"),
        ("def f(r):\n    return r.state.__private\n", "r.state.__private"),
        ("def f(app):\n    app.router.__class__ = object\n", "app.router.__class__ = …"),
        ("def f(o):\n    return getattr(o, '_x')\n", "getattr(o, '_x')"),
        (
            "from sqlalchemy.util.queue import Q\nclass F(Q[int]):\n    pass\n",
            "class F(Q) subclasses sqlalchemy.util.queue.Q",
        ),
    ],
)
def test_the_scan_finds_each_kind_of_private_use(
    tmp_path: Path, source: str, expected: str
) -> None:
    (tmp_path / "m.py").write_text(source)
    assert any(f.what.startswith(expected) for f in findings(tmp_path)), findings(tmp_path)


def test_the_scan_allows_our_own_and_published_names(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        "from multibank.kernel import db\n"
        "_CACHE = {}\n"
        "class A:\n"
        "    def f(self, row, point):\n"
        "        self._x = row._mapping\n"
        "        _CACHE.clear()\n"
        "        return db._engine, point._replace(x=1), type(self).__name__, A._y\n"
    )
    assert findings(tmp_path) == []
