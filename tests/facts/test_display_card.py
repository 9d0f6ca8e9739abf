"""The EXL3 lane's DRM card ([launch.display]): given to each rank, checked on each node.

The kit keeps its KV cache in display memory: portable_node.py docker_command() (878e0ee) gives the
container the node's DRM card at /dev/dri/card0 with the card's group, and its preflight refuses a
node unless nvidia_drm reads modeset=Y and fbdev=N and the card is a character device. Before this,
sparkfleet passed neither (the recipe listed both flags as "not applied"): every EXL3 rank would
have booted without its KV pool. Here the node side is the agent's own probe, reading this
machine's /sys and /dev (it has no DRM card and no nvidia_drm, so the real lane is refused here),
and a character device made with mknod stands for a card where the test needs one that is there.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path

import pytest

from sparkfleet.base.errors import ExitCode, InventoryError, SparkfleetError
from sparkfleet.facts.display import DisplayDevice, card_gid, display_problems, read_display
from sparkfleet.fleet import inventory
from sparkfleet.lane.recipe import launch_recipe
from sparkfleet.launch.plan import check_display, dry_run, node_facts, planned_argv, probe_request
from sparkfleet.node.agent import probe
from sparkfleet.node.protocol import ProbeRequest
from sparkfleet.ops.doctor import display_check
from support.lanefleet import repo_fleet

LANE = "dsv41-flash-exl3-2x"
NEEDS = (("fbdev", "N"), ("modeset", "Y"))


def _card(tmp_path: Path, gid: int = 4242) -> Path:
    """A real character device (the null device's numbers) owned by group `gid`: a card that is there."""
    if os.geteuid() != 0:
        pytest.skip("mknod of a character device needs root")
    card = tmp_path / "dri" / "card0"
    card.parent.mkdir()
    os.mknod(card, stat.S_IFCHR | 0o660, os.makedev(1, 3))
    os.chown(card, 0, gid)
    return card


def _parameters(tmp_path: Path, **values: str) -> Path:
    """A parameters directory as /sys/module/nvidia_drm/parameters reads (one file, one line each)."""
    d = tmp_path / "parameters"
    d.mkdir()
    for name, value in values.items():
        (d / name).write_text(value + "\n")
    return d


def test_the_exl3_lane_gives_each_rank_its_hosts_card_and_the_cards_group(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(tmp_path / "state"))
    inv = inventory.load(repo_fleet(tmp_path / "fleet"))
    plan = dry_run(inv, LANE)
    for spec in plan.by_rank():
        assert spec.display == DisplayDevice(inv.host(spec.host).drm_card or "", "/dev/dri/card0", NEEDS)
        argv = planned_argv(spec)
        assert argv[argv.index("/dev/dri/card0:/dev/dri/card0") - 1] == "--device"
        # off the node the group is not guessed: the node reads it from the card at start
        assert argv[argv.index("--group-add") + 1] == f"<gid of /dev/dri/card0 on {spec.host}>"
    assert "--privileged" not in argv  # the card and its group only: the worker is never elevated


def test_a_host_without_a_drm_card_is_refused_before_any_host_is_asked(tmp_path):
    root = repo_fleet(tmp_path / "fleet")
    fleet = root / "hosts" / "fleet.toml"
    fleet.write_text(fleet.read_text().replace('drm_card = "/dev/dri/card0"\n', "", 1))
    inv = inventory.load(root)
    with pytest.raises(SparkfleetError, match=r"launch.display needs the DRM card of dgx1.*no drm_card"):
        dry_run(inv, LANE)
    fleet.write_text(fleet.read_text().replace('[hosts.dgx1]\n', '[hosts.dgx1]\ndrm_card = "/dev/sda"\n'))
    with pytest.raises(InventoryError, match="drm_card"):  # the kit's own rule: /dev/dri/cardN only
        inventory.load(root)


def test_this_machine_has_no_card_and_the_lane_is_refused_naming_both(tmp_path, monkeypatch):
    """The agent's probe on this machine (no /dev/dri/card0, no nvidia_drm module): launch refuses
    with exit 5, naming the host, the card and each parameter; doctor shows the same with the fix."""
    if os.path.exists("/dev/dri/card0") or os.path.exists("/sys/module/nvidia_drm"):
        pytest.skip("this machine has a DRM card or nvidia_drm: the refusal is for a machine without")
    monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(tmp_path / "state"))
    inv = inventory.load(repo_fleet(tmp_path / "fleet"))
    recipe = launch_recipe(inv, LANE)
    req = probe_request(inv, recipe, inv.host("dgx2"))  # only the display: the agent's own check
    req = dataclasses.replace(req, models=[], ports=[], memory=False, kits=None)
    facts = node_facts("dgx2", probe(req))
    with pytest.raises(SparkfleetError) as exc:
        check_display(recipe, facts)
    assert exc.value.exit_code == ExitCode.REFUSED
    msg = exc.value.message
    assert msg.startswith(f"dgx2: lane {LANE} keeps its KV cache in display memory")
    assert "/dev/dri/card0 is not a character device here" in msg
    assert "nvidia_drm modeset: not readable" in msg and "needs Y" in msg
    assert "nvidia_drm fbdev: not readable" in msg
    assert "modeset=Y" in exc.value.hint and "sparkfleet changes no module parameter" in exc.value.hint
    check = display_check("dgx2", recipe.display, facts.display)
    assert check.ok is False and check.refuses and check.hint == exc.value.hint
    assert "/dev/dri/card0 is not a character device here" in check.detail


def test_a_card_that_is_there_with_the_wrong_module_parameter_is_named(tmp_path):
    card = _card(tmp_path)
    dev = DisplayDevice(str(card), "/dev/dri/card0", NEEDS)
    good = _parameters(tmp_path, modeset="Y", fbdev="N")
    facts = read_display(dev, str(good))
    assert facts.char_device and facts.gid == 4242 and display_problems(dev, facts) == []
    (good / "fbdev").write_text("Y\n")  # a console on the card: the kit's preflight refuses it too
    assert display_problems(dev, read_display(dev, str(good))) == ["nvidia_drm fbdev = Y, needs N"]
    # the agent answers the same over its request (the JSON the controller sends)
    req = {"models": [], "local_hub": str(tmp_path), "nas_hub": str(tmp_path),
           "display": {"card": str(card), "target": "/dev/dri/card0", "nvidia_drm": [list(p) for p in NEEDS],
                       "parameters_dir": str(good)}}  # fmt: skip
    answer = probe(ProbeRequest.decode(req))["display"]
    assert answer["gid"] == 4242 and answer["problems"] == ["nvidia_drm fbdev = Y, needs N"]
    assert card_gid(str(card)) == 4242
    plain = tmp_path / "not-a-card"
    plain.write_text("")
    with pytest.raises(SparkfleetError, match="is not a character device"):
        card_gid(str(plain))  # the runtime asks this at start: a regular file is no card
