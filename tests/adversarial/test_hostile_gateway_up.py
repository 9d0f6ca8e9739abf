"""`gateway up` where the gateway cannot start: it says why, and no lane's key changes.

What a newcomer met on the demo: smg not installed, the demo's lane stopped, and `gateway up`
printed "gateway started", exited 0, and had already given the lane the gateway's key, so the next
`smoke` got 401. The oracle here is the lane's own key file on its host, read before and after, and
whether anything answers on the gateway's port.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparkfleet.base.errors import ExitCode
from sparkfleet.cli import main as cli
from sparkfleet.facts import apikeys
from sparkfleet.fleet import inventory
from sparkfleet.serving import gateway

from .tally import bad_input

try:
    from support.localgateway import HOST, LANE, free_port, request, write_gateway_fleet
except ImportError:  # tests/ imported as a package
    from tests.support.localgateway import HOST, LANE, free_port, request, write_gateway_fleet

pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("local_lanes")]

# Stands in for a venv without smg (`make demo`'s, before it installed the gateway extra): the
# gateway's own interpreter finds this package first, as it would find no smg at all.
NO_SMG = 'raise ModuleNotFoundError("No module named \'smg\'", name="smg")\n'


@pytest.fixture
def fleet(tmp_path):
    """A fleet whose gateway lane is not running (as the demo leaves it) and holds its own key."""
    inv = write_gateway_fleet(tmp_path, free_port(), tmp_path / "host-state")
    old = apikeys.new_key()
    apikeys.write_key(tmp_path / "host-state", LANE, old)
    state = tmp_path / "gw"
    yield inv, state, old
    gateway.down(state)


def up(inv, state, port: int, *extra: str, verb: str = "up"):
    """`gateway up` (or `gateway run`, the unit's foreground form, which takes no --wait)."""
    wait = ["--wait", "20"] if verb == "up" else []
    argv = ["--root", str(inv.root), "gateway", verb, "--port", str(port), *wait, *extra]
    return CliRunner(env={"SPARKFLEET_GATEWAY_STATE": str(state)}).invoke(cli, argv)


def lane_key(inv) -> str | None:
    return apikeys.read_key(inv.host(HOST).state_dir, LANE)


@pytest.mark.surface("cli:gateway up")
def test_up_without_smg_fails_saying_why_and_leaves_the_lanes_key(fleet, tmp_path, monkeypatch):
    inv, state, old = fleet
    shadow = tmp_path / "no-smg"
    (shadow / "smg").mkdir(parents=True)
    (shadow / "smg" / "__init__.py").write_text(NO_SMG)
    monkeypatch.syspath_prepend(str(shadow))  # the gateway's interpreter gets our search path
    port = free_port()
    res = up(inv, state, port, "--bind", "127.0.0.1", "--json")
    assert res.exit_code not in (0, None), res.output
    err = json.loads(res.stdout)
    assert "did not start" in err["error"] and "No module named 'smg'" in err["error"], err
    assert "No lane's key was changed" in err["hint"] and str(state / "gateway.log") in err["hint"]
    assert "Traceback" not in res.stdout
    assert lane_key(inv) == old  # the lane still takes the key its clients hold
    assert request(f"http://127.0.0.1:{port}/v1/models", gateway.gateway_key(state), timeout=3).status is None
    assert not gateway.status(state)["running"]


@pytest.mark.surface("cli:gateway up")
def test_up_on_a_taken_port_fails_saying_why_and_leaves_the_lanes_key(fleet):
    inv, state, old = fleet
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = up(inv, state, port, "--bind", "127.0.0.1")
    assert res.exit_code not in (0, None), res.output
    assert "did not start" in res.output and "Address already in use" in res.output, res.output
    assert lane_key(inv) == old and not gateway.status(state)["running"]


@pytest.mark.surface("cli:gateway up --bind", "cli:gateway run --bind")
@pytest.mark.parametrize("verb", ["up", "run"])
def test_up_with_a_bind_that_is_not_an_address_changes_nothing(fleet, figures, verb):
    inv, state, old = fleet
    for bind in ("0.0.0.0:80; include /etc/shadow", "not an address", "127.0.0.1 8080"):
        res = up(inv, state, free_port(), "--bind", bind, "--json", verb=verb)
        refused = res.exit_code == 2 and "listens on an IP address" in json.loads(res.stdout)["error"]
        bad_input(figures, f"cli:gateway {verb} --bind", refused and lane_key(inv) == old)
        assert refused, res.output
        assert lane_key(inv) == old and not (state / "front" / "nginx.conf").exists()


@pytest.mark.surface("cli:gateway up")
def test_up_returns_once_the_gateway_answers_then_the_lane_takes_its_key(fleet):
    inv, state, old = fleet
    port = free_port()
    res = up(inv, state, port, "--bind", "127.0.0.1", "--json")
    assert res.exit_code == 0, res.output
    st = json.loads(res.stdout[res.stdout.index("{"):])
    assert st["running"] and st["lanes"] == {LANE: "not answering (the gateway adds it once it is up)"}
    key = gateway.gateway_key(state)
    # answered at once, by smg behind the front (nginx alone would say 502): no model yet, no lane
    ans = request(f"http://127.0.0.1:{port}/v1/models", key, timeout=5)
    assert ans.status in (200, 503) and b"Bad Gateway" not in ans.body, (ans.status, ans.body[:200])
    assert lane_key(inv) == key != old  # given to the lane only once the gateway answered
    res = CliRunner(env={"SPARKFLEET_GATEWAY_STATE": str(state)}).invoke(cli, ["gateway", "down", "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout) == {"stopped": True}
    res = CliRunner(env={"SPARKFLEET_GATEWAY_STATE": str(state)}).invoke(cli, ["gateway", "down", "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout) == {"stopped": False}



@pytest.mark.surface("cli:gateway up")
def test_up_with_a_lane_host_down_gives_every_lane_its_old_key_back(fleet, tmp_path):
    """The gateway answers, then one lane's host cannot take the key: the lanes already given it
    get their old key back, the gateway is stopped, and `up` names the host."""
    inv, state, old = fleet
    root = Path(inv.root)
    recipe = (root / "recipes" / LANE / "recipe.toml").read_text()
    down_host = "gw9"  # a host whose ssh port answers nothing
    (root / "recipes" / "zz-lane").mkdir()
    (root / "recipes" / "zz-lane" / "recipe.toml").write_text(
        recipe.replace(f'hosts = ["{HOST}"]', f'hosts = ["{down_host}"]')
    )
    fleet_toml = root / "hosts" / "fleet.toml"
    fleet_toml.write_text(fleet_toml.read_text() + f'\n[hosts.{down_host}]\naddress = "127.0.0.9"\n'
                          f'ssh_user = "root"\nssh_port = {free_port()}\n'
                          f'local_hub = "{tmp_path}/gw9-hub"\nnas_hub = "{tmp_path}/nas"\n')  # fmt: skip
    inv = inventory.load(root)
    assert [w.lane for w in gateway.plan(inv).workers] == [LANE, "zz-lane"]  # the key goes to LANE first
    res = up(inv, state, free_port(), "--bind", "127.0.0.1")
    assert res.exit_code == ExitCode.UNREACHABLE, res.output
    assert down_host in res.output and "Traceback" not in res.output
    assert lane_key(inv) == old  # given the gateway's key, then its own back
    assert not gateway.status(state)["running"]
