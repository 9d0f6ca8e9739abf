"""A lane with [engram]: every rank's env names its packed dir and a container gets it bound read-only."""

from __future__ import annotations

import pytest
from engram_helpers import PARTS_TABLES

from sparkfleet.base.errors import InventoryError
from sparkfleet.engram.config import packed_dir
from sparkfleet.lane.manifest import build_manifest
from sparkfleet.lane.recipe import launch_recipe
from sparkfleet.lane.spec import build_spec

DIGEST = "sha256:" + "ab" * 32
LAUNCH = """
[world]
tp = 2

[launch]
runtime = "{runtime}"
{image}fabric = "none"
gpus = "none"
command = ["serve", "--tp", "{{tp}}"]
"""


def spec_for(fleet, lane: str, host: str):
    inv = fleet.inv()
    recipe = launch_recipe(inv, lane)
    h = inv.host(host)
    manifest = build_manifest(
        host, h.local_hub, h.nas_hub, [], "/hub" if recipe.runtime != "process" else None
    )
    return build_spec(inv, recipe, host, manifest, {})


@pytest.fixture
def fleet2(fleet):
    fleet_toml = fleet.root / "hosts" / "fleet.toml"
    fleet_toml.write_text(
        fleet_toml.read_text() + f'\n[pins.img]\nkind = "oci"\nimage = "x/y"\ndigest = "{DIGEST}"\n'
    )
    return fleet


def test_container_rank_gets_env_and_read_only_bind(fleet2):
    fleet2.add_lane(
        "dock", ["h1", "h2"], PARTS_TABLES + LAUNCH.format(runtime="docker", image='image = "img"\n')
    )
    spec = spec_for(fleet2, "dock", "h2")
    assert spec.env["DSV41_PACKED_DIR"] == "/engram"
    binds = [b for b in spec.binds if b.origin == "engram"]
    assert len(binds) == 1 and binds[0].read_only
    assert binds[0].source == fleet2.out_dir("dock", "h2") == packed_dir(fleet2.inv(), "dock", "h2")
    assert binds[0].docker_arg() == f"{fleet2.out_dir('dock', 'h2')}:/engram:ro"


def test_process_rank_gets_the_host_path(fleet2):
    fleet2.add_lane("proc", ["h3", "h4"], PARTS_TABLES + LAUNCH.format(runtime="process", image=""))
    spec = spec_for(fleet2, "proc", "h4")
    assert spec.env["DSV41_PACKED_DIR"] == str(fleet2.out_dir("proc", "h4"))
    assert not [b for b in spec.binds if b.origin == "engram"]


def test_lane_without_engram_is_unchanged(fleet2):
    path = fleet2.root / "recipes" / "plain" / "recipe.toml"
    path.parent.mkdir(parents=True)
    path.write_text(
        '[lane]\nhosts = ["h1", "h2"]\n\n[[models]]\npin = "engram-ckpt"\n'
        + LAUNCH.format(runtime="process", image="")
    )
    spec = spec_for(fleet2, "plain", "h1")
    assert "DSV41_PACKED_DIR" not in spec.env
    assert packed_dir(fleet2.inv(), "plain", "h1") is None


def test_restating_the_packed_dir_in_launch_env_is_refused(fleet2):
    fleet2.add_lane(
        "twice",
        ["h1", "h2"],
        PARTS_TABLES
        + LAUNCH.format(runtime="process", image="")
        + '\n[launch.env]\nDSV41_PACKED_DIR = "/x"\n',
    )
    with pytest.raises(InventoryError, match="launch.env sets DSV41_PACKED_DIR"):
        spec_for(fleet2, "twice", "h1")


def test_out_dir_template_and_world_ranks(fleet2):
    fleet2.add_lane(
        "custom",
        ["h1", "h2"],
        'out_dir = "/srv/engram/{lane}/{host}"\nmount = "/packs"\n'
        + PARTS_TABLES
        + LAUNCH.format(runtime="process", image="").replace(
            "tp = 2\n", "tp = 2\nranks = { h1 = 1, h2 = 0 }\n"
        ),
    )
    inv = fleet2.inv()
    assert str(packed_dir(inv, "custom", "h2")) == "/srv/engram/custom/h2"
    from sparkfleet.engram.pack import plan

    assert plan(inv, "custom", "h2").placement.rank == 0  # [world.ranks] wins: the pack matches NODE_RANK
    assert plan(inv, "custom", "h1").files[0].name == "engram-l1-r1of2.bin"
