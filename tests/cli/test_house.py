"""The house's import rules, read from the source with `ast`: data flows down, no reaching in.

- the core never imports the CLI (formatting belongs to cli/, the CLI calls the core);
- engram's launch wiring runs one way: launch imports engram, engram never imports launch;
- no module imports another module's `_private` name.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "python" / "sparkfleet"


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(absolute module, imported names) for every import in the file, lazy ones included."""
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    package = parts if path.name == "__init__.py" else parts[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            mod = ".".join([*base, *(node.module.split(".") if node.module else [])])
            out.append((mod, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
    return out


def _modules(under: str = "") -> list[Path]:
    return sorted((PKG / under).rglob("*.py"))


def test_core_never_imports_the_cli():
    bad = [
        f"{p.relative_to(PKG)} imports {mod}"
        for p in _modules()
        if "cli" not in p.relative_to(PKG).parts and p.name != "__main__.py"  # the entry point
        for mod, _ in _imports(p)
        if mod == "sparkfleet.cli" or mod.startswith("sparkfleet.cli.")
    ]
    assert bad == []


def test_engram_never_imports_launch():
    bad = [
        f"{p.relative_to(PKG)} imports {mod}"
        for p in _modules("engram")
        for mod, _ in _imports(p)
        if mod.startswith("sparkfleet.launch")
    ]
    assert bad == []


def test_no_module_imports_a_private_name():
    bad = [
        f"{p.relative_to(PKG)}: from {mod} import {name}"
        for p in _modules()
        for mod, names in _imports(p)
        for name in names
        if name.startswith("_") and not name.startswith("__") and mod.startswith("sparkfleet")
    ]
    assert bad == []


def test_the_node_side_agent_verb_does_not_import_rich():
    """`sparkfleet agent` runs once per readiness poll on every node: no display stack on that path."""
    import subprocess
    import sys

    code = "import sys, sparkfleet.cli.launch, sparkfleet.launch.agent; print('rich' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
