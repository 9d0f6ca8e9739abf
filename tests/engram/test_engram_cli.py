"""`sparkfleet engram pack|verify` through the CLI: JSON contracts, exit codes, and kill -9 mid-pack."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from engram_helpers import PARTS_TABLES

from sparkfleet.base.atomic import is_temp_name
from sparkfleet.cli import main
from sparkfleet.engram.ranges import HEADER_BYTES, PackHeader, pack_name
from sparkfleet.engram.receipt import RECEIPT_NAME


def run(root: Path, *args: str):
    return CliRunner().invoke(main, ["--root", str(root), *args])


def test_dry_run_json_writes_nothing(fleet):
    result = run(fleet.root, "engram", "pack", "eng3", "h4", "--dry-run", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert (doc["rank"], doc["world"]) == (2, 3)
    assert [(f["name"], f["lo"], f["hi"]) for f in doc["files"]] == [
        ("engram-l1-r2of3.bin", 667, 1001),
        ("engram-l14-r2of3.bin", 668, 1003),
    ]
    assert doc["source"]["origin"] == "nas"
    assert not fleet.out_dir("eng3", "h4").exists()


def test_pack_verify_json_and_exit_codes(fleet):
    assert run(fleet.root, "engram", "verify", "eng4", "h1").exit_code == 1  # nothing packed yet
    packed = run(fleet.root, "engram", "pack", "eng4", "h1", "--json")
    assert packed.exit_code == 0, packed.output
    doc = json.loads(packed.output)
    assert doc["action"] == "packed" and doc["written_bytes"] == sum(f["size"] for f in doc["files"].values())
    again = json.loads(run(fleet.root, "engram", "pack", "eng4", "h1", "--json").output)
    assert again["action"] == "skipped" and again["written"] == []
    ok = run(fleet.root, "engram", "verify", "eng4", "h1", "--full", "--json")
    assert ok.exit_code == 0 and json.loads(ok.output)["ok"]
    (fleet.out_dir("eng4", "h1") / pack_name(1, 0, 4)).unlink()
    bad = run(fleet.root, "engram", "verify", "eng4", "h1")
    assert bad.exit_code == 1 and "engram-l1-r0of4.bin: missing" in bad.output


def test_clear_errors_exit_nonzero(fleet):
    fleet.add_lane("nopin", ["h1"], "")  # [engram] with a pin but neither tables nor pattern
    result = run(fleet.root, "engram", "pack", "nopin", "h1")
    assert result.exit_code == 2 and "exactly one of `tables` or `pattern`" in result.output
    result = run(fleet.root, "engram", "pack", "eng3", "h1")
    assert result.exit_code == 2 and "host 'h1' is not in lane 'eng3'" in result.output


@pytest.mark.slow
@pytest.mark.parametrize("during", ["first", "second"])
def test_kill_9_during_a_pack_then_rerun_converges(make_fleet, during):
    """kill -9 while the first table's temp grows, or the second's (the first then vouched by the journal)."""
    # Two tables of ~64 MiB each (254,200 rows x 264 B), one host: the pack takes long enough to be hit.
    fleet = make_fleet(rows={1: 254_200, 14: 254_300})
    fleet.add_lane("big", ["h1"], PARTS_TABLES)
    out = fleet.out_dir("big", "h1")
    first = out / pack_name(1, 0, 1)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    argv = [
        sys.executable,
        "-m",
        "sparkfleet",
        "--root",
        str(fleet.root),
        "engram",
        "pack",
        "big",
        "h1",
        "--json",
    ]

    target = pack_name(1, 0, 1) if during == "first" else pack_name(14, 0, 1)

    def hit() -> bool:
        """The target file's temp is past its header (so any earlier pack and its journal entry are done)."""
        temps = [p for p in out.glob(f".{target}.*") if is_temp_name(p.name)] if out.is_dir() else []
        return any(p.stat().st_size > HEADER_BYTES for p in temps)

    killed = False
    for _attempt in range(3):
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                if hit():
                    os.kill(proc.pid, signal.SIGKILL)
                    killed = True
                    break
            except FileNotFoundError:
                pass  # a temp was renamed under us
            time.sleep(0.002)
        proc.wait(timeout=30)
        if killed:
            break
        for p in out.iterdir() if out.is_dir() else ():
            if p.is_file():
                p.unlink()  # it finished (or we missed the window): start over
    assert killed, f"could not kill the pack during the {during} file in three tries"
    assert proc.returncode == -signal.SIGKILL
    assert any(is_temp_name(p.name) for p in out.iterdir())  # the partial is a temp, never a final name
    assert not (out / RECEIPT_NAME).exists()
    for layer in (1, 14):
        final = out / pack_name(layer, 0, 1)
        if final.exists():  # published before the kill: complete and right
            assert final.read_bytes()[HEADER_BYTES:] == fleet.truth.packed_rows(layer)
    kept_stat = (first.stat().st_ino, first.stat().st_mtime_ns) if first.exists() else None

    rerun = run(fleet.root, "engram", "pack", "big", "h1", "--json")
    assert rerun.exit_code == 0, rerun.output
    doc = json.loads(rerun.output)
    assert doc["temps_swept"] >= 1 and doc["action"] == "packed"
    if during == "second":  # the journal vouched for the first file: kept, not rewritten
        assert doc["kept"] == [first.name] and doc["written"] == [pack_name(14, 0, 1)]
        assert (first.stat().st_ino, first.stat().st_mtime_ns) == kept_stat
    else:
        assert doc["kept"] == [] and len(doc["written"]) == 2
    assert not any(is_temp_name(p.name) for p in out.iterdir())
    for layer in (1, 14):
        data = (out / pack_name(layer, 0, 1)).read_bytes()
        rows = fleet.truth.rows(layer)
        assert PackHeader.decode(data) == PackHeader(layer, 0, rows, rows, 264)
        assert data[HEADER_BYTES:] == fleet.truth.packed_rows(layer)
    assert run(fleet.root, "engram", "verify", "big", "h1", "--full").exit_code == 0
    assert json.loads(run(fleet.root, "engram", "pack", "big", "h1", "--json").output)["action"] == "skipped"
