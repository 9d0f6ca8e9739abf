"""Hostile input to `power`: the Wake-on-LAN broadcast in hosts/fleet.toml and `power on`'s waits.

* `wol_broadcast`: any dotted quad (octets up to 999), with or without a prefix. An oracle written
  here in integer arithmetic (not the `ipaddress` module the checker uses) says whether it is a
  broadcast address: `255.255.255.255`, or `A.B.C.D/P` whose host bits are all ones. Every other
  value must be refused by `inventory check`, naming the key; `power on` must then refuse it too,
  with no traceback (a packet to a unicast address never reaches the sleeping host, and
  `999.999.999.999` once passed the check and died in `socket.sendto`).
* `--poll` and `--timeout`: a negative, zero, nan or infinite number of seconds is a usage error
  (exit 2) before any host is asked, never a traceback from `time.sleep` or a wait that never ends.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from sparkfleet.base.errors import ExitCode
from sparkfleet.cli import main as cli
from sparkfleet.fleet import inventory

from .tally import bad_input, count

OCTET = st.integers(0, 999) | st.sampled_from([0, 127, 255])
PREFIX = st.none() | st.integers(0, 40) | st.sampled_from([8, 16, 24, 30])


def _fleet(tmp: Path, broadcast: str, on_host: bool) -> Path:
    key = f'wol_broadcast = "{broadcast}"\n'
    root = tmp / "fleet"
    (root / "hosts").mkdir(parents=True, exist_ok=True)
    (root / "hosts" / "fleet.toml").write_text(
        'schema_version = 1\n[defaults]\nssh_user = "root"\nnas_hub = "/srv/nas"\nlocal_hub = "/srv/hub"\n'
        + ("" if on_host else key)
        + '[hosts.dgx3]\naddress = "dgx3.invalid"\nmac = "02:5f:00:00:00:33"\n'
        + (key if on_host else "")
    )
    return root


def _is_broadcast(octets: list[int], prefix: int | None) -> bool:
    """The oracle: a 32-bit address whose host bits (under its prefix) are all ones."""
    if any(o > 255 for o in octets):
        return False
    value = (octets[0] << 24) | (octets[1] << 16) | (octets[2] << 8) | octets[3]
    if prefix is None:
        return value == 0xFFFFFFFF
    if not 8 <= prefix <= 30:
        return False
    host_bits = (1 << (32 - prefix)) - 1
    return value & host_bits == host_bits


@pytest.mark.surface("file:hosts/fleet.toml", "cli:inventory check", "cli:power on")
@given(octets=st.lists(OCTET, min_size=4, max_size=4), prefix=PREFIX, on_host=st.booleans())
def test_wol_broadcast_is_refused_unless_it_is_a_broadcast_address(
    tmp_path_factory, figures, octets, prefix, on_host
):
    value = ".".join(map(str, octets)) + ("" if prefix is None else f"/{prefix}")
    root = _fleet(tmp_path_factory.mktemp("power"), value, on_host)
    found = inventory.check(root).problems
    key = "hosts.dgx3.wol_broadcast" if on_host else "defaults.wol_broadcast"
    count(figures, "power-wol-broadcast", "values_tried")
    if _is_broadcast(octets, prefix):
        assert found == [], f"{value} is a broadcast address, refused: {found}"
        return
    refused = any(p.key == key for p in found)
    bad_input(figures, "power-wol-broadcast", refused=refused)
    assert refused, f"{value} is not a broadcast address, yet inventory check took it: {found}"


@pytest.mark.surface("file:hosts/fleet.toml", "cli:power on")
@pytest.mark.parametrize("value", ["999.999.999.999", "10.0.0.5", "10.0.0.5/24", "10.0.0.255"])
def test_power_on_refuses_a_fleet_whose_broadcast_is_not_one(tmp_path, figures, value):
    """The issue's cases end to end: a clean error naming the key, no packet, no traceback."""
    res = CliRunner().invoke(cli, ["--root", str(_fleet(tmp_path, value, True)), "power", "on", "dgx3"])
    refused = res.exit_code != 0 and "hosts.dgx3.wol_broadcast" in res.output
    bad_input(figures, "power-wol-broadcast", refused=refused)
    assert refused, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert "Traceback" not in res.output and "gaierror" not in res.output, res.output


@pytest.mark.surface("cli:power on --poll", "cli:power on --timeout")
@pytest.mark.parametrize(
    "args", [["--poll", "-1"], ["--poll", "nan"], ["--poll", "0"], ["--timeout", "nan"], ["--timeout", "inf"],
             ["--timeout", "-5"], ["--poll", "inf"]],  # fmt: skip
)
def test_power_on_refuses_a_wait_that_is_not_a_positive_number_of_seconds(tmp_path, figures, args):
    root = _fleet(tmp_path, "255.255.255.255", True)
    res = CliRunner().invoke(cli, ["--root", str(root), "power", "on", "dgx3", *args])
    refused = res.exit_code == ExitCode.USAGE and args[0] in res.output and "seconds" in res.output
    bad_input(figures, "power-on-waits", refused=refused)
    assert refused, (res.exit_code, res.output)
    assert "magic packet" not in res.output  # refused before anything was sent
