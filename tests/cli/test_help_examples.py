"""Every `--help` example parses with the real commands and names lanes and hosts that exist: the
demo's for an example that runs on the demo, the checkout's fleet for one marked `# real fleet`.

The help examples named `dsv41-flash-4x-mia` 44 times and `dsv41-flash-2x2`, which no fleet has.
test_help_examples_demo.py runs the demo ones; this module needs no demo and runs in a second.
"""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from clitree import walk
from helpexamples import all_examples, parse_with_click

from sparkfleet.demo.fleet import DEMO_HOSTS, DEMO_LANE
from sparkfleet.fleet import inventory

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = all_examples()
# Parameters that name a lane or a host (arguments and options alike).
LANE_PARAMS, HOST_PARAMS = {"lane"}, {"host", "hosts"}
# Verbs that cannot run on the demo at all: they need the network (pins), Nix-built images, a DGX
# OS host, Wake-on-LAN or the fleet registry. Every other verb shows one example that runs there.
REAL_FLEET_ONLY = {
    "pins resolve", "pins verify", "pins import-manifest", "pins import-lock", "image load", "image push",
    "bootstrap", "power status", "power on", "release cut", "registry init", "registry serve",
}  # fmt: skip


def _names(values) -> list[str]:
    if values is None:
        return []
    return [values] if isinstance(values, str) else list(values)


@pytest.mark.parametrize("example", EXAMPLES, ids=str)
def test_every_help_example_parses_with_the_real_commands(example):
    parse_with_click(example)  # an unknown verb or option, a missing argument: click.UsageError


def test_help_examples_name_lanes_and_hosts_that_exist():
    real = inventory.load(ROOT)
    demo = ({DEMO_LANE}, set(DEMO_HOSTS))
    wrong = []
    for example in EXAMPLES:
        parsed = parse_with_click(example)
        lanes, hosts = (set(real.lanes), set(real.hosts)) if example.real_fleet else demo
        for name, value in parsed.params.items():
            if name not in LANE_PARAMS | HOST_PARAMS | {"target"}:
                continue
            for v in _names(value):
                if name in LANE_PARAMS and v not in lanes or name in HOST_PARAMS and v not in hosts:
                    wrong.append(f"{example}: {name} {v}")
                if name == "target" and v not in lanes | hosts:
                    wrong.append(f"{example}: {v} is no lane or host")
        if parsed.verb[0] == "pins" and "names" in parsed.params:
            wrong += [f"{example}: no pin {n}" for n in parsed.params["names"] if n not in real.pins]
    assert wrong == []


def test_every_verb_shows_an_example_that_runs_on_the_demo():
    """Marking an example `# real fleet` must not become the way around running it."""
    shown: dict[str, list] = {}
    for example in EXAMPLES:
        shown.setdefault(" ".join(parse_with_click(example).verb), []).append(example)
    verbs = [" ".join(p) for p, c in walk() if p and not isinstance(c, click.Group) and not c.hidden]
    lacking = [v for v in verbs if v not in REAL_FLEET_ONLY and all(e.real_fleet for e in shown.get(v, []))]
    assert lacking == []
    assert {v for v in REAL_FLEET_ONLY if v in verbs} == REAL_FLEET_ONLY  # no stale entry


def test_the_parser_catches_what_does_not_exist():
    from helpexamples import parse_line

    bad = parse_line("launch", "sparkfleet launch demo-exl3-2x --frobnicate")
    with pytest.raises(click.UsageError):
        parse_with_click(bad)
    parsed = parse_with_click(parse_line("", "SPARKFLEET_ROOT=x sparkfleet --root y status l --json  # z"))
    assert parsed.verb == ("status",) and parsed.params["lane"] == "l" and parsed.params["as_json"]
    marked = parse_line("", "sparkfleet power on dgx3   # real fleet: Wake-on-LAN")
    assert marked.real_fleet and not marked.until_ctrl_c and marked.argv == ["power", "on", "dgx3"]
