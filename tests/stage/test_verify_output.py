"""What a verify read, said with its result; `--full` spelled one way for stage, verify and engram.

The default verify missed a flipped byte (it samples), where `verify --verify full` caught it, and
said nothing about sampling; `engram verify` spelled the same option `--full`. Now every verify
says what it read and what it could not see, a file changed since staging is read whole (its
staging record says it changed), and the option is `--full` everywhere.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from sparkfleet.base.digests import WINDOW, sample_offsets
from sparkfleet.base.errors import ExitCode
from sparkfleet.cli import main
from sparkfleet.demo.fleet import WEIGHTS_REPO, write_demo_fleet
from sparkfleet.facts.hubcache import repo_folder


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def _biggest_blob(hub: Path) -> Path:
    folder = hub / repo_folder(WEIGHTS_REPO) / "snapshots"
    files = {Path(os.path.realpath(p)) for p in folder.rglob("*.safetensors")}
    return max(files, key=lambda p: p.stat().st_size)


def _flip_between_windows(blob: Path) -> None:
    offsets = sample_offsets(blob.stat().st_size)
    between = offsets[3] + WINDOW + (offsets[4] - offsets[3] - WINDOW) // 2
    with open(blob, "r+b") as fh:
        fh.seek(between)
        byte = fh.read(1)
        fh.seek(between)
        fh.write(bytes([byte[0] ^ 1]))


def test_verify_says_it_samples_and_reads_a_file_changed_since_staging_whole(tmp_path):
    demo = write_demo_fleet(tmp_path, shard_bytes=4 * 1024 * 1024)
    root = ["--root", str(demo.root)]
    assert run(*root, "stage", "dgx1").exit_code == ExitCode.OK
    clean = run(*root, "verify", "dgx1")
    assert clean.exit_code == ExitCode.OK, clean.output
    assert "note: sampled, and each file changed since it was staged read whole (0 here)" in clean.output
    assert "--full reads every byte" in clean.output
    blob = _biggest_blob(demo.local_hub("dgx1"))
    assert blob.stat().st_size > WINDOW * 16  # the flip lands where no sample window reads
    _flip_between_windows(blob)
    caught = run(*root, "verify", "dgx1", "--json")
    assert caught.exit_code == ExitCode.SHORTFALL, caught.output
    doc = json.loads(caught.output)
    assert doc["mode"] == "sample" and "(1 here)" in doc["note"] and doc["mismatches"] == 1
    assert any(blob.name in p for r in doc["repos"] for p in r["problems"])
    full = run(*root, "verify", "dgx1", "--full")
    assert full.exit_code == ExitCode.SHORTFALL and "note: full: every byte read" in full.output
    repaired = run(*root, "stage", "dgx1")
    assert repaired.exit_code == ExitCode.OK and "repaired 1" in repaired.output
    assert run(*root, "verify", "dgx1", "--full").exit_code == ExitCode.OK


@pytest.mark.parametrize("verb", [["stage"], ["verify"], ["engram", "pack"], ["engram", "verify"]])
def test_full_is_spelled_one_way(verb):
    cmd: click.Command = main
    for word in verb:
        cmd = cmd.get_command(click.Context(cmd), word)  # type: ignore[attr-defined]
    opts = {o for p in cmd.params if isinstance(p, click.Option) for o in p.opts}
    assert "--full" in opts and "--verify" not in opts
