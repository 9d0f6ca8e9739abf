"""sparkfleet under nixpkgs' Python wrapper: every Python child of ours still imports sparkfleet.

A Nix-built sparkfleet (buildPythonApplication) is a script whose first line puts the application's
site-packages on sys.path with `site.addsitedir` (nixpkgs pkgs/development/interpreters/python/
wrap.sh); `sys.executable` is the bare store interpreter. The test writes that very wrapper around
this checkout (the venv's site-packages and python/, run by the venv's base interpreter, which has
neither sparkfleet nor click) and drives a real local launch through it: the controller starts the
node agent, the agent a rank's supervisor and the lane's memory watchdog, all `sys.executable`
children. Before sparkfleet.base.selfexec each died on `No module named sparkfleet`.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import site
import subprocess
import sys
from pathlib import Path

import pytest

from sparkfleet.base import procs, selfexec
from sparkfleet.demo.hubfixture import build_nas_hub
from sparkfleet.fleet import inventory
from sparkfleet.launch import lane as lanes
from sparkfleet.node import watchdog
from support.lanefleet import demo_recipe, free_port, write_fleet

PKG = Path(__file__).resolve().parents[2] / "python" / "sparkfleet"
BARE = os.path.realpath(getattr(sys, "_base_executable", sys.executable))


# make test runs modules on xdist workers: the lanes this module launches on this machine share
# its ports (the rendezvous port 20000, the demo's serving ports), so every such module runs on
# one worker ("local_lanes"), one at a time
pytestmark = pytest.mark.xdist_group("local_lanes")

def nix_wrapper(path: Path) -> Path:
    """The script nixpkgs' wrapPythonPrograms makes of a console entry point, around this checkout."""
    dirs = [*site.getsitepackages(), str(PKG.parent)]
    path.write_text(
        f"#!{BARE}\n"
        "import sys;import site;import functools;sys.argv[0] = 'sparkfleet';"
        f"functools.reduce(lambda k, p: site.addsitedir(p, k), {dirs!r}, site._init_pathinfo())\n"
        "from sparkfleet.cli import main\n"
        "sys.exit(main())\n"
    )
    path.chmod(0o755)
    return path


def bare_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}


@pytest.fixture
def wrapped_fleet(tmp_path):
    if subprocess.run([BARE, "-c", "import sparkfleet"], env=bare_env(), capture_output=True).returncode == 0:
        pytest.skip(f"{BARE} imports sparkfleet on its own: it is no bare interpreter")
    nas = build_nas_hub(tmp_path / "nas" / "hub", shard_bytes=16 * 1024)
    hosts = {
        "spark": {
            "address": "localhost",
            "ssh_user": "root",
            "local_hub": str(tmp_path / "nvme" / "hub"),
            "nas_hub": str(nas.root),
            "state_dir": str(tmp_path / "state"),
        }
    }
    root = write_fleet(tmp_path / "fleet", hosts, {"demo": demo_recipe(["spark"], free_port())})
    inv = inventory.load(root)
    yield inv, root, nix_wrapper(tmp_path / "sparkfleet")
    lanes.stop(inv, "demo", 5)  # never leave a rank behind, even on failure


def test_a_nix_wrapped_sparkfleet_launches_a_local_lane(wrapped_fleet, tmp_path):
    inv, root, wrapper = wrapped_fleet
    run = subprocess.run(
        [str(wrapper), "--root", str(root), "launch", "demo", "--allow-nas-weights"],
        env=bare_env(), capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "No module named" not in run.stdout + run.stderr

    st = lanes.status(inv, "demo")
    assert st.running == 1 and st.endpoints["health"] == 200
    assert watchdog.running(tmp_path / "state", "demo")  # the watchdog came up too
    # the serve command's environment is the recipe's: our search path travels in no PYTHONPATH
    server = max(procs.group_members(st.ranks[0].pid))
    environ = Path(f"/proc/{server}/environ").read_text().split("\0")
    env = dict(kv.split("=", 1) for kv in environ if "=" in kv)
    assert "PYTHONPATH" not in env and env["NODE_RANK"] == "0"

    stop = subprocess.run([str(wrapper), "--root", str(root), "stop", "demo"], env=bare_env(),
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)  # fmt: skip
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert lanes.status(inv, "demo").running == 0


@pytest.mark.slow
def test_a_nix_wrapped_sparkfleet_runs_the_demo(tmp_path):
    """`sparkfleet demo` under the wrapper: its two-rank lane's server command, the fabric canary
    (torch gloo, where torch is importable), and `sparkfleet smoke` / `bench` it starts itself."""
    if subprocess.run([BARE, "-c", "import sparkfleet"], env=bare_env(), capture_output=True).returncode == 0:
        pytest.skip(f"{BARE} imports sparkfleet on its own: it is no bare interpreter")
    from sparkfleet.demo.fleet import DEMO_LANE

    workdir = tmp_path / "demo"
    try:
        proc = subprocess.run(
            [str(nix_wrapper(tmp_path / "sparkfleet")), "demo", "--workdir", str(workdir),
             "--shard-mib", "1"],
            capture_output=True, text=True, timeout=300, env={**bare_env(), "TERM": "dumb"},
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "No module named" not in proc.stdout + proc.stderr
        assert "demo ok" in proc.stdout
        if importlib.util.find_spec("torch") is not None:  # the demo runs the canary only with torch
            assert "fabric canary ok (gloo, 2 ranks" in proc.stdout
    finally:
        fleet = workdir / "fleet"
        if (fleet / "hosts").is_dir():
            lanes.stop(inventory.load(fleet), DEMO_LANE, 5)


def test_module_argv_runs_the_module_as_dash_m_would(tmp_path):
    """argv[0] is the module's file, the arguments follow, the exit status carries over; no env."""
    out = subprocess.run(
        selfexec.module_argv("sparkfleet.node.watchdog", "--help"),
        env=bare_env(), capture_output=True, text=True, cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0 and "--state-dir" in out.stdout, out.stderr
    script = tmp_path / "s.py"
    script.write_text("import sys, click; print(sys.argv[0], sys.argv[1:]); sys.exit(3)\n")
    out = subprocess.run(selfexec.script_argv(str(script), "a", "b c"), env=bare_env(),
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 3 and out.stdout.strip() == f"{script} ['a', 'b c']", out.stderr


def test_selfexec_stands_on_the_ground_floor():
    """It imports nothing of sparkfleet, so any module may use it."""
    tree = ast.parse((PKG / "base" / "selfexec.py").read_text())
    imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert [m for m in imported if m.startswith("sparkfleet") or m == ""] == []


def test_every_python_child_of_ours_goes_through_selfexec():
    """`sys.executable` as a command's first word anywhere else would start a bare interpreter."""
    bad = [
        f"{p.relative_to(PKG)}:{i}: {line.strip()}"
        for p in sorted(PKG.rglob("*.py"))
        if p.name != "selfexec.py"
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"sys\.executable\s*,|=\s*sys\.executable\b", line)
    ]
    assert bad == []
