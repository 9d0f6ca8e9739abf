"""The node contract (`sparkfleet.node.protocol`): one record per agent action, one wire format.

The controller encodes a request record, the agent decodes the same record; the JSON between them
is what the two ends always exchanged, so a node and a controller of neighbouring sparkfleet
versions still understand each other. A field missing or of the wrong type is refused naming the
field, before the action runs; an error's kind is read from the answer, never from its words.
"""

from __future__ import annotations

import io
import json
import sys

import pytest

from sparkfleet.base.errors import SparkfleetError
from sparkfleet.fleet import inventory
from sparkfleet.lane.recipe import launch_recipe
from sparkfleet.launch.plan import probe_request
from sparkfleet.node import agent
from sparkfleet.node.protocol import (
    REQUESTS,
    CanaryRequest,
    ProbeAnswer,
    ProbeRequest,
    StopRequest,
    WatchRequest,
)
from sparkfleet.remote.hosts import LocalHost
from sparkfleet.remote.nodecall import AgentError, call_agent
from sparkfleet.remote.wire import BadRequest, ErrorKind, error_kind
from support.lanefleet import repo_fleet


def _answer(action: str, request: dict, monkeypatch, capsys) -> dict:
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(request)))
    assert agent.main([action]) == 0
    return json.loads(capsys.readouterr().out.splitlines()[-1])


def test_every_agent_action_has_its_request_record_in_the_same_order():
    """The usage line lists ACTIONS in order: the records name the same actions, in that order."""
    assert list(REQUESTS) == list(agent.ACTIONS)
    assert all(action == cls.ACTION for action, cls in REQUESTS.items())


def test_the_wire_is_the_json_the_agent_always_read():
    """A None field is left out (the agent reads absent and null alike); the rest keep their names."""
    assert StopRequest("demo", "/var/lib/sf", timeout=5.0, by="sparkfleet stop").encode() == {
        "lane": "demo", "state_dir": "/var/lib/sf", "timeout": 5.0, "by": "sparkfleet stop",
    }  # fmt: skip
    watch = WatchRequest("demo", "/s", rank=0, offset=10, max_bytes=0, port=None).encode()
    assert watch == {"lane": "demo", "state_dir": "/s", "rank": 0, "offset": 10, "max_bytes": 0}


def test_every_lane_of_the_repo_fleet_probes_with_a_request_that_survives_the_wire(tmp_path):
    """What launch and doctor send each host: encoded, through JSON, decoded, the same record;
    launch's probe also asks for the cache seed's tree, doctor's never does."""
    inv = inventory.load(repo_fleet(tmp_path / "fleet"))
    seen = 0
    for lane in inv.lanes.values():
        try:
            recipe = launch_recipe(inv, lane.name)
        except SparkfleetError:  # a lane that only stages (no [launch])
            continue
        for host in lane.hosts:
            req = probe_request(inv, recipe, inv.host(host))
            assert ProbeRequest.decode(json.loads(json.dumps(req.encode()))) == req
            assert not req.seed_prepare
            assert req.preparing_seed().seed_prepare == (req.cache_seed is not None)
            seen += 1
    assert seen >= 4


@pytest.mark.parametrize(
    "raw,field",
    [
        ({"fabric": {"needed": "yes"}}, "fabric.needed"),
        ({"models": "all"}, "models"),
        ({"models": [{"repo": "a/b"}]}, "models[0].revision"),  # nested: the path is named
        ({"ports": [8000, "8001"]}, "ports[1]"),
        ({"memory": 1}, "memory"),
    ],
)
def test_a_missing_or_mistyped_field_is_refused_naming_it(raw, field):
    with pytest.raises(BadRequest) as exc:
        ProbeRequest.decode(raw)
    assert f"probe request's {field} " in exc.value.message or f"lacks '{field}'" in exc.value.message
    assert exc.value.hint and "deploy the same sparkfleet" in exc.value.hint


def test_the_agent_refuses_a_mistyped_field_before_the_action_runs(monkeypatch, capsys):
    """A probe whose models is not a list is a bad request, said as one (exit_code 2), not a crash of
    the action deep inside (exit_code 70, a traceback on the node)."""
    ans = _answer("probe", {"models": "all", "local_hub": "/x", "nas_hub": "/y"}, monkeypatch, capsys)
    assert ans["ok"] is False and ans["exit_code"] == 2, ans
    assert ans["error"].startswith("the probe request's models is a string 'all', not an array"), ans
    assert error_kind(ans) is ErrorKind.REFUSED


def test_a_probe_of_models_without_its_hubs_is_refused_whole(monkeypatch, capsys):
    ans = _answer("probe", {"models": [{"repo": "a/b", "revision": "main"}]}, monkeypatch, capsys)
    assert ans["ok"] is False and ans["error"] == "the probe request lacks 'local_hub'", ans


def test_the_canary_settings_keep_their_defaults_when_the_controller_leaves_them_out():
    c = CanaryRequest.decode(
        {"spec": {}, "master": "10.0.0.1", "port": 20000,
         "canary": {"backend": "gloo", "bytes": 1024, "iters": 2, "timeout": 30}}  # fmt: skip
    ).canary
    assert (c.pair_bytes, c.python, c.timeout) == (4 << 20, "python3", 30.0)


def test_an_error_kind_is_read_from_the_answer_not_its_words():
    crashed = {"ok": False, "error": "memory watchdog: no", "hint": None, "exit_code": 70}
    refused = {"ok": False, "error": "agent probe failed on this node", "hint": None, "exit_code": 5}
    assert error_kind(crashed) is ErrorKind.CRASHED and error_kind(refused) is ErrorKind.REFUSED


def test_the_controller_gets_the_refusal_with_its_kind(tmp_path):
    """Through the real client and a real agent process on this machine."""
    with pytest.raises(AgentError) as exc:
        call_agent(LocalHost("me"), "stop", {"lane": "demo"})
    assert exc.value.kind is ErrorKind.REFUSED and "the stop request lacks 'state_dir'" in exc.value.message
    ans = call_agent(LocalHost("me"), "status", {"lane": "demo", "state_dir": str(tmp_path)})
    assert ans == {"ok": True, "ranks": [], "last": []}


def test_the_probe_answer_decodes_what_the_agent_said(tmp_path, monkeypatch, capsys):
    fabric = {"fabric_ip": "10.0.0.5", "hcas": ["mlx5_0"], "gid_index": 3, "netdev": "enp1"}
    a = ProbeAnswer.decode(
        {"ok": True, "fabric": fabric, "models": [{"repo": "a/b", "error": "no hub", "hint": None}],
         "ports_in_use": [8000], "memory_error": "no meminfo"}  # fmt: skip
    )
    assert a.fabric is not None and a.fabric.hcas == ("mlx5_0",) and a.fabric.gid_index == 3
    assert a.models == [] and a.model_errors == ["a/b: no hub"] and a.ports_in_use == [8000]
    assert a.memory_error == "no meminfo" and a.image_state is None
