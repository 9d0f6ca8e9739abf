"""The fleet services' units (hosts.<h>.services: the gateway and the registry), deployed like lanes.

DGX OS: the deploy-rs profile's unit files (units.profileUnits); NixOS: modules/services.nix. Both
come from one spec (units.nix). Checked: what they run and read, that they pass `systemd-analyze
verify`, and that the gateway unit's rendered ExecStart, run with its Environment=, serves a lane
through the real smg and nginx and ends with both when stopped (SIGTERM, as systemd stops it).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from sparkfleet.base.http import free_port
from sparkfleet.fleet import hostfacts, inventory
from sparkfleet.launch import lane as lanes
from sparkfleet.serving import gateway

from .conftest import REPO, nix_str, requires_nix, requires_nixpkgs_lib, store_writable
from .test_lane_unit import _local_fleet, _stage, exec_argv, profile_units, unit_env, unit_values
from .test_modules import _ini, evaluate

pytestmark = [pytest.mark.nix, requires_nix]

PROFILE = "/nix/var/nix/profiles/sparkfleet"


def _with_services(root: Path, host: str, services: str = '["gateway", "registry"]') -> Path:
    fleet = root / "hosts" / "fleet.toml"
    fleet.write_text(
        fleet.read_text().replace(f"[hosts.{host}]\n", f"[hosts.{host}]\nservices = {services}\n", 1)
    )
    return root


def _demo_root(tmp_path: Path, port: int) -> Path:
    from sparkfleet.demo.hubfixture import build_nas_hub

    nas = build_nas_hub(tmp_path / "nas" / "hub", shard_bytes=16 * 1024)
    root = _local_fleet(tmp_path / "fleet", nas.root, tmp_path, port)
    recipe = root / "recipes" / "demo" / "recipe.toml"
    text = recipe.read_text().replace(
        '"--boot-delay", "0.3",', '"--boot-delay", "0.3", "--api-key-env", "SPARKFLEET_API_KEY",'
    )
    recipe.write_text(text.replace("[[models]]", "[gateway]\n\n[[models]]", 1))
    return _with_services(root, "spark")


def test_profile_ships_the_service_units_on_the_host_that_runs_them(tmp_path: Path) -> None:
    root = _demo_root(tmp_path, 30000)
    units = profile_units(root, "spark")
    gw, reg = units["sparkfleet-gateway.service"], units["sparkfleet-registry.service"]
    assert [exec_argv(v) for v in unit_values(gw, "ExecStart")] == [
        [f"{PROFILE}/bin/sparkfleet", "gateway", "run"]
    ]
    assert [exec_argv(v) for v in unit_values(reg, "ExecStart")] == [
        [f"{PROFILE}/bin/sparkfleet", "registry", "serve"]
    ]
    env = unit_env(gw)
    assert env["SPARKFLEET_GATEWAY_STATE"] == "/var/lib/sparkfleet/gateway"
    assert env["SPARKFLEET_REMOTE"] == f"{PROFILE}/bin/sparkfleet"  # it installs its key over ssh
    assert env["SPARKFLEET_ROOT"].endswith("-sparkfleet-gateway-spec")
    # nginx and smg from the profile's bin/ (sparkfleet-profile.nix links them), then systemd's PATH
    assert env["PATH"] == f"{PROFILE}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"
    assert "PATH" not in unit_env(reg)
    assert unit_env(reg) == {"SPARKFLEET_STATE_DIR": "/var/lib/sparkfleet", "PYTHONUNBUFFERED": "1"}
    for text, state in ((gw, "sparkfleet/gateway"), (reg, "sparkfleet")):
        assert unit_values(text, "StateDirectory") == [state] and unit_values(text, "StateDirectoryMode") == [
            "0700"
        ]
        assert unit_values(text, "Restart") == ["on-failure"] and unit_values(text, "WantedBy") == [
            "multi-user.target"
        ]
        assert unit_values(text, "User") == ["root"] and unit_values(text, "NoNewPrivileges") == ["true"]
    # a host without services gets neither; one with the registry only, that one
    fleet = root / "hosts" / "fleet.toml"
    fleet.write_text(
        fleet.read_text().replace('services = ["gateway", "registry"]', 'services = ["registry"]')
    )
    assert {n for n in profile_units(root, "spark") if "gateway" in n or "registry" in n} == {
        "sparkfleet-registry.service"
    }
    fleet.write_text(fleet.read_text().replace('services = ["registry"]\n', ""))
    assert not {n for n in profile_units(root, "spark") if "gateway" in n or "registry" in n}


@requires_nixpkgs_lib
def test_nixos_service_units_name_nixpkgs_binaries_and_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    root = tmp_path / "fleet"
    shutil.copytree(REPO / "hosts", root / "hosts", ignore=shutil.ignore_patterns("dgx*"))
    shutil.copytree(REPO / "recipes", root / "recipes", ignore=shutil.ignore_patterns("reports"))
    fleet = root / "hosts" / "fleet.toml"
    fleet.write_text(
        fleet.read_text().replace("[defaults]\n", '[defaults]\nnas_export = "nas.lan:/v/hf"\n', 1)
    )
    _with_services(root, "dgx1")
    recipe = root / "recipes" / "dsv41-flash-4x-mia" / "recipe.toml"
    recipe.write_text(recipe.read_text().replace("[[models]]", "[gateway]\n\n[[models]]", 1))
    cfg = evaluate(root, "dgx1", host_module=nix_str(REPO / "hosts" / "dgx1"))
    assert cfg["failedAssertions"] == []
    gw, reg = cfg["services"]["sparkfleet-gateway"], cfg["services"]["sparkfleet-registry"]
    exe = "/run/current-system/sw/bin/sparkfleet"
    assert exec_argv(gw["serviceConfig"]["ExecStart"]) == [exe, "gateway", "run"]
    assert exec_argv(reg["serviceConfig"]["ExecStart"]) == [exe, "registry", "serve"]
    assert gw["environment"]["SPARKFLEET_NGINX"].endswith("-nginx-1.26.3/bin/nginx")
    # the unit's `path` as NixOS renders it into PATH: nginx's and smg's bin/ (smg: pkgs/smg.nix,
    # sparkfleet.passthru.smg, the one sparkfleet's own Python imports)
    path = gw["environment"]["PATH"].split(":")
    assert "/nix/store/11111111111111111111111111111111-nginx-1.26.3/bin" in path
    assert "/nix/store/33333333333333333333333333333333-smg-1.13.0/bin" in path
    assert reg["environment"]["PATH"].split(":")[0].endswith("-docker-distribution-2.8.3/bin")
    assert reg["environment"]["SPARKFLEET_REGISTRY_BIN"].endswith("-docker-distribution-2.8.3/bin/registry")
    assert gw["environment"]["SPARKFLEET_GATEWAY_STATE"] == "/var/lib/sparkfleet/gateway"
    assert gw["wantedBy"] == ["multi-user.target"] and gw["serviceConfig"]["User"] == "kilork"
    facts = hostfacts.facts(inventory.load(root), "dgx1")
    assert [s.lanes for s in facts.services] == [("dsv41-flash-4x-mia",), ()]
    assert (
        "sparkfleet-gateway"
        not in evaluate(root, "dgx2", host_module=nix_str(REPO / "hosts" / "dgx2"))["services"]
    )
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze not installed")
    sw = tmp_path / "sw"
    sw.mkdir()
    (sw / "sparkfleet").symlink_to(shutil.which("true"))
    units = tmp_path / "units"
    units.mkdir()
    for name in ("sparkfleet-gateway", "sparkfleet-registry"):
        (units / f"{name}.service").write_text(_ini(cfg["services"][name], sw))
    proc = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *map(str, sorted(units.iterdir()))],
        capture_output=True, text=True, check=False, env={**os.environ, "SYSTEMD_LOG_LEVEL": "warning"},
    )  # fmt: skip
    problems = [
        line for line in proc.stderr.splitlines()
        if line.strip() and not any(ok in line for ok in ("kilork", "Failed to connect", "bus", "user"))
    ]  # fmt: skip
    assert not problems, proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(not store_writable(), reason="/nix/store is not writable (the unit's spec root is there)")
def test_rendered_gateway_unit_serves_the_lane_and_stops_with_its_front(tmp_path: Path) -> None:
    with __import__("socket").socket() as s:
        s.bind(("127.0.0.1", 0))
        lane_port = s.getsockname()[1]
    root = _demo_root(tmp_path, lane_port)
    _stage(root, ["spark"])
    profile = tmp_path / "profile"
    (profile / "bin").mkdir(parents=True)
    (profile / "bin" / "sparkfleet").symlink_to(Path(sys.executable).parent / "sparkfleet")
    text = profile_units(root, "spark", profile=str(profile), write_store=True)["sparkfleet-gateway.service"]
    (start,) = (exec_argv(v) for v in unit_values(text, "ExecStart"))
    env = unit_env(text)
    spec_root = Path(env["SPARKFLEET_ROOT"])
    assert sorted(str(p.relative_to(spec_root)) for p in spec_root.rglob("*") if p.is_file()) == [
        "hosts/fleet.toml", "recipes/demo/recipe.toml",
    ]  # fmt: skip
    state = tmp_path / "var-lib-sparkfleet-gateway"  # what StateDirectory= makes (0700)
    state.mkdir(mode=0o700)
    port = free_port()
    # what systemd gives the unit (its Environment= on a bare service environment); the one change:
    # the port, since 8080 may be taken on a shared test machine
    run_env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **env, "SPARKFLEET_GATEWAY_STATE": str(state)}
    inv = inventory.load(spec_root)
    gateway.share_key(inv, state, lanes.call_agent)  # as a deploy of a gateway lane would be
    proc = None
    try:
        assert lanes.launch(inv, "demo", allow_nas_weights=True).ready.ok
        proc = subprocess.Popen([*start, "--port", str(port), "--bind", "127.0.0.1"], env=run_env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
        key = gateway.gateway_key(state)
        deadline = time.monotonic() + 60
        while gateway.served_models(f"http://127.0.0.1:{port}", key) != ["deepseek-v4.1-flash"]:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline
            time.sleep(0.3)
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            data=json.dumps({"model": "deepseek-v4.1-flash", "messages": [{"role": "user", "content": "hi"}],
                             "max_tokens": 4}).encode(),
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.status == 200
        st = gateway.status(state)
        assert st["running"] and st["pid"] == proc.pid  # the unit's main PID is the gateway
        nginx = int((state / "front" / "nginx.pid").read_text())
        proc.send_signal(signal.SIGTERM)  # systemctl stop
        proc.wait(30)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{nginx}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not Path(f"/proc/{nginx}").exists(), "the front outlived the gateway"
        assert not gateway.status(state)["running"]
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        lanes.stop(inv, "demo", 5)
