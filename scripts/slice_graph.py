"""The import graph between the slices of `src/multibank` (issue 42 §1), read with `ast`.

Every `import` and `from` statement counts, those inside functions and under `TYPE_CHECKING`
included; relative imports are resolved. A module maps to its slice, the first name under
`multibank` (`multibank.cards.money` is `cards`, `multibank.settings` is `settings`). Prints the
edges between the slices asked for (by default the ten domain slices of issue 42 plus the kernel
and settings), each with the files that make it, then the cycles (strongly connected components
of more than one slice).

    python scripts/slice_graph.py [--all] [--files] [slice ...]

--all takes every slice of the package; --files lists, under each edge, the importing files."""

from __future__ import annotations

import argparse
import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "multibank"
DEFAULT = [
    "access",
    "accounts",
    "cards",
    "factors",
    "identities",
    "ledger",
    "payments",
    "programmes",
    "users",
    "webhooks",
    "settings",
    "kernel",
]


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> Iterator[str]:
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            yield ".".join([*base, *([node.module] if node.module else [])])


def slice_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "multibank" and len(parts) > 1 else None


def graph() -> dict[tuple[str, str], set[str]]:
    edges: dict[tuple[str, str], set[str]] = defaultdict(set)
    for path in sorted(PACKAGE.rglob("*.py")):
        source = slice_of(module_name(path))
        if source is None:
            continue
        for module in imported(path):
            target = slice_of(module)
            if target is not None and target != source:
                edges[source, target].add(str(path.relative_to(SRC)))
    return edges


def components(nodes: list[str], succ: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(succ.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            found.append(sorted(group))

    for v in nodes:
        if v not in index:
            visit(v)
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("slices", nargs="*")
    parser.add_argument("--all", action="store_true")
    parser.add_argument("--files", action="store_true")
    args = parser.parse_args()
    edges = graph()
    chosen = sorted({s for edge in edges for s in edge}) if args.all else args.slices or DEFAULT
    kept = {e: files for e, files in edges.items() if e[0] in chosen and e[1] in chosen}
    succ: dict[str, set[str]] = defaultdict(set)
    for source in sorted(chosen):
        targets = sorted(t for s, t in kept if s == source)
        for t in targets:
            succ[source].add(t)
        print(f"{source} -> {', '.join(targets) if targets else '(nothing)'}")
        if args.files:
            for t in targets:
                print(f"    {t}: {', '.join(sorted(kept[source, t]))}")
    print(f"\n{len(kept)} edges")
    cycles = [c for c in components(sorted(chosen), succ) if len(c) > 1]
    for c in cycles:
        print(f"cycle: {' '.join(c)}")
    if not cycles:
        print("no cycle")


if __name__ == "__main__":
    main()
