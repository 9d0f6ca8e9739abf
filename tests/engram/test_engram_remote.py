"""`engram pack LANE HOST` runs on HOST: `--here --json` there, like `stage HOST`."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from engram_helpers import PARTS_TABLES

from sparkfleet.base.errors import ExitCode
from sparkfleet.cli import main
from sparkfleet.engram.ranges import HEADER_BYTES
from sparkfleet.engram.remote import pack_argv, pack_on_host
from sparkfleet.remote.hosts import LocalHost


def test_pack_argv_is_the_here_command():
    argv = pack_argv(["sparkfleet"], Path("/srv/fleet"), "eng4", "h2", True, False, 8.0)
    assert argv == ["sparkfleet", "--root", "/srv/fleet", "engram", "pack", "eng4", "h2", "--here", "--json",
                    "--force", "--reserve-gib", "8.0"]  # fmt: skip


def test_pack_runs_as_the_host_and_answers_its_result(fleet):
    """The delegated command itself (a LocalHost runner stands for HOST's shell): HOST's packs appear."""
    doc = pack_on_host(fleet.inv(), "eng4", "h2", runner=LocalHost("h2"))
    assert doc["action"] == "packed" and doc["rank"] == 1 and doc["world"] == 4
    out = fleet.out_dir("eng4", "h2")
    assert sorted(p.name for p in out.glob("engram-l*.bin")) == sorted(doc["written"])
    truth = fleet.truth.tables[1]
    lo, hi = 250, 500  # rank 1 of 4 of layer 1's 1001 rows
    packed = (out / "engram-l1-r1of4.bin").read_bytes()[HEADER_BYTES:]
    assert packed[:256] == truth["weight"][lo * 256 : lo * 256 + 256]
    assert len(packed) == (hi - lo) * 264


def test_cli_packs_a_remote_host_over_ssh_not_here(make_fleet, tmp_path):
    """A host that is not this machine is asked over ssh; it is never packed from here."""
    f = make_fleet()
    fleet_toml = f.root / "hosts" / "fleet.toml"
    fleet_toml.write_text(fleet_toml.read_text().replace(
        '[hosts.h4]\naddress = "127.0.0.1"', '[hosts.h4]\naddress = "h4.invalid"'))  # fmt: skip
    f.add_lane("eng4", ["h1", "h2", "h3", "h4"], PARTS_TABLES)
    res = CliRunner().invoke(main, ["--root", str(f.root), "engram", "pack", "eng4", "h4"])
    assert res.exit_code == ExitCode.UNREACHABLE, res.output
    assert "h4" in res.output and "ssh" in res.output
    assert not f.out_dir("eng4", "h4").exists()  # nothing packed on the operator's machine
