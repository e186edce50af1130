"""Fail on any import cycle between the modules of a package, counting EVERY import.

import-linter's contracts (`.importlinter`) check the layers between packages, but they skip
`if TYPE_CHECKING:` imports and do not look inside a layer, so a circle closed through a type hint or
an import inside a function body passes them. This check reads every module's syntax tree and takes
each `import` / `from ... import` wherever it stands (module level, `TYPE_CHECKING` block, function
body) as an edge; a cycle (a strongly connected component of more than one module) fails with the
modules of the cycle and one path around it.

`python scripts/import_cycles.py [PACKAGE_DIR ...]` (default `legival_core`); exit 0: no cycle, 1:
cycles (printed). `make check` runs it; `tests/core/test_architecture.py` runs it on the tree and on a
package with a cycle it must find.

Not an edge: the implicit import of a parent package's `__init__` (Python runs it before any
submodule; counting it would make every package with re-exports a cycle).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path


def modules(package_dir: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every `.py` file under the package."""
    root = package_dir.parent
    out: dict[str, Path] = {}
    for path in sorted(package_dir.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imported(node: ast.AST, module: str, is_package: bool) -> Iterator[tuple[str, str | None]]:
    """(module, name) pairs an import statement reaches: `from m import n` may import submodule m.n."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name, None
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            base = module if is_package else module.rpartition(".")[0]
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            target = f"{base}.{node.module}" if node.module else base
        else:
            target = node.module or ""
        for alias in node.names:
            yield target, alias.name


def _owner(name: str, known: dict[str, Path]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """Every module -> the modules of the package it imports anywhere in its file."""
    known = modules(package_dir)
    graph: dict[str, set[str]] = {}
    for module, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        deps: set[str] = set()
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            for target, name in _imported(node, module, is_package):
                full = f"{target}.{name}" if name else target
                owner = full if full in known else _owner(target, known)
                if owner is not None and owner != module:
                    deps.add(owner)
        graph[module] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def path_around(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One cycle through the component's first module (breadth-first back to it)."""
    members = set(component)
    start = component[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start] if len(path) > 1 else [start, node, start]
                if child not in previous:
                    previous[child] = node
                    nxt.append(child)
        frontier = nxt
    return component


def main(argv: list[str]) -> int:
    dirs = [Path(a) for a in argv] or [Path(__file__).resolve().parents[1] / "legival_core"]
    failed = False
    for package_dir in dirs:
        graph = import_graph(package_dir)
        found = cycles(graph)
        for component in found:
            failed = True
            print(f"import cycle ({len(component)} modules): " + " -> ".join(path_around(graph, component)))
            print("  members: " + ", ".join(component))
        if not found:
            print(f"{package_dir.name}: {len(graph)} modules, no import cycle (every import counted)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
