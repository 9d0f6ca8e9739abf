"""`stage --lane L --fanout` on the demo fleet, where a newcomer meets it: every host is this machine.

Its peers have loopback addresses, so they cannot be dialled over ssh; they are read in place
(transport `local`) and verified on arrival like any peer's bytes. A fan-out the run would refuse
(a loopback host beside hosts on other machines) is refused by the dry run first, by the same
check, in one line; a host's run that crashes leaves one line naming the exception, never a
traceback in the text or in `--json`'s log.
"""

from __future__ import annotations

import json
import sys

import pytest
from click.testing import CliRunner

from sparkfleet.base.errors import ExitCode
from sparkfleet.cli import main
from sparkfleet.demo.fleet import DEMO_LANE, write_demo_fleet
from sparkfleet.fleet import inventory
from sparkfleet.stage.remote import fold_traceback, run_host_stage


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def _staged_bytes(demo, host: str) -> int:
    blobs = demo.local_hub(host).rglob("blobs/*")
    return sum(p.stat().st_size for p in blobs if p.is_file())


@pytest.mark.slow
def test_fanout_on_the_demo_fleet_reads_the_nas_once_and_verifies(tmp_path):
    demo = write_demo_fleet(tmp_path, shard_bytes=256 * 1024)
    lane = ["--root", str(demo.root), "stage", "--lane", DEMO_LANE, "--fanout"]
    dry = run(*lane, "--dry-run", "--json")
    assert dry.exit_code == ExitCode.OK, dry.output
    plan = json.loads(dry.stdout)
    assert plan["pulls"] and all(v > 0 for v in plan["nas_reads"].values())

    real = run(*lane, "--full", "--json")
    assert real.exit_code == ExitCode.OK, real.output
    assert "Traceback" not in real.output
    doc = json.loads(real.stdout)
    assert doc["ok"] and [o["host"] for o in doc["hosts"]] == ["dgx1", "dgx2"]
    one_copy = _staged_bytes(demo, "dgx1")
    assert one_copy == _staged_bytes(demo, "dgx2") > 0
    nas = sum(o["wave1"]["nas_bytes"] + o["run"]["nas_bytes"] for o in doc["hosts"])
    peers = sum(o["run"]["peer_bytes"] for o in doc["hosts"])
    # each blob left the NAS once (a blob two repos share is read once, then hardlinked)
    assert 0 < nas <= min(one_copy, sum(plan["nas_reads"].values()))
    assert 0 < peers <= sum(p["size"] for p in plan["pulls"])
    text = run(*lane).stdout  # a rerun: nothing to move, the summary adds both waves
    assert "2 host(s): 2 ok; from NAS 0 B, from peers 0 B" in text
    verify = run("--root", str(demo.root), "verify", "--lane", DEMO_LANE, "--full")
    assert verify.exit_code == ExitCode.OK, verify.output


@pytest.mark.slow
def test_the_summary_counts_the_nas_bytes_of_both_waves(tmp_path):
    demo = write_demo_fleet(tmp_path, shard_bytes=256 * 1024)
    real = run("--root", str(demo.root), "stage", "--lane", DEMO_LANE, "--fanout")
    assert real.exit_code == ExitCode.OK, real.output
    last = real.stdout.strip().splitlines()[-1]
    assert last.startswith("2 host(s): 2 ok; from NAS ") and "from NAS 0 B" not in last, last


def _mixed_fleet(tmp_path):
    """The demo fleet with dgx2 moved to another machine (TEST-NET: nothing answers there)."""
    demo = write_demo_fleet(tmp_path, shard_bytes=256 * 1024)
    fleet = demo.root / "hosts" / "fleet.toml"
    text = fleet.read_text()
    head, tail = text.split("[hosts.dgx2]\naddress = \"localhost\"", 1)
    fleet.write_text(head + '[hosts.dgx2]\naddress = "192.0.2.12"' + tail)
    return demo


def test_a_fanout_the_run_would_refuse_is_refused_by_the_dry_run_alike(tmp_path):
    demo = _mixed_fleet(tmp_path)
    lane = ["--root", str(demo.root), "stage", "--lane", DEMO_LANE, "--fanout"]
    for extra in (["--dry-run"], [], ["--dry-run", "--json"], ["--json"]):
        result = run(*lane, *extra)
        assert result.exit_code == ExitCode.USAGE, (extra, result.output)
        assert "Traceback" not in result.output
        if "--json" in extra:
            doc = json.loads(result.stdout)
            assert "dgx1 has a loopback address" in doc["error"] and "fleet.toml" in doc["hint"]
        else:
            [line] = [ln for ln in result.output.splitlines() if ln.startswith("error:")]
            assert "dgx1 has a loopback address (localhost) while dgx2 is another machine" in line
    assert not demo.local_hub("dgx1").exists()  # refused before any host was touched


ISSUE_TRACEBACK = """\
Traceback (most recent call last):
  File "/x/cli/stage.py", line 258, in stage
    remote.peer_sources(
  File "/x/stage/remote.py", line 155, in peer_sources
    raise ValueError(f"peer {name} has a local address")
    ^^^^^^^^^^^^^^^^^^^^^
ValueError: peer dgx2 has a local address; fan-out peers must be reachable over ssh""".splitlines()


def test_fold_traceback_keeps_the_exception_line():
    lines, last = fold_traceback(["before", *ISSUE_TRACEBACK, "after"])
    assert lines == ["before", "after"]
    assert last == "ValueError: peer dgx2 has a local address; fan-out peers must be reachable over ssh"
    chained = ["Traceback (most recent call last):", '  File "a", line 1', "KeyError: 'x'", "",
               "During handling of the above exception, another exception occurred:", "",
               *ISSUE_TRACEBACK]  # fmt: skip
    assert fold_traceback(chained) == ([], ISSUE_TRACEBACK[-1])
    assert fold_traceback(["plain"]) == (["plain"], None)


def test_a_host_run_that_crashes_reports_one_line_and_no_traceback(tmp_path):
    demo = write_demo_fleet(tmp_path, shard_bytes=256 * 1024)
    inv = inventory.load(demo.root)
    crash = "import sys; print('copying'); raise ValueError('boom on purpose')"

    def argv_for(prefix: list[str]) -> list[str]:
        return [sys.executable, "-c", crash, "--root", str(demo.root)]

    outcome = run_host_stage(inv, "dgx1", argv_for, lambda host, event: None)
    assert not outcome.ok and outcome.exit_code == ExitCode.CRASHED
    assert outcome.error == "dgx1: sparkfleet stage crashed there: ValueError: boom on purpose"
    assert outcome.log == ["copying"] and "Traceback" not in outcome.log_tail
