"""The units a deploy installs: what they run, what they read, and that a lane unit starts a lane.

The unit files are the ones the deploy-rs `sparkfleet` profile ships (units.profileUnits, rendered
with nix-instantiate from the inventory). A lane unit runs the tooling by the profile's absolute
path and reads a content-addressed copy of hosts/fleet.toml + its own recipe, so:
- trees that differ only outside hosts/fleet.toml and recipes/*/recipe.toml render byte-identical
  units (a README or code commit restarts no lane);
- a recipe edit changes that lane's unit and nothing else;
- executing the rendered ExecStart argv, with the unit's Environment=, starts the lane (process
  runtime on this machine), and ExecStop stops it.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sparkfleet.demo.hubfixture import DRAFTER_REPO, WEIGHTS_REPO, build_nas_hub
from sparkfleet.fleet import inventory
from sparkfleet.launch import lane as lanes

from .conftest import FLEET_LIB, REPO, nix_eval, nix_str, requires_nix, store_writable

pytestmark = [pytest.mark.nix, requires_nix]

UNITS_LIB = REPO / "modules" / "lib" / "units.nix"
PROFILE = "/nix/var/nix/profiles/sparkfleet"


def profile_units(root: Path, host: str, profile: str = PROFILE, write_store: bool = False) -> dict[str, str]:
    return nix_eval(
        f"let f = (import {FLEET_LIB}).fromRoot {nix_str(root)}; in ((import {UNITS_LIB}).profileUnits "
        f'{{ fleet = f; host = "{host}"; fleetRoot = {nix_str(root)}; '
        f"profilePath = {nix_str(profile)}; }}).files",
        write_store=write_store,
    )


def unit_values(text: str, key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in text.splitlines() if line.startswith(f"{key}=")]


def exec_argv(value: str) -> list[str]:
    """systemd's Exec= quoting back to argv ("…" with \\ escapes; $$ and %% doubled)."""
    return [a.replace("$$", "$").replace("%%", "%") for a in shlex.split(value)]


def unit_env(text: str) -> dict[str, str]:
    return dict(shlex.split(v)[0].split("=", 1) for v in unit_values(text, "Environment"))


def repo_copy(dest: Path) -> Path:
    for folder in ("hosts", "recipes", "modules", "pkgs"):
        shutil.copytree(REPO / folder, dest / folder, ignore=shutil.ignore_patterns("reports", "__pycache__"))
    for name in ("flake.nix", "README.md", "pyproject.toml"):
        shutil.copy(REPO / name, dest / name)
    return dest


def test_units_run_the_profile_tooling_by_absolute_path() -> None:
    units = profile_units(REPO, "dgx1")
    services = {n: t for n, t in units.items() if n.endswith(".service")}
    assert "sparkfleet-stage.service" in services and any(n.startswith("sparkfleet-lane-") for n in services)
    for name, text in services.items():
        for key in ("ExecStart", "ExecStop"):
            for value in unit_values(text, key):
                assert exec_argv(value)[0] == f"{PROFILE}/bin/sparkfleet", (name, key, value)
        env = unit_env(text)
        # workers are reached over ssh: the head starts sparkfleet there by the same profile path
        assert env["SPARKFLEET_REMOTE"] == f"{PROFILE}/bin/sparkfleet", name
        root = env["SPARKFLEET_ROOT"]
        if name == "sparkfleet-stage.service":
            assert root == f"{PROFILE}/share/sparkfleet/stage-root"  # stable; links to the deployed spec
        else:
            assert re.fullmatch(r"/nix/store/[0-9a-z]{32}-sparkfleet-lane-[a-z0-9.-]+-spec", root), root


def test_trees_differing_outside_fleet_and_recipes_render_identical_units(tmp_path: Path) -> None:
    a = repo_copy(tmp_path / "a")
    b = repo_copy(tmp_path / "b")
    (b / "README.md").write_text("# a README-only commit\n")
    (b / "pkgs" / "sparkfleet.nix").write_text((b / "pkgs" / "sparkfleet.nix").read_text() + "\n# code\n")
    (b / "hosts" / "dgx1" / "default.nix").write_text("# host module edit (NixOS only)\n")
    reports = b / "recipes" / "dsv41-flash-4x-mia" / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    (reports / "2026-11-30T00-00-00Z_x.json").write_text("{}")
    for host in ("dgx1", "dgx2"):
        assert profile_units(a, host) == profile_units(b, host)

    # one lane's recipe edited: that lane's unit alone changes, on every host
    recipe = b / "recipes" / "dsv41-flash-4x-mia" / "recipe.toml"
    recipe.write_text(recipe.read_text() + "\n# an edit\n")
    before, after = profile_units(a, "dgx1"), profile_units(b, "dgx1")
    assert [n for n in before if before[n] != after[n]] == ["sparkfleet-lane-dsv41-flash-4x-mia.service"]
    assert profile_units(a, "dgx3") == profile_units(b, "dgx3")  # a worker: no lane unit, staging stable


def _stage(root: Path, hosts: list[str]) -> None:
    """Stage the demo lane's models to each host's local hub (the lane unit launches staged weights)."""
    from sparkfleet.stage import execute
    from sparkfleet.stage.targets import requests_for_host

    inv = inventory.load(root)
    for host in hosts:
        assert execute.stage(requests_for_host(inv, host, "demo")).ok


def _local_fleet(root: Path, nas_hub: Path, tmp: Path, port: int) -> Path:
    (root / "hosts").mkdir(parents=True)
    (root / "hosts" / "fleet.toml").write_text(
        textwrap.dedent(f"""\
        schema_version = 1
        [hosts.spark]
        address = "localhost"
        ssh_user = "root"
        local_hub = "{tmp / "nvme" / "hub"}"
        nas_hub = "{nas_hub}"
        state_dir = "{tmp / "state"}"

        [pins.weights]
        kind = "hf"
        repo = "{WEIGHTS_REPO}"
        revision = "main"

        [pins.drafter]
        kind = "hf"
        repo = "{DRAFTER_REPO}"
        revision = "main"
        """)
    )
    (root / "recipes" / "demo").mkdir(parents=True)
    (root / "recipes" / "demo" / "recipe.toml").write_text(
        textwrap.dedent(f"""\
        [lane]
        hosts = ["spark"]
        [world]
        tp = 1
        [launch]
        runtime = "process"
        port = {port}
        served_model_name = "deepseek-v4.1-flash"
        fabric = "none"
        command = ["{sys.executable}", "-m", "sparkfleet.demo.openai_server", "--host", "127.0.0.1",
                   "--port", "{{port}}", "--served-model-name", "{{served_model_name}}",
                   "--boot-delay", "0.3", "--signature", "RoCEnante ready: world=1"]
        ready_signatures = ["RoCEnante ready: world=1", "The server is fired up and ready to roll!"]
        [launch.timeouts]
        ready_s = 30
        poll_s = 0.2
        stop_s = 5
        [launch.canary]
        enabled = false  # this test is about the unit's argv; the canary is test_gates_fleet's

        [[models]]
        pin = "weights"
        exclude = ["page15/*"]
        [[models]]
        pin = "drafter"
        """)
    )
    return root


@pytest.mark.skipif(not store_writable(), reason="/nix/store is not writable (the unit's spec root is there)")
def test_rendered_lane_unit_starts_and_stops_the_lane(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    nas = build_nas_hub(tmp_path / "nas" / "hub", shard_bytes=16 * 1024)
    root = _local_fleet(tmp_path / "fleet", nas.root, tmp_path, port)
    _stage(root, ["spark"])  # launch refuses weights that are not staged and verified
    # the profile as deploy-rs leaves it: bin/sparkfleet -> the package's executable
    profile = tmp_path / "profile"
    (profile / "bin").mkdir(parents=True)
    (profile / "bin" / "sparkfleet").symlink_to(Path(sys.executable).parent / "sparkfleet")

    units = profile_units(root, "spark", profile=str(profile), write_store=True)
    text = units["sparkfleet-lane-demo.service"]
    (start,) = (exec_argv(v) for v in unit_values(text, "ExecStart"))
    (stop,) = (exec_argv(v) for v in unit_values(text, "ExecStop"))
    env = unit_env(text)
    spec_root = Path(env["SPARKFLEET_ROOT"])
    # the lane reads its spec from the store copy: the fleet file and its own recipe, nothing else
    assert sorted(str(p.relative_to(spec_root)) for p in spec_root.rglob("*") if p.is_file()) == [
        "hosts/fleet.toml",
        "recipes/demo/recipe.toml",
    ]
    # what systemd would give the unit: its Environment= on top of a bare service environment
    run_env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **env}
    inv = inventory.load(spec_root)
    try:
        proc = subprocess.run(start, env=run_env, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            st = lanes.status(inv, "demo")
            if st.running == 1 and st.endpoints.get("health") == 200:
                break
            time.sleep(0.3)
        assert st.running == 1 and st.endpoints["health"] == 200, st
        proc = subprocess.run(stop, env=run_env, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr
        assert lanes.status(inv, "demo").running == 0
    finally:
        lanes.stop(inv, "demo", 5)


@pytest.mark.netns
@pytest.mark.slow
@pytest.mark.skipif(not store_writable(), reason="/nix/store is not writable (the unit's spec root is there)")
def test_rendered_lane_unit_reaches_its_worker_with_the_units_sparkfleet_remote(
    tmp_path: Path, fleet_hosts, ssh_config
) -> None:
    """A two-node lane: the head is this machine, the worker a real sshd in a network namespace.
    The unit's ExecStart starts the worker's rank over ssh with the unit's SPARKFLEET_REMOTE (the
    deploy profile's bin/, here a profile made in tmp), and ExecStop stops both ranks."""
    worker = fleet_hosts(["w1"])["w1"]
    nas = build_nas_hub(tmp_path / "nas" / "hub", shard_bytes=16 * 1024)
    root = _local_fleet(tmp_path / "fleet", nas.root, tmp_path, 30000)
    fleet = root / "hosts" / "fleet.toml"
    fleet.write_text(
        fleet.read_text().replace(
            "[pins.weights]",
            # the address is a name the (test's) ssh config resolves, as operators' ssh configs do
            f'[hosts.w1]\naddress = "w1"\nssh_user = "root"\n'
            f'local_hub = "{worker.nvme / "hub"}"\nnas_hub = "{nas.root}"\n'
            f'state_dir = "{worker.root / "state"}"\n\n[pins.weights]',
        )
    )
    recipe = root / "recipes" / "demo" / "recipe.toml"
    recipe.write_text(
        recipe.read_text()
        .replace('hosts = ["spark"]', 'hosts = ["spark", "w1"]')
        .replace("tp = 1", "tp = 2")
        .replace('"127.0.0.1"', '"0.0.0.0"')
        .replace("world=1", "world=2")
    )
    _stage(root, ["spark", "w1"])  # both hubs are on this machine's filesystem
    profile = tmp_path / "profile"
    (profile / "bin").mkdir(parents=True)
    (profile / "bin" / "sparkfleet").symlink_to(Path(sys.executable).parent / "sparkfleet")

    units = profile_units(root, "spark", profile=str(profile), write_store=True)
    text = units["sparkfleet-lane-demo.service"]
    (start,) = (exec_argv(v) for v in unit_values(text, "ExecStart"))
    (stop,) = (exec_argv(v) for v in unit_values(text, "ExecStop"))
    env = unit_env(text)
    assert env["SPARKFLEET_REMOTE"] == f"{profile}/bin/sparkfleet"
    # the one thing a test adds: host keys of the namespaces (a Spark's user has its ~/.ssh)
    run_env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **env}
    run_env["SPARKFLEET_SSH_CONFIG"] = str(ssh_config([worker]))
    inv = inventory.load(Path(env["SPARKFLEET_ROOT"]))
    try:
        # control: without the unit's SPARKFLEET_REMOTE a bare `sparkfleet` is not on the worker's
        # non-interactive PATH, and the lane cannot start (the unit must carry it)
        bare = {k: v for k, v in run_env.items() if k != "SPARKFLEET_REMOTE"}
        proc = subprocess.run(start, env=bare, capture_output=True, text=True, timeout=180, check=False)
        out = proc.stdout + proc.stderr
        # (launch words it as a failed agent, or "not installed there" where it checks exit 127)
        assert proc.returncode != 0 and "w1" in out and ("exit 127" in out or "not installed there" in out)
        proc = subprocess.run(start, env=run_env, capture_output=True, text=True, timeout=180, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            st = subprocess.run(
                [f"{profile}/bin/sparkfleet", "status", "demo", "--json"],
                env=run_env, capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            if '"running": 2' in st.stdout:
                break
            time.sleep(0.5)
        assert '"running": 2' in st.stdout, st.stdout + st.stderr
        proc = subprocess.run(stop, env=run_env, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr
        st = subprocess.run(
            [f"{profile}/bin/sparkfleet", "status", "demo", "--json"],
            env=run_env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert '"running": 0' in st.stdout, st.stdout + st.stderr
    finally:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("SPARKFLEET_REMOTE", f"{profile}/bin/sparkfleet")
            mp.setenv("SPARKFLEET_SSH_CONFIG", run_env["SPARKFLEET_SSH_CONFIG"])
            lanes.stop(inv, "demo", 5)
