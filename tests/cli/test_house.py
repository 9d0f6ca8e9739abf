"""The house's import rules, read from the source with `ast`: data flows down, no reaching in.

python/sparkfleet/README.md says what each folder knows and where it runs; the rules here are
stated over folders, so a new module obeys them by the folder it goes in:
- nothing loose at the package top but the entry (`__init__`, `__main__`);
- the pure folders (what is declared, what is observed, the recipe) reach no node-side and no
  controller folder, the node side (node/) reaches no controller folder and never the CLI;
- the core never imports the CLI (formatting belongs to cli/, the CLI calls the core), and a verb's
  CLI module imports no other verb's (shared options and rendering live in cli/'s helpers);
- engram's launch wiring runs one way: launch imports engram, engram never imports launch;
- no module imports another module's `_private` name;
- no import circle, function-level imports included (TYPE_CHECKING blocks excluded), and the
  folders stand on floors whose arrows run down only.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from tests.support.importgraph import circles, graph, path_to, reachable, rooms

PKG = Path(__file__).resolve().parents[2] / "python" / "sparkfleet"
LAUNCH = "sparkfleet.launch."
# The package top holds the entry alone: every other module stands in the folder that says where it
# runs and what it knows.
TOP = {"__init__.py", "__main__.py"}
# Where code runs, by folder. Pure: computes from what it is given, and reads files the operator
# declared or a host exposes; it starts nothing and calls no agent. Node side: runs on a node (the
# agent and what it starts). Controller: runs on the operator's machine and reaches nodes through
# the agent. Every folder reached from a pure one must itself be below node/ and the controller.
PURE = {"base", "fleet", "facts", "lane"}
NODE = {"node"}
CONTROLLER = {"launch", "ops", "serving", "bench", "demo", "view", "cli"}
# cli/'s helpers every verb may use; any other cli/ module is a verb's.
CLI_SHARED = {
    "__init__", "__main__", "options", "progress", "render", "values", "clidoc", "benchview", "stagelines",
}  # fmt: skip
# Verbs that import another verb's module: none (what two verbs share is in cli/options.py, a
# shared cli/ helper or the core). A new entry fails the test, and so does a stale one.
CLI_CROSS_VERB: set[str] = set()


def _folder(module: str) -> str:
    """`lane` for sparkfleet.lane.spec; a module at the top is its own room."""
    return module.split(".")[1] if module.count(".") >= 1 else module


@functools.cache
def _graph() -> dict[str, set[str]]:
    """The package's module graph, read once per run (every rule below reads it)."""
    return graph(PKG.parent, "sparkfleet")


@functools.cache
def _rooms() -> dict[str, set[str]]:
    g = _graph()
    return {_folder(k): {_folder(t) for t in ts} for k, ts in rooms(g, "sparkfleet").items()}


def floors(r: dict[str, set[str]]) -> dict[str, int]:
    """Each room's floor, derived from its imports: 0 imports nothing, else one above the highest
    room it imports."""

    @functools.cache
    def floor(room: str) -> int:
        return 1 + max((floor(t) for t in r[room] if t != room), default=-1)

    return {room: floor(room) for room in r}


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
    assert circles(_graph()) == []


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
    g = _graph()
    tied = [set(c) for c in circles(rooms(g, "sparkfleet"))]
    room = {m: ".".join(m.split(".")[:2]) for m in g}
    arrows = sorted(f"{m} -> {t}" for m, ts in g.items() for t in ts
                    for c in tied if room[m] in c and room[t] in c and room[m] != room[t])  # fmt: skip
    assert tied == [], "\n".join(arrows)


def test_the_package_top_holds_only_the_entry():
    loose = sorted(p.name for p in PKG.glob("*.py") if p.name not in TOP)
    assert loose == [], "move these into the folder that says where they run (python/sparkfleet/README.md)"


def test_every_folder_has_a_kind():
    """A new folder must say where its code runs: pure, node side, controller, or (for what stands
    between) below node/ and reached only from above it."""
    folders = {p.name for p in PKG.iterdir() if (p / "__init__.py").exists()}
    assert not (PURE & NODE or PURE & CONTROLLER or NODE & CONTROLLER)
    assert folders >= (PURE | NODE | CONTROLLER)


def test_pure_folders_reach_no_node_side_or_controller_folder():
    """Counted transitively: a pure folder that imports engram reaches what engram imports."""
    g = _graph()
    bad = []
    for start in sorted(m for m in g if _folder(m) in PURE):
        via = reachable(g, start)
        bad += [" -> ".join(path_to(via, start, t)) for t in sorted(via) if _folder(t) in NODE | CONTROLLER]
    assert bad == []


def test_the_node_side_reaches_no_controller_folder():
    g = _graph()
    bad = []
    for start in sorted(m for m in g if _folder(m) in NODE):
        via = reachable(g, start)
        bad += [" -> ".join(path_to(via, start, t)) for t in sorted(via) if _folder(t) in CONTROLLER]
    assert bad == []


def test_floors_follow_where_code_runs():
    """The floors derived from the imports put every pure folder below node/, and node/ below every
    controller folder that reaches nodes (launch/, ops/) and below the CLI."""
    f = floors(_rooms())
    assert f["base"] == 0 and all(f[t] == 0 for t in _rooms()["base"])
    assert max(f[p] for p in PURE) < f["node"] < min(f["launch"], f["ops"]) <= max(f.values())
    assert f["cli"] == max(f[k] for k in f if k != "__main__")


def test_no_verb_imports_another_verbs_cli_module():
    g = _graph()
    cli = "sparkfleet.cli."
    crossed = {
        f"{m.removeprefix(cli)} -> {t.removeprefix(cli)}"
        for m, ts in g.items() if m.startswith(cli) and m.removeprefix(cli) not in CLI_SHARED
        for t in ts if t.startswith(cli) and t != m and t.removeprefix(cli) not in CLI_SHARED
    }  # fmt: skip
    assert crossed - CLI_CROSS_VERB == set(), "a verb imports another verb's module"
    assert CLI_CROSS_VERB - crossed == set(), "these no longer cross: take them out of CLI_CROSS_VERB"


def test_the_floor_deriver_puts_an_importer_above_what_it_imports(tmp_path):
    _write(tmp_path, {
        "pkg/__init__.py": "", "pkg/a/__init__.py": "", "pkg/a/x.py": "",
        "pkg/b/__init__.py": "", "pkg/b/y.py": "from ..a import x\n",
        "pkg/c/__init__.py": "", "pkg/c/z.py": "from ..b import y\nfrom ..a import x\n",
    })  # fmt: skip
    assert floors(rooms(graph(tmp_path, "pkg"), "pkg")) == {"pkg": 0, "pkg.a": 0, "pkg.b": 1, "pkg.c": 2}


def test_images_and_hoststack_do_not_reach_the_lane_lifecycle():
    """images/ reads its records and calls the agent client (`nodecall`, below both), never launch/:
    launch hands it a lane's image facts; hoststack reads a host's stack through `hosts` alone."""
    g = _graph()
    images = {m: sorted(t for t in ts if t.startswith(LAUNCH))
              for m, ts in g.items() if m.startswith("sparkfleet.images")}  # fmt: skip
    assert {m: ts for m, ts in images.items() if ts} == {}
    assert g["sparkfleet.remote.hoststack"] == {"sparkfleet.remote.hosts"}


def test_process_identity_and_scrubbing_stand_on_the_ground():
    """launch/, stage/, serving/ and the supervisor all check that a PID is still the process they
    started, and bench/, launch/ and the supervisor scrub secrets: both are facts that import
    nothing of sparkfleet, so no folder reaches into another's for them."""
    g = _graph()
    assert g["sparkfleet.base.procs"] == set() and g["sparkfleet.base.sanitize"] == set()
