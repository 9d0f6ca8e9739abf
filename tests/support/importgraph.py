"""A package's real import graph, read from its source with `ast`: what the house tests check.

Why read the source and not `sys.modules`: a lazy (function-level) import is an arrow too, and it
is exactly where a circle hides ("lazy: the images module imports this one"). So every import
statement counts, wherever it stands, except those under `if TYPE_CHECKING:` (annotations only,
never run). An import of a package's own `__init__` from inside that package is not an arrow of
the drawing (it is the package itself, not a room of it).
"""

from __future__ import annotations

import ast
from pathlib import Path


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _statements(tree: ast.AST):
    """Every import statement that can run: nested in functions and classes too, not TYPE_CHECKING."""
    stack = [tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                stack.extend(child.orelse)  # the `else:` of a TYPE_CHECKING block does run
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield child
            else:
                stack.append(child)


def modules(root: Path, package: str) -> dict[str, Path]:
    """{dotted module name: file} for every .py file of `root/package` (`pkg.sub` for pkg/sub/__init__.py)."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _owner(name: str, known: dict[str, Path]) -> str | None:
    """The module a dotted name lives in: itself, else its nearest enclosing module of the package."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def graph(root: Path, package: str) -> dict[str, set[str]]:
    """{module: the package's modules it imports}, function-level imports included."""
    known = modules(root, package)
    out: dict[str, set[str]] = {}
    for mod, path in known.items():
        here = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        targets: set[str] = set()
        for stmt in _statements(ast.parse(path.read_text(), str(path))):
            if isinstance(stmt, ast.Import):
                names = [a.name for a in stmt.names]
            else:
                base = stmt.module.split(".") if stmt.module else []
                if stmt.level:
                    base = here[: len(here) - (stmt.level - 1)] + base
                prefix = ".".join(base)
                # `from pkg import sub` names the module pkg.sub; `from pkg.mod import name`, pkg.mod
                full = [f"{prefix}.{a.name}" for a in stmt.names]
                names = [name if name in known else prefix for name in full]
            for name in names:
                owner = _owner(name, known)
                if owner and owner != mod and not mod.startswith(owner + "."):
                    targets.add(owner)
        out[mod] = targets
    return out


def circles(g: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle: each strongly connected set of more than one module, sorted (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(g):
        if start in index:
            continue
        work = [(start, iter(sorted(g.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(g.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return sorted(found)


def reachable(g: dict[str, set[str]], start: str) -> dict[str, str]:
    """{module: the module that imported it on the way} for everything `start` imports, transitively."""
    via: dict[str, str] = {}
    todo = [start]
    while todo:
        m = todo.pop()
        for t in g.get(m, ()):
            if t not in via and t != start:
                via[t] = m
                todo.append(t)
    return via


def path_to(via: dict[str, str], start: str, target: str) -> list[str]:
    """The chain of imports `start -> ... -> target` that `reachable` found."""
    chain = [target]
    while chain[-1] != start:
        chain.append(via[chain[-1]])
    return chain[::-1]


def rooms(g: dict[str, set[str]], package: str) -> dict[str, set[str]]:
    """The graph one level down: each sub-package of `package` (a folder) and each top-level module
    is one room, and room A -> room B when any module of A imports any module of B.

    Why: a house with no module circle can still have two folders that import each other (a
    module of A imports one of B while another module of B imports one of A): then neither folder
    stands above the other, and the drawing shows an arrow running back up.
    """

    def room(mod: str) -> str:
        parts = mod.split(".")
        return ".".join(parts[:2]) if len(parts) > 1 and parts[0] == package else mod

    out: dict[str, set[str]] = {}
    for mod, targets in g.items():
        here = room(mod)
        out.setdefault(here, set()).update(t for t in map(room, targets) if t != here)
    return out
