"""`stage --dry-run` runs the space preflight too: it exits 3 exactly where the real run would."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from sparkfleet.base.errors import ExitCode
from sparkfleet.cli import main
from sparkfleet.demo.fleet import write_demo_fleet
from sparkfleet.demo.hubfixture import WEIGHTS_REPO, build_nas_hub


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_dry_run_reports_space_and_exits_3_when_the_real_run_would(tmp_path):
    demo = write_demo_fleet(tmp_path, shard_bytes=256 * 1024)
    ok = run("--root", str(demo.root), "stage", "dgx1", "--dry-run")
    assert ok.exit_code == ExitCode.OK, ok.output
    assert "space on " in ok.stdout and ": ok" in ok.stdout

    short = run("--root", str(demo.root), "stage", "dgx1", "--dry-run", "--reserve-gib", "1000000")
    assert short.exit_code == ExitCode.SPACE
    assert "NOT ENOUGH" in short.stdout and "to copy" in short.stdout  # the plan is still shown
    doc = json.loads(
        run(
            "--root", str(demo.root), "stage", "dgx1", "--dry-run", "--reserve-gib", "1000000", "--json"
        ).stdout
    )
    assert (
        doc["space"]["ok"] is False
        and doc["space"]["needed"] > 0
        and "not enough space" in doc["space"]["error"]
    )
    real = run("--root", str(demo.root), "stage", "dgx1", "--reserve-gib", "1000000")
    assert real.exit_code == ExitCode.SPACE  # the control: the real run refuses the same way
    assert not demo.local_hub("dgx1").joinpath("models--" + WEIGHTS_REPO.replace("/", "--")).exists()


@pytest.mark.fuse
def test_dry_run_on_a_full_tmpfs_matches_the_real_run(tmp_path, tmpfs):
    nas = build_nas_hub(tmp_path / "nas", shard_bytes=2 * 1024 * 1024)
    dest = tmpfs(4 * 1024 * 1024) / "hub"
    args = ["stage", "--source", str(nas.root), "--dest", str(dest), "--repo", WEIGHTS_REPO]
    dry = run(*args, "--dry-run")
    real = run(*args)
    assert dry.exit_code == real.exit_code == ExitCode.SPACE, (dry.output, real.output)
    assert "NOT ENOUGH" in dry.stdout
    fits = [*args, "--exclude", "page15/*", "--exclude", "model-0000[234]-*"]
    assert run(*fits, "--dry-run").exit_code == ExitCode.OK


def _shards(demo, host: str) -> list:
    """The local regular files a weights snapshot's shards resolve to."""
    import os
    from pathlib import Path

    snaps = demo.local_hub(host) / ("models--" + WEIGHTS_REPO.replace("/", "--")) / "snapshots"
    found = {Path(os.path.realpath(p)) for p in snaps.rglob("*.safetensors")}
    return sorted(p for p in found if p.stat().st_size >= 8192)


def test_dry_run_counts_the_repairs_it_can_know_and_says_what_only_reading_tells(tmp_path):
    """"to copy 0 (0 B) … need 36 B", then the real run "copied 1 (3.6 MiB), repaired 1"."""
    demo = write_demo_fleet(tmp_path, shard_bytes=256 * 1024)
    assert run("--root", str(demo.root), "stage", "dgx1").exit_code == ExitCode.OK
    wrong_size, wrong_content = _shards(demo, "dgx1")[:2]
    size = wrong_size.stat().st_size
    with open(wrong_size, "r+b") as fh:
        fh.truncate(size - 1000)  # another size: known without reading
    with open(wrong_content, "r+b") as fh:
        fh.seek(10)
        fh.write(b"\xff" * 64)  # same size: only reading tells
    dry = run("--root", str(demo.root), "stage", "dgx1", "--dry-run", "--json")
    doc = json.loads(dry.stdout)
    [weights] = [p for p in doc["plans"] if p["repo"] == WEIGHTS_REPO]
    assert weights["files_to_repair"] == 1 and weights["bytes_to_repair"] == size
    assert doc["space"]["needed"] >= size and doc["space"]["may_repair"] > 0
    text = run("--root", str(demo.root), "stage", "dgx1", "--dry-run").stdout
    assert "to repair 1 (" in text and "wrong content is re-copied, up to" in text
    real = run("--root", str(demo.root), "stage", "dgx1", "--json")
    assert real.exit_code == ExitCode.OK, real.output
    repaired = sum(r["repaired_files"] for r in json.loads(real.stdout)["repos"])
    assert repaired == 2  # the one known wrong, and the one only reading found


@pytest.mark.slow
def test_fanout_dry_run_on_a_complete_tree_reads_nothing_from_the_nas(tmp_path):
    """"to copy 0 (0 B)" beside "dgx1: from NAS 8 files (11.3 MiB)" on a complete tree."""
    demo = write_demo_fleet(tmp_path, shard_bytes=256 * 1024)
    for host in ("dgx1", "dgx2"):
        assert run("--root", str(demo.root), "stage", host).exit_code == ExitCode.OK
    lane = ["--root", str(demo.root), "stage", "--lane", "demo-exl3-2x", "--fanout", "--dry-run"]
    doc = json.loads(run(*lane, "--json").stdout)
    assert doc["nas_reads"] == {"dgx1": 0, "dgx2": 0} and doc["pulls"] == []
    text = run(*lane).stdout
    assert "dgx1: from NAS 0 files (0 B)" in text and "dgx2: demo-org/" in text  # each host's own plan


def test_nothing_to_copy_always_fits_whatever_the_reserve(tmp_path):
    """"need 0 B, free 61.0 GiB, reserve 97.7 TiB: NOT ENOUGH" refused a run that writes nothing."""
    demo = write_demo_fleet(tmp_path, shard_bytes=256 * 1024)
    assert run("--root", str(demo.root), "stage", "dgx1").exit_code == ExitCode.OK
    huge = ["--root", str(demo.root), "stage", "dgx1", "--reserve-gib", "100000"]
    dry = run(*huge, "--dry-run")
    assert dry.exit_code == ExitCode.OK, dry.output
    assert "need 0 B" in dry.stdout and ": ok" in dry.stdout and "NOT ENOUGH" not in dry.stdout
    again = run(*huge)
    assert again.exit_code == ExitCode.OK, again.output  # the real run copies nothing and is fine
    assert "copied 0 (0 B)" in again.stdout
