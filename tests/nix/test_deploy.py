"""The flake's `deploy` output, evaluated without nixpkgs, checked against deploy-rs's node schema.

flake.nix's outputs function is called with stand-ins: deploy-rs's lib as its flake.nix writes it
(activate.{nixos,custom} build the activatable buildEnv) over derivation-shaped trivial builders,
and `self` holds per-host profile packages and NixOS toplevels by name. The nodes
come out of modules/lib/fleet.nix, so this is the real wiring of hosts, profiles and settings.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest

from sparkfleet import hostfacts, inventory

from .conftest import REPO, nix_eval, nix_str, requires_nix

pytestmark = [pytest.mark.nix, requires_nix]

SCHEMA = json.loads((Path(__file__).parent / "deploy-rs-nodes.schema.json").read_text())
DEPLOY_RS_MIRROR = Path("/work/.mirror/serokell+deploy-rs/repo")
STORE = "/nix/store/00000000000000000000000000000000"

STUBS = Path(__file__).parent / "stubs"
STUB_INPUTS = f"""
let
  flake = import (ROOT + "/flake.nix");
  fleet = (import (ROOT + "/modules/lib/fleet.nix")).fromRoot ROOT;
  byHost = f: builtins.listToAttrs (map (h: {{ name = h; value = f h; }}) fleet.hostNames);
  stubFlake = dir: (import (dir + "/flake.nix")).outputs {{ self = null; }};
  self = {{
    overlays.default = final: prev: {{ }};
    nixosConfigurations = byHost (h: {{
      config.networking.hostName = h;
      config.system.build.toplevel = {{ type = "derivation"; name = "nixos-system-" + h; }};
    }});
    packages.aarch64-linux = builtins.listToAttrs (map (h: {{
      name = "sparkfleet-profile-" + h;
      value = {{ type = "derivation"; name = "sparkfleet-profile-" + h; }};
    }}) fleet.hostNames);
  }};
in (flake.outputs {{
  inherit self;
  nixpkgs = {STUBS}/deploy-nixpkgs;
  deploy-rs = stubFlake {STUBS}/deploy-rs-flake;
  nixos-dgx-spark = stubFlake {STUBS}/dgx-spark-flake;
  srvos = stubFlake {STUBS}/srvos-flake;
}}).deploy
"""
# activate-rs comes from nixpkgs' deploy-rs package (its binary cache), not a build of the flake
ACTIVATE_RS = f'exec {STORE}-deploy-rs/bin/activate "$@"'


def flake_copy(dest: Path, nixos_hosts: tuple[str, ...] = ()) -> Path:
    for part in ("modules/lib", "hosts", "recipes"):
        shutil.copytree(REPO / part, dest / part, ignore=shutil.ignore_patterns("reports"))
    shutil.copy(REPO / "flake.nix", dest / "flake.nix")
    fleet = dest / "hosts" / "fleet.toml"
    text = fleet.read_text()
    for host in nixos_hosts:
        text = text.replace(f"[hosts.{host}]\n", f'[hosts.{host}]\nos = "nixos"\n', 1)
    fleet.write_text(text)
    return dest


def deploy_output(root: Path) -> dict:
    return nix_eval(f"let ROOT = {nix_str(root)}; in {STUB_INPUTS}")


def test_deploy_nodes_validate_and_match_hostfacts(tmp_path: Path) -> None:
    root = flake_copy(tmp_path / "flake", nixos_hosts=("dgx2",))
    deploy = deploy_output(root)
    jsonschema.Draft202012Validator(SCHEMA).validate(deploy)
    inv = inventory.load(root)
    assert sorted(deploy["nodes"]) == sorted(inv.hosts)
    for host, node in deploy["nodes"].items():
        profiles = {
            "system": f"{STORE}-activatable-nixos-system-{host}"
            if inv.hosts[host].os == "nixos"
            else None,
            "sparkfleet": f"{STORE}-activatable-sparkfleet-profile-{host}",
        }
        assert node == hostfacts.deploy_node(inv, host, profiles)
        assert set(node["profilesOrder"]) == set(node["profiles"])
        # a lane image load at activation must fit: well above deploy-rs's 240 s default
        assert node["activationTimeout"] >= 900
        # aarch64 profiles from an x86_64 operator machine: the Spark builds them itself
        assert node["remoteBuild"] is True
    assert deploy["nodes"]["dgx2"]["profilesOrder"] == ["system", "sparkfleet"]
    assert deploy["nodes"]["dgx1"]["profilesOrder"] == ["sparkfleet"]  # DGX OS: no NixOS system profile
    # what each activatable profile holds: the base, deploy-rs-activate, and activate-rs from
    # nixpkgs' cached deploy-rs (not a build of deploy-rs's flake)
    held = nix_eval(
        f"let ROOT = {nix_str(root)}; d = {STUB_INPUTS}; in builtins.mapAttrs (_: n: builtins.mapAttrs "
        "(_: p: map (x: x.text or x.name) p.path.paths) n.profiles) d.nodes"
    )
    for host, profiles in held.items():
        for name, (base, activate, activate_rs) in profiles.items():
            assert base == ("nixos-system-" if name == "system" else "sparkfleet-profile-") + host
            assert "$PROFILE/bin/switch-to-configuration switch" in activate if name == "system" else True
            assert ACTIVATE_RS in activate_rs
    assert (
        deploy["nodes"]["dgx2"]["profiles"]["sparkfleet"]["profilePath"] == "/nix/var/nix/profiles/sparkfleet"
    )


def test_schema_refuses_what_deploy_rs_would_trip_on(tmp_path: Path) -> None:
    deploy = deploy_output(flake_copy(tmp_path / "flake"))
    validator = jsonschema.Draft202012Validator(SCHEMA)
    node = deploy["nodes"]["dgx1"]
    for broken in (
        {k: v for k, v in node.items() if k != "hostname"},
        {**node, "profiles": {"sparkfleet": {"user": "root"}}},
        {**node, "magicRollback": "yes"},
        {**node, "activationTimout": 900},  # a typo deploy-rs would ignore
    ):
        assert not validator.is_valid({"nodes": {"dgx1": broken}}), broken


@pytest.mark.skipif(
    not DEPLOY_RS_MIRROR.is_dir(), reason="no local deploy-rs snapshot to read interface.json from"
)
def test_deploy_output_also_satisfies_deploy_rs_interface_json(tmp_path: Path) -> None:
    text = subprocess.run(
        ["git", "-C", str(DEPLOY_RS_MIRROR), "show", "HEAD:interface.json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    upstream = json.loads(text)
    deploy = deploy_output(flake_copy(tmp_path / "flake", nixos_hosts=("dgx1", "dgx3")))
    jsonschema.Draft201909Validator(upstream).validate(deploy)  # its $schema names draft 2019-09


def test_flake_lock_matches_the_flake_inputs() -> None:
    lock = json.loads((REPO / "flake.lock").read_text())
    inputs = nix_eval(f"builtins.attrNames (import {REPO / 'flake.nix'}).inputs")
    nodes = lock["nodes"]
    assert lock["version"] == 7 and sorted(nodes[lock["root"]]["inputs"]) == sorted(inputs)
    for name, node in nodes.items():
        if name == lock["root"]:
            continue
        locked = node["locked"]
        assert locked["type"] == "github", name
        assert len(locked["rev"]) == 40 and int(locked["rev"], 16) >= 0, name
        assert locked["narHash"].startswith("sha256-") and len(locked["narHash"]) == 51, name
        assert isinstance(locked["lastModified"], int), name
        for dep in node.get("inputs", {}).values():
            assert resolve(lock, dep) in nodes, (name, dep)
    assert nodes["nixpkgs"]["original"]["ref"] == "nixos-25.11"  # a release branch
    # one nixpkgs: every input that takes nixpkgs follows ours, so nothing is evaluated or built twice
    root = nodes[lock["root"]]["inputs"]
    for name in ("deploy-rs", "nixos-dgx-spark", "srvos"):
        assert nodes[root[name]]["inputs"]["nixpkgs"] == ["nixpkgs"], name
    locked_nixpkgs = [n for n, v in nodes.items() if v.get("locked", {}).get("repo") == "nixpkgs"]
    assert locked_nixpkgs == ["nixpkgs"]


def resolve(lock: dict, ref: str | list[str]) -> str:
    """A lock input reference to its node: a node name, or a follows path from the root."""
    if isinstance(ref, str):
        return ref
    node = lock["root"]
    for step in ref:
        node = resolve(lock, lock["nodes"][node]["inputs"][step])
    return node


MIRRORS = {
    "deploy-rs": DEPLOY_RS_MIRROR,
    "nixos-dgx-spark": Path("/work/.mirror/graham33+nixos-dgx-spark/repo"),
    "srvos": Path("/work/.mirror/nix-community+srvos/repo"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MIRRORS))
def test_locked_narhash_is_the_hash_of_its_locked_rev(tmp_path: Path, name: str) -> None:
    """A lock entry's narHash and lastModified, recomputed from a local snapshot of the repository
    (git archive | nix hash path: GitHub's tarball is the git archive; none of these has
    .gitattributes or submodules), so no entry of flake.lock is invented."""
    mirror = MIRRORS[name]
    if shutil.which("nix") is None or not mirror.is_dir():
        pytest.skip(f"nix or a local snapshot of {name} is missing")
    locked = json.loads((REPO / "flake.lock").read_text())["nodes"][name]["locked"]
    have = subprocess.run(["git", "-C", str(mirror), "cat-file", "-e", f"{locked['rev']}^{{commit}}"])
    if have.returncode != 0:
        pytest.skip(f"the {name} snapshot does not hold {locked['rev']}")
    committed = subprocess.run(
        ["git", "-C", str(mirror), "log", "-1", "--format=%ct", locked["rev"]],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert int(committed) == locked["lastModified"]
    tree = tmp_path / "src"
    tree.mkdir()
    archive = subprocess.Popen(["git", "-C", str(mirror), "archive", locked["rev"]], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(tree)], stdin=archive.stdout, check=True)
    assert archive.wait() == 0
    nar = subprocess.run(
        [
            "nix",
            "--extra-experimental-features",
            "nix-command",
            "hash",
            "path",
            "--type",
            "sha256",
            str(tree),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert nar == locked["narHash"]


@pytest.mark.parametrize("name", ["nixos-dgx-spark", "srvos"])
def test_transitive_lock_entries_are_the_inputs_own_locks(name: str) -> None:
    """An input's own inputs are locked as its flake.lock (at the locked rev) locks them, except
    nixpkgs, which follows ours: nothing in flake.lock is invented."""
    mirror = MIRRORS[name]
    lock = json.loads((REPO / "flake.lock").read_text())
    rev = lock["nodes"][name]["locked"]["rev"]
    if not mirror.is_dir():
        pytest.skip(f"no local snapshot of {name}")
    text = subprocess.run(
        ["git", "-C", str(mirror), "show", f"{rev}:flake.lock"], capture_output=True, text=True, check=False
    )
    if text.returncode != 0:
        pytest.skip(f"the {name} snapshot does not hold {rev}")
    theirs = json.loads(text.stdout)
    their_root = theirs["nodes"][theirs["root"]]["inputs"]
    ours = lock["nodes"][name]["inputs"]
    assert sorted(ours) == sorted(their_root)
    assert ours["nixpkgs"] == ["nixpkgs"]

    def walk(their_ref, our_ref) -> None:
        t = theirs["nodes"][their_ref]
        o = lock["nodes"][resolve(lock, our_ref)]
        assert o["locked"] == t["locked"] and o.get("original") == t.get("original")
        for key, ref in (t.get("inputs") or {}).items():
            if isinstance(ref, list):  # a follows inside their lock: from our root through this input
                target = [name, *ref]
                assert resolve(lock, o["inputs"][key]) == resolve(lock, target)
            else:
                walk(ref, o["inputs"][key])

    for key, ref in their_root.items():
        if key != "nixpkgs":
            walk(ref, ours[key])
