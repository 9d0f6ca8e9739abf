"""modules/lib/fleet.nix against sparkfleet.fleet.hostfacts: the same inventory, two readers, one answer."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from sparkfleet.cli.render import to_jsonable
from sparkfleet.fleet import hostfacts, inventory
from support.lanefleet import write_root

from .conftest import FLEET_LIB, REPO, NixEvalError, nix_eval, nix_str, requires_nix

pytestmark = [pytest.mark.nix, requires_nix]


def nix_fleet(root: Path, attr: str) -> object:
    return nix_eval(f"((import {FLEET_LIB}).fromRoot {nix_str(root)}).{attr}")


def python_facts(root: Path) -> dict[str, object]:
    inv = inventory.load(root)
    return {name: to_jsonable(hostfacts.facts(inv, name)) for name in inv.hosts}


def write_fleet(root: Path, fleet: str, recipes: dict[str, str]) -> Path:
    return write_root(root, textwrap.dedent(fleet), {lane: textwrap.dedent(t) for lane, t in recipes.items()})


VARIED_FLEET = """\
    schema_version = 1
    [defaults]
    ssh_user = "ops"
    local_hub = "/srv/hf-local/hub"
    nas_hub = "/mnt/nas/hf/hub"
    nas_export = "nas.lan:/volume1/hf"
    [hosts.a]
    address = "10.0.0.1"
    ssh_port = 2222
    ssh_key = "/home/ops/.ssh/fleet_ed25519"
    os = "nixos"
    [hosts.b]
    address = "10.0.0.2"
    local_hub = "/data/hub"
    [hosts.c]
    address = "c.lan"
    ssh_user = "svc"
    [pins.m]
    kind = "hf"
    repo = "org/model"
    revision = "0123456789abcdef0123456789abcdef01234567"
    [pins.img]
    kind = "oci"
    image = "lmsysorg/sglang"
    tag = "dev"
    digest = "sha256:3dbc"
    [pins.src]
    kind = "url"
    url = "https://example.org/a.tar.gz"
    sha256 = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
    commit = "abcdef0"
    [pins.repo]
    kind = "git"
    repo = "org/repo"
    rev = "cad252b7d3"
    nix_hash = "sha256-znKOwPXQnt3o7lDb3hdf19oDo0BLP4MfBOYiWkEHoik="
    [pins.mirrored]
    kind = "git"
    repo = "org/kit"
    rev = "878e0eecd893fadc69ad2d58b2df0fabb0fae2ee"
    url = "/nas/git/kit.git"
"""

VARIED_RECIPES = {
    "two": """\
        [lane]
        hosts = ["a", "b"]
        [world]
        tp = 2
        ranks = {a = 1, b = 0}
        [launch]
        command = ["serve"]
        receipt_roots = ["/cache/r1", "/cache/r2", "/var/lib/kit/r3"]
        [watchdog]
        scope = "lane"
        [[models]]
        pin = "m"
    """,
    "solo": """\
        [lane]
        hosts = ["a"]
        [[models]]
        pin = "m"
    """,
}


def test_repo_inventory_facts_agree() -> None:
    assert nix_fleet(REPO, "allFacts") == python_facts(REPO)


def test_varied_inventory_facts_agree(tmp_path: Path) -> None:
    root = write_fleet(tmp_path, VARIED_FLEET, VARIED_RECIPES)
    from_nix = nix_fleet(root, "allFacts")
    assert from_nix == python_facts(root)
    # and the record says what the inventory says, not merely the same thing twice
    a = from_nix["a"]
    assert a["sshPort"] == 2222 and a["os"] == "nixos" and from_nix["b"]["os"] == "dgx-os"
    assert a["mounts"] == [
        {
            "where": "/mnt/nas/hf",
            "what": "nas.lan:/volume1/hf",
            "fsType": "nfs",
            "options": list(hostfacts.NFS_OPTIONS),
            "readOnly": True,
        }
    ]
    # rules as fields (NixOS takes them as systemd.tmpfiles.settings; no line is split)
    assert a["tmpfiles"] == [
        {"type": "d", "path": p, "mode": "0755", "user": "ops", "group": "ops", "age": "-"}
        for p in ("/srv/hf-local/hub", "/cache", "/var/lib/kit")
    ]
    # lane "two" is headed by b (ranks = {a = 1, b = 0}): its unit lives on b, not on a
    assert [unit["lane"] for unit in a["lanes"]] == ["solo"] and a["lanes"][0]["conflicts"] == []
    (two,) = from_nix["b"]["lanes"]
    assert two["hosts"] == ["b", "a"] and two["startArgv"] == ["sparkfleet", "launch", "two", "--no-wait"]
    assert two["stopArgv"] == ["sparkfleet", "stop", "two"] and two["timeoutStartSec"] == 1800
    # [watchdog] scope = "lane" always runs with its supervisor; the default (rank) does not
    assert two["supervised"] is True and a["lanes"][0]["supervised"] is False
    assert from_nix["b"]["staging"]["lock"] == "/data/hub/.locks/sparkfleet-stage.lock"
    # --here: the unit runs on the host itself, whatever its OS calls itself (no ssh to self)
    assert from_nix["b"]["staging"]["argv"] == ["sparkfleet", "stage", "b", "--here", "--json"]
    assert from_nix["c"]["lanes"] == [] and from_nix["c"]["sshUser"] == "svc"


def test_pins_agree(tmp_path: Path) -> None:
    for root in (REPO, write_fleet(tmp_path, VARIED_FLEET, VARIED_RECIPES)):
        from_nix = nix_fleet(root, "pins")
        inv = inventory.load(root)
        assert set(from_nix) == set(inv.pins)
        for name, pin in inv.pins.items():
            n = from_nix[name]
            assert (n["kind"], n["value"], n["source"], n["resolved"]) == (
                pin.kind,
                pin.value,
                pin.source,
                pin.resolved,
            ), name
            assert (n["tag"], n["commit"], n["nixHash"]) == (pin.tag, pin.commit, pin.nix_hash), name
            # where a host clones a git pin from ([[launch.trees]]: stage fetches the kit)
            assert n["cloneUrl"] == (pin.clone_url if pin.kind == "git" else None), name


@pytest.mark.parametrize("os_name", ["nixos", "dgx-os"])
def test_deploy_node_agrees(tmp_path: Path, os_name: str) -> None:
    fleet = VARIED_FLEET.replace('os = "nixos"', f'os = "{os_name}"')
    root = write_fleet(tmp_path, fleet, VARIED_RECIPES)
    profiles = {"system": "/nix/store/sys", "sparkfleet": "/nix/store/sf"}
    expr = (
        f'((import {FLEET_LIB}).fromRoot {nix_str(root)}).deployNode "a" '
        '{ system = "/nix/store/sys"; sparkfleet = "/nix/store/sf"; }'
    )
    node = nix_eval(expr)
    assert node == hostfacts.deploy_node(inventory.load(root), "a", profiles)
    expected = ["system", "sparkfleet"] if os_name == "nixos" else ["sparkfleet"]
    assert node["profilesOrder"] == expected and sorted(node["profiles"]) == sorted(expected)
    assert node["hostname"] == "10.0.0.1"
    assert node["sshOpts"] == ["-p", "2222", "-i", "/home/ops/.ssh/fleet_ed25519"]
    assert node["activationTimeout"] > 240


def test_unresolved_pin_stops_a_build_with_the_fix(tmp_path: Path) -> None:
    root = write_fleet(tmp_path, VARIED_FLEET, VARIED_RECIPES)
    lib = f"((import {FLEET_LIB}).fromRoot {nix_str(root)})"
    with pytest.raises(NixEvalError) as err:
        nix_eval(f'({lib}.requirePin "img" "value").value')
    assert "pin img is unresolved" in str(err.value)
    assert "sparkfleet pins resolve img" in str(err.value)
    with pytest.raises(NixEvalError, match="pin m has no nix_hash"):
        nix_eval(f'({lib}.requirePin "m" "nixHash").value')
    assert nix_eval(f'({lib}.requirePin "m" "value").value') == "0123456789abcdef0123456789abcdef01234567"


def test_unknown_host_is_an_error_in_both_readers(tmp_path: Path) -> None:
    root = write_fleet(tmp_path, VARIED_FLEET, VARIED_RECIPES)
    with pytest.raises(NixEvalError, match="unknown host zz"):
        nix_fleet(root, 'facts "zz"')
    with pytest.raises(inventory.InventoryError, match="unknown host 'zz'"):
        hostfacts.facts(inventory.load(root), "zz")


def test_repo_recipes_are_read_by_nix_with_the_same_lane_set(tmp_path: Path) -> None:
    # A folder without a recipe.toml is not a lane for either reader.
    root = tmp_path / "fleet"
    shutil.copytree(REPO / "hosts", root / "hosts", ignore=shutil.ignore_patterns("dgx*"))
    shutil.copytree(REPO / "recipes", root / "recipes", ignore=shutil.ignore_patterns("reports"))
    (root / "recipes" / "not-a-lane").mkdir()
    assert sorted(nix_fleet(root, "lanes")) == sorted(inventory.load(root).lanes)


def test_lanes_headed_on_one_host_conflict() -> None:
    dgx1 = nix_fleet(REPO, 'facts "dgx1"')
    units = {unit["lane"]: unit for unit in dgx1["lanes"]}
    for lane, unit in units.items():
        others = {f"sparkfleet-lane-{o}.service" for o in units if o != lane}
        assert set(unit["conflicts"]) == others
    assert nix_fleet(REPO, 'facts "dgx3"')["lanes"] == []  # dgx3 is a worker only


def test_image_env_agrees_with_the_launch_code() -> None:
    launch = pytest.importorskip("sparkfleet.lane.recipe", reason="launch code not present")
    inv = inventory.load(REPO)
    for name, lane in inv.lanes.items():
        world = launch.world_of(lane)
        expected = {"TP_SIZE": str(world.tp), "EP_SIZE": str(world.ep), "DSV41_TP_PAD": str(world.pad)}
        if world.launcher:
            expected["DSV41_LAUNCHER"] = world.launcher
        assert nix_fleet(REPO, f'imageEnv "{name}"') == expected, name
    assert nix_fleet(REPO, 'imageEnv "dsv41-flash-4x-mia"')["DSV41_LAUNCHER"] == "tp4"


def test_fleet_services_agree(tmp_path: Path) -> None:
    """hosts.<h>.services: the gateway and registry units, with the gateway's lanes, in both readers."""
    services = '    services = ["registry", "gateway"]\n'
    fleet = VARIED_FLEET.replace("ssh_port = 2222\n", "ssh_port = 2222\n" + services)
    recipes = {**VARIED_RECIPES, "solo": VARIED_RECIPES["solo"] + "    [gateway]\n"}
    root = write_fleet(tmp_path, fleet, recipes)
    from_nix = nix_fleet(root, "allFacts")
    assert from_nix == python_facts(root)
    assert from_nix["a"]["services"] == [
        {"service": "gateway", "unit": "sparkfleet-gateway", "user": "ops",
         "argv": ["sparkfleet", "gateway", "run"], "stateDir": "/var/lib/sparkfleet/gateway",
         "lanes": ["solo"]},
        {"service": "registry", "unit": "sparkfleet-registry", "user": "ops",
         "argv": ["sparkfleet", "registry", "serve"], "stateDir": "/var/lib/sparkfleet", "lanes": []},
    ]  # fmt: skip
    assert from_nix["b"]["services"] == [] and from_nix["c"]["services"] == []


def test_a_copys_host_serves_the_lane_in_both_readers(tmp_path: Path) -> None:
    """`[gateway] replicas`: lanesOf (the staging unit's lanes) counts every copy's hosts, as
    Inventory.lanes_of does; the copy's host gets the lane's receipt parents but no lane unit (the
    head of replica 0 runs `launch LANE`; a copy is `launch LANE --replica N`)."""
    launch = '        [launch]\n        command = ["serve"]\n        receipt_roots = ["/opt/solo/r"]\n'
    solo = VARIED_RECIPES["solo"].replace('hosts = ["a"]\n', 'hosts = ["a"]\n' + launch)
    recipes = {**VARIED_RECIPES, "solo": solo + '        [gateway]\n        replicas = [["a"], ["c"]]\n'}
    root = write_fleet(tmp_path, VARIED_FLEET, recipes)
    inv = inventory.load(root)
    for host in inv.hosts:
        assert nix_fleet(root, f'lanesOf "{host}"') == [ln.name for ln in inv.lanes_of(host)], host
    assert nix_fleet(root, 'lanesOf "c"') == ["solo"]  # before: [] (lane.hosts only)
    from_nix = nix_fleet(root, "allFacts")
    assert from_nix == python_facts(root)
    solo_parent = {
        "type": "d",
        "path": "/opt/solo",
        "mode": "0755",
        "user": "svc",
        "group": "svc",
        "age": "-",
    }
    assert solo_parent in from_nix["c"]["tmpfiles"] and from_nix["c"]["lanes"] == []


def test_the_head_host_is_the_one_heading_every_lane(tmp_path: Path) -> None:
    """headHost (where hosts/common.nix puts the view and its Prometheus): the host that heads every
    lane, by the ranks Python reads too (hostfacts.lane_head); none when the heads differ or no
    lane has one."""

    def heads(root: Path) -> set[str]:
        return {hostfacts.lane_head(lane) for lane in inventory.load(root).lanes.values()}

    assert heads(REPO) == {"dgx1"} and nix_fleet(REPO, "headHost") == "dgx1"
    varied = write_fleet(tmp_path / "varied", VARIED_FLEET, VARIED_RECIPES)
    assert heads(varied) == {"a", "b"} and nix_fleet(varied, "headHost") is None
    # "two" alone: b heads it by its ranks, though a comes first in lane.hosts
    two = write_fleet(tmp_path / "two", VARIED_FLEET, {"two": VARIED_RECIPES["two"]})
    assert heads(two) == {"b"} and nix_fleet(two, "headHost") == "b"
    assert nix_fleet(write_fleet(tmp_path / "none", VARIED_FLEET, {}), "headHost") is None
