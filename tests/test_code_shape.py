"""Issue 42 §4: no function in `src/` runs over 80 lines or takes more than 8 parameters without
a reason written beside it, as a comment on the line right above the function (above its
decorators): `# Over 80 lines: ...` or `# Over 8 parameters: ...`. A route whose parameters are
the interface's query filters, or a record of a wire body, is a reason; "it grew" is not."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

# Reads the source: the SQLite half of scripts/test runs it.
pytestmark = pytest.mark.any_database

SRC = Path(__file__).resolve().parents[1] / "src" / "multibank"
MAX_LINES = 80
MAX_PARAMETERS = 8


def parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = node.args
    named = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    if named and named[0].arg in ("self", "cls"):
        named = named[1:]
    return len(named) + (a.vararg is not None) + (a.kwarg is not None)


def unexplained(source: str, name: str) -> Iterator[str]:
    """`name:line function (what it passes)` for each function of `source` over a bound with no
    reason on the line above it."""
    lines = source.splitlines()
    for node in ast.walk(ast.parse(source, name)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        above = lines[first - 2].strip() if first >= 2 else ""
        length = (node.end_lineno or node.lineno) - node.lineno + 1
        if length > MAX_LINES and not above.startswith("# Over 80 lines:"):
            yield f"{name}:{node.lineno} {node.name} ({length} lines)"
        count = parameters(node)
        if count > MAX_PARAMETERS and not above.startswith("# Over 8 parameters:"):
            yield f"{name}:{node.lineno} {node.name} ({count} parameters)"


def test_no_function_is_long_or_wide_without_a_reason() -> None:
    found = [
        problem
        for path in sorted(SRC.rglob("*.py"))
        if "migrations" not in path.parts
        for problem in unexplained(path.read_text(), str(path.relative_to(SRC)))
    ]
    assert found == [], "\n".join(found)


def test_the_check_can_fail() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(81))
    source = (
        f"def long():\n{body}\n\n"
        "def wide(a, b, c, d, e, f, g, h, i):\n    pass\n\n"
        "class C:\n    def method(self, a, b, c, d, e, f, g, h):\n        pass\n\n"
        "# Over 8 parameters: the interface's nine query filters.\n"
        "@route\nasync def filters(a, b, c, d, e, f, g, h, i):\n    pass\n"
    )
    assert list(unexplained(source, "m.py")) == [
        "m.py:1 long (82 lines)",
        "m.py:84 wide (9 parameters)",
    ]
