"""The house's import rules, read from the source with `ast`: data flows down, no reaching in.

- the core never imports the CLI (formatting belongs to cli/, the CLI calls the core);
- engram's launch wiring runs one way: launch imports engram, engram never imports launch;
- no module imports another module's `_private` name;
- no import circle, function-level imports included (TYPE_CHECKING blocks excluded), and launch/
  in three floors whose arrows run down only: pure <- node side <- controller.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.importgraph import circles, graph, path_to, reachable, rooms

PKG = Path(__file__).resolve().parents[2] / "python" / "sparkfleet"
LAUNCH = "sparkfleet.launch."
# launch/'s floors. Pure: computes from its arguments, reads no node and calls no agent. Node side:
# runs on the node (the agent and what it starts). Controller: runs on the operator's machine and
# reaches nodes through the agent. A new launch module must be placed on one of them.
PURE = {
    "recipe", "spec", "kitwire", "limits", "manifest", "readiness", "bootcache", "weights",
    "replicas", "generation_check",
}
NODE = {
    "records", "runtimes", "receipts", "watchdog", "rank_parent", "canary_worker", "node_checks", "agent",
    "hostread",
    "keyguard.sparkfleet_keyguard",  # runs on the node, inside a vLLM rank (it imports no sparkfleet)
}
CONTROLLER = {
    "plan", "preflight", "report", "generations", "lane", "revert", "release", "lanekeys", "demo", "lanestop",
    "watchstate", "lanerun", "verbrun",
}


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

    code = "import sys, sparkfleet.cli.launch, sparkfleet.node.agent; print('rich' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_the_circle_checker_finds_a_planted_circle_even_behind_a_lazy_import(tmp_path):
    """a imports b at the top, b imports a inside a function (the lazy import that used to hide
    circles); c imports a only for annotations (TYPE_CHECKING), which is no arrow."""
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from . import b\nfrom .c import C\n",
        "pkg/b.py": "def f():\n    from .a import thing  # lazy\n    return thing\n",
        "pkg/c.py": "from typing import TYPE_CHECKING\n"
                    "if TYPE_CHECKING:\n    from pkg.a import A\nclass C: ...\n",
        "pkg/sub/__init__.py": "from .d import D\n",
        "pkg/sub/d.py": "import pkg.sub\nclass D: ...\n",
    })  # fmt: skip
    g = graph(tmp_path, "pkg")
    assert g["pkg.b"] == {"pkg.a"} and g["pkg.c"] == set()  # the lazy import counts, TYPE_CHECKING not
    assert circles(g) == [["pkg.a", "pkg.b"]]


def test_the_package_has_no_import_circle():
    assert circles(graph(PKG.parent, "sparkfleet")) == []


def test_the_folder_checker_finds_two_folders_that_import_each_other(tmp_path):
    """No module circle, yet a/x imports b/y while b/z imports a/w: the folders a and b stand on no
    floor one above the other. A top-level module is a room of its own."""
    _write(tmp_path, {
        "pkg/__init__.py": "", "pkg/top.py": "from .a import w\n",
        "pkg/a/__init__.py": "", "pkg/a/x.py": "from ..b import y\n", "pkg/a/w.py": "",
        "pkg/b/__init__.py": "", "pkg/b/y.py": "", "pkg/b/z.py": "from ..a.w import W\n",
    })  # fmt: skip
    g = graph(tmp_path, "pkg")
    assert circles(g) == []
    assert rooms(g, "pkg")["pkg.top"] == {"pkg.a"}
    assert circles(rooms(g, "pkg")) == [["pkg.a", "pkg.b"]]


def test_every_folder_arrow_runs_down():
    """Each folder of the package and each top-level module is a room; no two rooms import each
    other, even through others, so the rooms stand on floors and every arrow runs down."""
    g = graph(PKG.parent, "sparkfleet")
    tied = [set(c) for c in circles(rooms(g, "sparkfleet"))]
    room = {m: ".".join(m.split(".")[:2]) for m in g}
    arrows = sorted(f"{m} -> {t}" for m, ts in g.items() for t in ts
                    for c in tied if room[m] in c and room[t] in c and room[m] != room[t])  # fmt: skip
    assert tied == [], "\n".join(arrows)


def test_every_launch_module_stands_on_one_floor():
    launch = {m.removeprefix(LAUNCH) for m in graph(PKG.parent, "sparkfleet") if m.startswith(LAUNCH)}
    assert launch - (PURE | NODE | CONTROLLER) == set()
    assert not (PURE & NODE or PURE & CONTROLLER or NODE & CONTROLLER)


def test_launch_arrows_run_down_only():
    """Pure modules reach no node-side or controller module, the node side no controller module,
    not even through a module outside launch/ (each arrow counted transitively)."""
    g = graph(PKG.parent, "sparkfleet")
    bad = []
    for floor, above in ((PURE, NODE | CONTROLLER), (NODE, CONTROLLER)):
        for name in sorted(floor):
            via = reachable(g, LAUNCH + name)
            ups = [LAUNCH + up for up in sorted(above) if LAUNCH + up in via]
            bad += [" -> ".join(path_to(via, LAUNCH + name, up)) for up in ups]
    assert bad == []


def test_images_and_hoststack_do_not_reach_the_lane_lifecycle():
    """images/ reads its records and calls the agent client (`nodecall`, below both), never launch/:
    launch hands it a lane's image facts; hoststack reads a host's stack through `hosts` alone."""
    g = graph(PKG.parent, "sparkfleet")
    images = {m: sorted(t for t in ts if t.startswith(LAUNCH))
              for m, ts in g.items() if m.startswith("sparkfleet.images")}  # fmt: skip
    assert {m: ts for m, ts in images.items() if ts} == {}
    assert g["sparkfleet.remote.hoststack"] == {"sparkfleet.remote.hosts"}


def test_process_identity_and_scrubbing_stand_on_the_ground():
    """launch/, stage/, serving/ and the supervisor all check that a PID is still the process they
    started, and bench/, launch/ and the supervisor scrub secrets: both are facts that import
    nothing of sparkfleet, so no folder reaches into another's for them."""
    g = graph(PKG.parent, "sparkfleet")
    assert g["sparkfleet.base.procs"] == set() and g["sparkfleet.base.sanitize"] == set()
