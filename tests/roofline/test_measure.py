"""Short, bounded measurements on the machine itself, and staging's own bound built from them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sparkfleet.roofline.machine import load_measurements, record_measurements
from sparkfleet.roofline.measure import largest_files, read_rate, write_rate
from sparkfleet.roofline.stagebound import staging_bound

MIB = 1024 * 1024


def blobs(root: Path, sizes: list[int]) -> list[Path]:
    root.mkdir(parents=True, exist_ok=True)
    out = []
    for i, size in enumerate(sizes):
        p = root / f"blob{i}"
        p.write_bytes(os.urandom(size))
        out.append(p)
    (root / "link").symlink_to(out[0].name)  # links are not read twice
    return out


def test_read_rate_reads_at_most_the_limit_largest_first(tmp_path: Path) -> None:
    files = blobs(tmp_path / "hub", [3 * MIB, 1 * MIB, 2 * MIB, 1024])
    found = largest_files([tmp_path / "hub"])
    assert found == [files[0], files[2], files[1]]  # tiny files and links left out
    rate = read_rate(found, limit=4 * MIB)
    assert rate is not None and rate.nbytes == 4 * MIB  # 3 MiB, then 1 of 2: stops at the limit
    assert rate.value > 0 and "page cache dropped" in rate.method
    assert read_rate([files[3]]) is None  # too little to time


def test_write_rate_fsyncs_and_leaves_nothing(tmp_path: Path) -> None:
    rate = write_rate(tmp_path / "d", 3 * MIB)
    assert rate.nbytes == 3 * MIB and rate.value > 0
    assert list((tmp_path / "d").iterdir()) == []


def test_staging_bound_uses_what_the_host_measured(tmp_path: Path) -> None:
    state = tmp_path / "state"
    record_measurements(state, {"nas_read": (500e6, "m"), "nvme_write": (2e9, "m")})
    dest = tmp_path / "dest"  # never written: both figures are known
    bound = staging_bound(250 * 10**6, 1.0, [tmp_path / "nowhere"], dest, state)
    assert bound == {
        "throughput": 250e6, "source_read": 500e6, "dest_write": 2e9, "bound": 500e6,
        "binding": "source read", "pct_of_bound": pytest.approx(50.0), "note": None,
    }  # fmt: skip
    assert not dest.exists()


def test_a_run_faster_than_its_cold_probe_gets_no_percentage(tmp_path: Path) -> None:
    """"119.8 MB/s = 340 % of this host's source read": the run read cached pages; no % above 100."""
    from click.testing import CliRunner

    from sparkfleet.cli.stagelines import print_stage_run

    state = tmp_path / "state"
    record_measurements(state, {"nas_read": (35e6, "m"), "nvme_write": (2e9, "m")})
    bound = staging_bound(int(119.8e6), 1.0, [tmp_path / "nowhere"], tmp_path / "dest", state)
    assert bound is not None and bound["pct_of_bound"] is None and "cached pages" in bound["note"]

    def show() -> None:
        print_stage_run({"repos": [], "seconds": 1.0, "mb_per_s": 119.8, "io_bound": bound})

    import click

    out = CliRunner().invoke(click.command()(show)).output
    assert "%" not in out and "119.8 MB/s" in out and "35.0 MB/s read" in out and "2.00 GB/s write" in out


def test_staging_bound_measures_and_records_what_is_missing(tmp_path: Path) -> None:
    blobs(tmp_path / "nas" / "blobs", [2 * MIB])
    state = tmp_path / "state"
    # 10 MiB in 1000 s (10 KiB/s): below any disk's probe, even a loaded CI machine's fsync'd write
    # (20 MiB/s once read as faster than the probe there, and rightly got no percentage).
    bound = staging_bound(10 * MIB, 1000.0, [tmp_path / "nas" / "blobs"], tmp_path / "dest", state)
    assert bound is not None and bound["pct_of_bound"] is not None and 0 < bound["pct_of_bound"] < 100
    assert set(load_measurements(state)) == {"nas_read", "nvme_write"}
    assert staging_bound(0, 1.0, [], tmp_path, state) is None  # nothing copied, nothing to bound
