"""The NixOS modules evaluated with nixpkgs' lib (lib.evalModules) and small NixOS option stubs.

Needs NIXPKGS_LIB (a nix-community/nixpkgs.lib checkout); skipped with that reason otherwise.
What the modules set is compared with sparkfleet.fleet.hostfacts for the same inventory.
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest

from sparkfleet.fleet import hostfacts, inventory
from sparkfleet.view.targets import rules_path, scrape_config

from .conftest import REPO, NixEvalError, nix_eval, nix_str, nixpkgs_lib, requires_nix, requires_nixpkgs_lib

pytestmark = [pytest.mark.nix, requires_nix, requires_nixpkgs_lib]

EVAL_HOST = Path(__file__).parent / "stubs" / "eval-host.nix"
NAS_EXPORT = "nas.lan:/volume1/huggingface"
VIEW_TARGETS = Path("/var/lib/sparkfleet-view/targets")  # the view unit's StateDirectory (modules/view.nix)


# a deploy key, as hosts/authorized_keys gives real hosts (srvos makes users immutable)
KEYS = '{ users.users.kilork.openssh.authorizedKeys.keys = [ "ssh-ed25519 AAAAC3Nza test@ops" ]; }'


def evaluate(
    root: Path, host: str, extra: str = "{ }", host_module: str | None = None, keys: bool = True
) -> dict:
    args = f"nixpkgsLib = {nix_str(nixpkgs_lib())}; fleetRoot = {nix_str(root)}; host = {nix_str(host)}; "
    args += f"extra = {{ imports = [ {KEYS if keys else '{ }'} ({extra}) ]; }};"
    if host_module:
        args += f" hostModule = {host_module};"
    return nix_eval(f"import {EVAL_HOST} {{ {args} }}", timeout=120)


def nixos_line(rule: hostfacts.TmpfilesRule, group: str) -> str:
    """The line NixOS writes to tmpfiles.d for a settings entry (each field quoted, no argument)."""
    return f"'{rule.type}' '{rule.path}' '{rule.mode}' '{rule.user}' '{group}' '{rule.age}' "


@pytest.fixture
def fleet_root(tmp_path: Path) -> Path:
    """The repo's inventory plus the NFS export (which the repo's fleet.toml does not name yet)."""
    root = tmp_path / "fleet"
    shutil.copytree(REPO / "hosts", root / "hosts", ignore=shutil.ignore_patterns("dgx*"))
    shutil.copytree(REPO / "recipes", root / "recipes", ignore=shutil.ignore_patterns("reports"))
    fleet = root / "hosts" / "fleet.toml"
    fleet.write_text(
        fleet.read_text().replace("[defaults]\n", f'[defaults]\nnas_export = "{NAS_EXPORT}"\n', 1)
    )
    return root


@pytest.mark.parametrize("host", ["dgx1", "dgx2", "dgx3", "dgx4"])
def test_host_folders_evaluate_to_what_hostfacts_says(fleet_root: Path, host: str) -> None:
    cfg = evaluate(fleet_root, host, host_module=nix_str(REPO / "hosts" / host))
    facts = hostfacts.facts(inventory.load(fleet_root), host)
    assert cfg["failedAssertions"] == []
    assert cfg["networking"]["hostName"] == host
    (mount,) = facts.mounts
    assert cfg["fileSystems"] == {
        mount.where: {"device": NAS_EXPORT, "fsType": "nfs", "options": list(mount.options)}
    }
    assert "ro" in mount.options and "x-systemd.automount" in mount.options and "_netdev" in mount.options
    assert cfg["boot"]["supportedFilesystems"] == ["nfs"]
    # kilork's primary group on NixOS is `users` (isNormalUser): the rules name it, not "kilork"
    assert cfg["users"]["users"]["kilork"]["group"] == "users"
    # as systemd.tmpfiles.settings, field by field, not raw rule strings; the group the user is
    # declared with on NixOS (`users`), not the DGX OS group of its name
    wanted = sorted(nixos_line(r, group="users") for r in facts.tmpfiles)
    assert sorted(cfg["tmpfiles"]) == wanted
    assert cfg["rawTmpfiles"] == []
    assert "users" in cfg["users"]["groups"]

    stage = cfg["services"]["sparkfleet-stage"]
    # the system path: the same on every generation, so a new build of the tooling changes no unit
    exe = "/run/current-system/sw/bin/sparkfleet"
    assert cfg["systemPackages"] == ["sparkfleet-0.1.0"]
    assert shlex.split(stage["serviceConfig"]["ExecStart"]) == [exe, *facts.staging.argv[1:]]
    assert stage["serviceConfig"]["User"] == facts.staging.user
    assert stage["serviceConfig"]["ReadWritePaths"] == list(facts.staging.readWritePaths)
    assert stage["serviceConfig"]["ProtectSystem"] == "strict"
    assert stage["unitConfig"]["RequiresMountsFor"] == list(facts.staging.requiresMountsFor)
    assert stage["environment"]["SPARKFLEET_ROOT"] == "/etc/sparkfleet/stage-root"
    assert cfg["etc"]["sparkfleet/stage-root"]["source"].endswith(f"-sparkfleet-stage-{host}-spec")
    assert stage["environment"]["SPARKFLEET_REMOTE"] == "/nix/var/nix/profiles/sparkfleet/bin/sparkfleet"
    assert "network-online.target" in stage["after"]
    assert cfg["timers"]["sparkfleet-stage"]["wantedBy"] == ["timers.target"]

    lanes = {
        name: svc
        for name, svc in cfg["services"].items()
        if name.startswith("sparkfleet-lane-") and not name.endswith("-spec")
    }
    assert sorted(lanes) == sorted(unit.unit for unit in facts.lanes)
    for unit in facts.lanes:
        # a switch never restarts a lane by itself; its -spec companion restarts it on a spec change
        assert lanes[unit.unit]["restartIfChanged"] is False
        companion = cfg["services"][f"{unit.unit}-spec"]
        assert companion["reloadIfChanged"] is True and companion["wantedBy"] == ["multi-user.target"]
        (trigger,) = companion["reloadTriggers"]
        assert trigger.endswith(f"-sparkfleet-lane-{unit.lane}-spec")
        assert lanes[unit.unit]["environment"]["SPARKFLEET_ROOT"] == trigger
        assert shlex.split(companion["serviceConfig"]["ExecReload"]) == [
            "/run/current-system/sw/bin/systemctl",
            "try-restart",
            "--no-block",
            f"{unit.unit}.service",
        ]
        svc = lanes[unit.unit]["serviceConfig"]
        assert all(g in cfg["users"]["groups"] for g in svc["SupplementaryGroups"])
        assert svc["LimitMEMLOCK"] == "infinity"  # RDMA registers pinned memory (rootless podman too)
        assert shlex.split(svc["ExecStart"]) == [exe, *unit.startArgv[1:]]
        assert shlex.split(svc["ExecStop"]) == [exe, *unit.stopArgv[1:]]
        assert svc["Type"] == "oneshot" and svc["RemainAfterExit"] is True
        # rootful podman (NixOS): the service's socket, open to the podman group; no rootless podman
        assert svc["SupplementaryGroups"] == ["podman"]
        assert lanes[unit.unit]["environment"]["CONTAINER_HOST"] == "unix:///run/podman/podman.sock"
        assert svc["NoNewPrivileges"] is True and svc["DevicePolicy"] == "closed"
        assert svc["CapabilityBoundingSet"] == "" and svc["ProtectHome"] == "read-only"
        assert svc["ReadWritePaths"] == ["-/home/kilork/hf-local"]  # the hub and the node's records
        assert svc["SystemCallFilter"] == ["@system-service"]
        assert lanes[unit.unit]["conflicts"] == list(unit.conflicts)
        assert lanes[unit.unit]["wantedBy"] == []  # no lane starts at boot unless autostart says so
    # the DGX Spark module: container toolkit (CDI) and podman with docker compat, no docker daemon
    assert cfg["hardware"]["nvidia-container-toolkit"]["enable"] is True
    podman = {"enable": True, "dockerCompat": True, "dockerSocket": {"enable": True}}
    assert cfg["virtualisation"]["podman"] == podman
    assert cfg["virtualisation"]["docker"]["enable"] is False
    # srvos server: wheel is trusted by Nix and sudoes without a password; the deploy user is in it
    assert sorted(cfg["users"]["users"]["kilork"]["extraGroups"]) == ["podman", "wheel"]
    assert "@wheel" in cfg["nix"]["settings"]["trusted-users"]
    assert cfg["security"]["sudo"]["wheelNeedsPassword"] is False
    assert cfg["openssh"]["enable"] is True
    # the fleet view and its Prometheus: on dgx1, which heads every lane, and on no other host
    view = cfg["services"].get("sparkfleet-view")
    prometheus = cfg["prometheus"]
    if host == "dgx1":
        assert shlex.split(view["serviceConfig"]["ExecStart"])[:3] == [exe, "view", "serve"]
        assert prometheus["enable"] is True
        assert prometheus["yml"] == scrape_config(VIEW_TARGETS, rules_path(), 15.0)
    else:
        assert view is None and prometheus["enable"] is False


def test_the_view_follows_the_head_the_lanes_name(fleet_root: Path) -> None:
    """Nothing in the host folders names the head: with dgx2 heading the only lane, dgx2 runs the
    view and its Prometheus and dgx1 neither; with lanes headed from two hosts, no host does."""
    for lane in ("dsv41-flash-4x-mia", "dsv41-flash-4x-aiden"):
        shutil.rmtree(fleet_root / "recipes" / lane)
    recipe = fleet_root / "recipes" / "dsv41-flash-exl3-2x" / "recipe.toml"
    recipe.write_text(recipe.read_text().replace("[world]\n", "[world]\nranks = {dgx1 = 1, dgx2 = 0}\n", 1))
    assert {hostfacts.lane_head(lane) for lane in inventory.load(fleet_root).lanes.values()} == {"dgx2"}

    def runs_view(host: str) -> bool:
        cfg = evaluate(fleet_root, host, host_module=nix_str(REPO / "hosts" / host))
        assert cfg["failedAssertions"] == []
        on = "sparkfleet-view" in cfg["services"]
        assert cfg["prometheus"]["enable"] is on
        return on

    assert [runs_view(h) for h in ("dgx1", "dgx2", "dgx3")] == [False, True, False]
    other = fleet_root / "recipes" / "solo-on-dgx3" / "recipe.toml"
    other.parent.mkdir()
    other.write_text('[lane]\nhosts = ["dgx3"]\n[[models]]\npin = "exl3-3bpw"\n')
    assert [runs_view(h) for h in ("dgx1", "dgx2", "dgx3")] == [False, False, False]


def test_docker_beside_the_spark_modules_podman_fails_evaluation(fleet_root: Path) -> None:
    dgx1 = nix_str(REPO / "hosts" / "dgx1")
    host = f"""{{ imports = [ {dgx1} ]; sparkfleet.lanes.runtime = lib.mkForce "docker"; }}"""
    cfg = evaluate(fleet_root, "dgx1", host_module=f"({{ lib, ... }}: {host})")
    assert "Option dockerCompat conflicts with docker" in cfg["failedAssertions"]


def test_a_host_nobody_can_log_into_fails_evaluation(fleet_root: Path) -> None:
    cfg = evaluate(fleet_root, "dgx1", keys=False)  # no hosts/authorized_keys; srvos: immutable users
    assert any(m.startswith("Neither the root account nor any wheel user") for m in cfg["failedAssertions"])


def test_a_group_that_does_not_exist_is_caught(fleet_root: Path) -> None:
    extra = '{ users.users.kilork.group = "kilork"; }'  # Ubuntu's habit, wrong on NixOS
    cfg = evaluate(fleet_root, "dgx1", extra=extra)
    assert "users.users.kilork.group = kilork: no such group" in cfg["failedAssertions"]


def test_lanes_land_on_their_head_only(fleet_root: Path) -> None:
    here = [s for s in evaluate(fleet_root, "dgx1")["services"] if s.startswith("sparkfleet-lane-")]
    assert len([s for s in here if not s.endswith("-spec")]) == 3  # the TP4, Aiden and EXL3 lanes
    assert [s for s in evaluate(fleet_root, "dgx3")["services"] if s.startswith("sparkfleet-lane-")] == []


def test_missing_nfs_export_fails_with_the_fix() -> None:
    cfg = evaluate(REPO, "dgx1")  # the repo's inventory does not name the export yet
    (message,) = cfg["failedAssertions"]
    assert "nas_export" in message and "hosts/fleet.toml" in message
    assert cfg["fileSystems"] == {}


def test_autostart_must_name_a_lane_headed_here(fleet_root: Path) -> None:
    bad = evaluate(fleet_root, "dgx3", extra='{ sparkfleet.lanes.autostart = "dsv41-flash-4x-mia"; }')
    assert any("not a lane headed by dgx3" in m for m in bad["failedAssertions"])
    good = evaluate(fleet_root, "dgx1", extra='{ sparkfleet.lanes.autostart = "dsv41-flash-4x-mia"; }')
    assert good["failedAssertions"] == []
    assert good["services"]["sparkfleet-lane-dsv41-flash-4x-mia"]["wantedBy"] == ["multi-user.target"]
    assert good["services"]["sparkfleet-lane-dsv41-flash-exl3-2x"]["wantedBy"] == []


def test_local_nvme_and_podman(fleet_root: Path) -> None:
    extra = """{
      sparkfleet.storage.local.device = "/dev/disk/by-label/hf-local";
      sparkfleet.lanes.runtime = "podman";
    }"""
    cfg = evaluate(fleet_root, "dgx1", extra=extra)
    assert cfg["failedAssertions"] == []
    assert cfg["fileSystems"]["/home/kilork/hf-local"] == {
        "device": "/dev/disk/by-label/hf-local",
        "fsType": "ext4",
        "options": ["noatime", "nofail"],
    }
    assert cfg["virtualisation"]["podman"]["enable"] is True
    assert cfg["virtualisation"]["docker"]["enable"] is False
    lane = cfg["services"]["sparkfleet-lane-dsv41-flash-4x-mia"]["serviceConfig"]
    assert lane["SupplementaryGroups"] == ["podman"]


def test_staging_needs_storage_and_its_user(fleet_root: Path) -> None:
    host = '{ sparkfleet = { host = "dgx2"; staging.enable = true; }; system.stateVersion = "26.05"; }'
    cfg = evaluate(fleet_root, "dgx2", host_module=host, keys=False)
    messages = "\n".join(cfg["failedAssertions"])
    assert "needs sparkfleet.storage" in messages
    assert "runs as kilork" in messages and "declare that user" in messages


def test_unknown_host_is_an_evaluation_error(fleet_root: Path) -> None:
    with pytest.raises(NixEvalError, match="unknown host dgx9"):
        evaluate(
            fleet_root, "dgx9", host_module='{ sparkfleet.host = "dgx9"; sparkfleet.staging.enable = true; }'
        )


FLAKE_HOSTS = """
let
  lib = import @LIB@;
  flake = import (@ROOT@ + "/flake.nix");
  stubPkgs = {
    sparkfleet = {
      type = "derivation"; name = "sparkfleet"; meta.mainProgram = "sparkfleet";
      outPath = "/nix/store/00000000000000000000000000000000-sparkfleet";
    };
  };
  nixpkgs.lib = lib // {
    nixosSystem = { system, modules }: lib.evalModules {
      modules = modules ++ [ @STUBS@ { _module.args.pkgs = stubPkgs; } ];
    } // { inherit system; };
  };
  input = dir: (import (dir + "/flake.nix")).outputs { self = null; };
  out = flake.outputs {
    self = out // { outPath = @ROOT@; };
    inherit nixpkgs;
    deploy-rs = { };
    nixos-dgx-spark = input @STUBDIR@/dgx-spark-flake;
    srvos = input @STUBDIR@/srvos-flake;
  };
  show = name: let c = out.nixosConfigurations.${name}; in {
    inherit (c) system;
    failed = map (a: a.message) (builtins.filter (a: !a.assertion) c.config.assertions);
    services = builtins.attrNames c.config.systemd.services;
    root = c.config.systemd.services.sparkfleet-stage.environment.SPARKFLEET_ROOT;
    overlays = builtins.length c.config.nixpkgs.overlays;
    hostName = c.config.networking.hostName;
  };
in builtins.mapAttrs (name: _: show name) out.nixosConfigurations
"""


def test_flake_nixos_configurations_wire_modules_and_host_folders(fleet_root: Path) -> None:
    for part in ("modules", "pkgs"):
        shutil.copytree(REPO / part, fleet_root / part)
    for host in ("dgx1", "dgx2", "dgx3", "dgx4"):
        shutil.copytree(REPO / "hosts" / host, fleet_root / "hosts" / host)
    shutil.copy(REPO / "flake.nix", fleet_root / "flake.nix")
    fleet = fleet_root / "hosts" / "fleet.toml"
    fleet.write_text(fleet.read_text().replace("[hosts.dgx2]\n", '[hosts.dgx2]\nos = "nixos"\n', 1))
    (fleet_root / "hosts" / "authorized_keys").write_text("ssh-ed25519 AAAAC3Nza ops@fleet\n")
    expr = (
        FLAKE_HOSTS.replace("@LIB@", nix_str(nixpkgs_lib()))
        .replace("@ROOT@", nix_str(fleet_root))
        .replace("@STUBS@", nix_str(Path(__file__).parent / "stubs" / "nixos-options.nix"))
        .replace("@STUBDIR@", str(Path(__file__).parent / "stubs"))
    )
    hosts = nix_eval(expr, timeout=120)
    # only the NixOS host has a NixOS configuration, and the example NixOS Spark (no lane)
    assert sorted(hosts) == ["dgx2", "nixos-spark"]
    example = hosts.pop("nixos-spark")
    assert example["failed"] == [] and example["services"] == ["sparkfleet-stage"]
    inv = inventory.load(fleet_root)
    for name, host in hosts.items():
        assert host["system"] == "aarch64-linux" and host["hostName"] == name
        assert host["failed"] == [] and host["overlays"] == 1
        assert host["root"] == "/etc/sparkfleet/stage-root"
        facts = hostfacts.facts(inv, name)
        lanes = [u.unit for u in facts.lanes]
        assert sorted(host["services"]) == sorted(["sparkfleet-stage", *lanes, *(f"{u}-spec" for u in lanes)])


def _ini(svc: dict, sw: Path) -> str:
    """A NixOS systemd.services.<name> value as a unit file (the keys NixOS renders), with the
    system path /run/current-system/sw/bin mapped to `sw` so systemd can check the executables."""

    def value(v: object) -> list[str]:
        items = v if isinstance(v, list) else [v]
        out = []
        for item in items:
            text = ("true" if item else "false") if isinstance(item, bool) else str(item)
            out.append(text.replace("/run/current-system/sw/bin", str(sw)))
        return out

    unit = [f"Description={svc['description']}"]
    for key, opt in (("After", "after"), ("Wants", "wants"), ("Conflicts", "conflicts")):
        unit += [f"{key}={v}" for v in svc.get(opt, [])]
    for key, v in svc.get("unitConfig", {}).items():
        unit += [f"{key}={x}" for x in value(v)]
    service = [f'Environment="{k}={v}"' for k, v in svc.get("environment", {}).items()]
    for key, v in svc["serviceConfig"].items():
        service += [f"{key}={x}" for x in value(v)]
    return "[Unit]\n" + "\n".join(unit) + "\n\n[Service]\n" + "\n".join(service) + "\n"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_nixos_lane_units_and_companions_pass_systemd_analyze_verify(fleet_root: Path, tmp_path: Path):
    import os
    import subprocess

    cfg = evaluate(fleet_root, "dgx1")
    sw = tmp_path / "sw"
    sw.mkdir()
    for tool in ("true", "systemctl", "sparkfleet"):
        (sw / tool).symlink_to(shutil.which("true"))
    units = tmp_path / "units"
    units.mkdir()
    names = [n for n in cfg["services"] if n.startswith("sparkfleet-lane-")]
    assert len(names) == 6  # three lanes, each with its -spec companion
    for name in names:
        (units / f"{name}.service").write_text(_ini(cfg["services"][name], sw))
    proc = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *map(str, sorted(units.iterdir()))],
        capture_output=True, text=True, check=False, env={**os.environ, "SYSTEMD_LOG_LEVEL": "warning"},
    )  # fmt: skip
    # only this machine's own gaps (no kilork user, no bus, mounts it does not have) are tolerated
    problems = [
        line
        for line in proc.stderr.splitlines()
        if line.strip()
        and not any(ok in line for ok in ("kilork", "Failed to connect", "bus", "user", ".mount"))
    ]
    assert not problems, proc.stderr


def test_nixos_lane_units_change_only_with_their_own_spec(fleet_root: Path, tmp_path: Path) -> None:
    """What a switch compares: a new sparkfleet build or a README commit leaves every lane unit
    and companion as it was; a recipe edit changes that lane's companion (reloaded → the lane is
    try-restarted) and no other lane's."""

    def lane_units(cfg: dict) -> dict:
        return {n: s for n, s in cfg["services"].items() if n.startswith("sparkfleet-lane-")}

    before = lane_units(evaluate(fleet_root, "dgx1"))
    newer_tool = (
        '{ lib, ... }: { sparkfleet.package = lib.mkForce { type = "derivation"; name = "sparkfleet-0.2.0"; '
        'outPath = "/nix/store/11111111111111111111111111111111-sparkfleet-0.2.0"; '
        'meta.mainProgram = "sparkfleet"; }; }'
    )
    (fleet_root / "README.md").write_text("a docs commit\n")
    after = evaluate(fleet_root, "dgx1", extra=newer_tool)
    assert after["systemPackages"] == ["sparkfleet-0.2.0"]
    assert lane_units(after) == before

    recipe = fleet_root / "recipes" / "dsv41-flash-exl3-2x" / "recipe.toml"
    recipe.write_text(recipe.read_text() + "\n# tuned\n")
    edited = lane_units(evaluate(fleet_root, "dgx1"))
    changed = sorted(n for n in before if before[n] != edited[n])
    assert changed == ["sparkfleet-lane-dsv41-flash-exl3-2x", "sparkfleet-lane-dsv41-flash-exl3-2x-spec"]
    companion = edited["sparkfleet-lane-dsv41-flash-exl3-2x-spec"]
    assert companion["reloadTriggers"] != before["sparkfleet-lane-dsv41-flash-exl3-2x-spec"]["reloadTriggers"]
    assert edited["sparkfleet-lane-dsv41-flash-exl3-2x"]["restartIfChanged"] is False


def test_unit_environment_keeps_the_spec_roots_string_context() -> None:
    """units.envAttrs splits "K=V" with builtins.match, which drops string context: the value must
    carry the entry's context back, so the spec root a unit names stays in the system's closure."""
    units = nix_str(REPO / "modules" / "lib" / "units.nix")
    expr = (
        f'let u = import {units}; p = builtins.toFile "spec" "x"; '
        's = u.toNixosService { Unit.Description = "d"; '
        'Service.Environment = [ "SPARKFLEET_ROOT=${p}" "PYTHONUNBUFFERED=1" ]; }; in '
        "{ root = builtins.hasContext s.environment.SPARKFLEET_ROOT; "
        "plain = builtins.hasContext s.environment.PYTHONUNBUFFERED; }"
    )
    assert nix_eval(expr) == {"root": True, "plain": False}


def test_a_lane_scoped_watchdog_always_runs_with_its_supervisor(fleet_root: Path) -> None:
    """The EXL3 kit's controller (portable_pair.py watch()) stops both nodes when one stops; its
    recipe says `[watchdog] scope = "lane"`, and `sparkfleet watch` is what stops the other rank
    here: without a unit, a deployed lane kept a surviving rank running with nobody asking."""
    cfg = evaluate(fleet_root, "dgx1")
    assert cfg["failedAssertions"] == []
    unit = cfg["services"]["sparkfleet-watch-dsv41-flash-exl3-2x"]
    assert unit["serviceConfig"]["ExecStart"] == (
        '"/run/current-system/sw/bin/sparkfleet" "watch" "dsv41-flash-exl3-2x"'
    )
    assert unit["wantedBy"] == ["sparkfleet-lane-dsv41-flash-exl3-2x.service"]
    # lanes of the default scope (rank) get one only when named in sparkfleet.lanes.watch
    assert "sparkfleet-watch-dsv41-flash-4x-mia" not in cfg["services"]


def test_a_watched_lane_gets_a_supervisor_unit_that_restarts_on_a_crash_only(fleet_root: Path) -> None:
    """`watch` exits 70 when it crashes (restart it) and 1 when a human is needed (leave it)."""
    extra = '{ sparkfleet.lanes.watch = [ "dsv41-flash-4x-mia" ]; }'
    cfg = evaluate(fleet_root, "dgx1", extra=extra)
    assert cfg["failedAssertions"] == []
    unit = cfg["services"]["sparkfleet-watch-dsv41-flash-4x-mia"]
    sc = unit["serviceConfig"]
    assert sc["ExecStart"] == '"/run/current-system/sw/bin/sparkfleet" "watch" "dsv41-flash-4x-mia"'
    assert (sc["Restart"], sc["RestartPreventExitStatus"]) == ("on-failure", "1")
    assert unit["wantedBy"] == ["sparkfleet-lane-dsv41-flash-4x-mia.service"]
    lane = cfg["services"]["sparkfleet-lane-dsv41-flash-4x-mia"]
    assert sc["User"] == lane["serviceConfig"]["User"]
    assert "sparkfleet-watch-dsv41-flash-4x-aiden" not in cfg["services"]  # only the lanes named
    bad = evaluate(fleet_root, "dgx3", extra=extra)  # dgx3 heads no lane
    assert any("only lanes headed by dgx3 can be watched" in m for m in bad["failedAssertions"])
