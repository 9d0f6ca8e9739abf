"""The embedded default fleet `make demo` runs on: a NAS-like hub and two "Sparks" in a temp dir.

It is written as a real inventory (hosts/fleet.toml + recipes/<lane>/recipe.toml) so the demo goes
through exactly the code paths the real fleet does — only the paths point into the temp dir.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..base import atomic
from ..base.errors import SparkfleetError
from ..fleet.inventory import HostKind
from .hubfixture import (
    DRAFTER_REPO,
    ENGRAM_REPO,
    WEIGHTS_REPO,
    EngramTruth,
    HubFixture,
    build_engram_repo,
    build_nas_hub,
)
from .lane import demo_launch_tables

DEMO_LANE = "demo-exl3-2x"
DEMO_HOSTS = ("dgx1", "dgx2")
DEMO_MARKER = ".sparkfleet-demo"
MARKER_TEXT = b"written by `sparkfleet demo`: a demo run here may stop, rebuild and remove what is here\n"
DEMO_QUALITY_SKIP = (
    "the demo server has no model behind it (it streams words): a tool-calling score would measure nothing"
)


@dataclass(frozen=True)
class DemoFleet:
    root: Path  # fleet root: hosts/fleet.toml, recipes/
    nas_hub: Path
    fixture: HubFixture
    engram: EngramTruth | None = None  # the engram tables `sparkfleet engram pack` cuts per rank

    def local_hub(self, host: str) -> Path:
        return self.root.parent / host / "nvme" / "hub"


def _q(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def host_kinds_toml(kinds: Iterable[HostKind]) -> str:
    """[host_kinds.*] tables for the demo fleet, copied from a real inventory's (never restated)."""
    out = []
    for kind in kinds:
        out.append(f"[host_kinds.{kind.name}]\ndescription = {_q(kind.description)}")
        for f in kind.figures.values():
            value = "" if f.value is None else f"value = {f.value!r}, "
            out.append(f"{f.name} = {{ {value}unit = {_q(f.unit)}, source = {_q(f.source)} }}")
        out.append("")
    return "\n".join(out)


def _lstat_is(path: Path, kind) -> bool:
    """Is `path` itself (never what a link there points at) of `kind` (stat.S_ISDIR, S_ISREG)?"""
    try:
        return kind(os.lstat(path).st_mode)
    except OSError:
        return False


def is_demo_workdir(workdir: Path) -> bool:
    """Does `workdir` carry the demo's marker, checked without following a single link?

    The marker is `workdir/.sparkfleet-demo`, written when the demo first takes the directory (new
    or empty) and kept until the directory is removed. A workdir an older demo wrote carries it in
    its own `nas/` instead, which counts only as a real directory holding a regular file: a `nas`
    link into another demo's folder would otherwise lend that folder's marker to this one."""
    if not _lstat_is(workdir, stat.S_ISDIR):
        return False
    if _lstat_is(workdir / DEMO_MARKER, stat.S_ISREG):
        return True
    nas = workdir / "nas"
    return _lstat_is(nas, stat.S_ISDIR) and _lstat_is(nas / DEMO_MARKER, stat.S_ISREG)


def claim_workdir(workdir: Path) -> None:
    """Take `workdir` for the demo: a new or empty directory is marked; one that carries the marker
    is the demo's already; anything else is refused, changing nothing. Everything the demo stops,
    writes or removes in a workdir comes after this: a fleet the demo never wrote (its ranks, its
    hosts/fleet.toml) is never touched."""
    if workdir.is_symlink():
        raise SparkfleetError(
            f"--workdir {workdir} is a link (to {os.readlink(workdir)}); nothing was stopped, written "
            "or removed",
            hint="give the directory itself as --workdir",
        )
    if workdir.exists() and not workdir.is_dir():
        raise SparkfleetError(f"--workdir {workdir} is not a directory", hint="pick another --workdir")
    if is_demo_workdir(workdir):
        if not _lstat_is(workdir / DEMO_MARKER, stat.S_ISREG):  # an older demo's: marked in nas/ only
            atomic.write_bytes(workdir / DEMO_MARKER, MARKER_TEXT)
        return
    if workdir.exists() and any(workdir.iterdir()):
        raise SparkfleetError(
            f"{workdir} was not written by `sparkfleet demo` (it has no {DEMO_MARKER}); nothing was "
            "stopped, written or removed there",
            hint="give `--workdir` a new or empty directory, or move that one aside (the demo writes, "
            "stops and removes only a fleet of its own)",
        )
    atomic.ensure_dir(workdir)
    atomic.write_bytes(workdir / DEMO_MARKER, MARKER_TEXT)


def clear_workdir(workdir: Path) -> None:
    """`--fresh`: remove everything in a demo's workdir but its marker, never following a link (a
    link is removed, not what it points at). A `kill -9` midway leaves the workdir still marked, so
    the rerun finishes the job."""
    if not is_demo_workdir(workdir):
        raise SparkfleetError(
            f"{workdir} was not written by `sparkfleet demo`; --fresh removes only a demo's workdir",
            hint="give `--workdir` a new or empty directory",
        )
    for entry in os.scandir(workdir):
        if entry.name == DEMO_MARKER:
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)


def write_demo_fleet(
    workdir: Path, shard_bytes: int = 1024 * 1024, host_kind: HostKind | None = None
) -> DemoFleet:
    """Build the NAS fixture and a two-host inventory pointing at it under `workdir`.

    `host_kind` (the checkout's GB10 figures, when the demo runs in one) makes the demo "Sparks"
    that kind, so the demo report's roofline divides by the real machine's figures. Refused,
    changing nothing, where `workdir` is not the demo's (claim_workdir).
    """
    claim_workdir(workdir)
    workdir = workdir.resolve()
    nas = workdir / "nas"
    if nas.is_symlink() or (nas.exists() and not nas.is_dir()):
        raise SparkfleetError(
            f"{nas} exists but was not written by `sparkfleet demo` (a link or a file)",
            hint="pick another --workdir, or move that one aside",
        )
    if nas.exists():
        # A rerun into the same workdir: the NAS fixture is rebuilt (it is deterministic, so the
        # hosts' staged trees stay valid and the rerun copies nothing).
        shutil.rmtree(nas)
    fixture = build_nas_hub(nas / "hub", shard_bytes=shard_bytes)
    engram = build_engram_repo(fixture.root, rows={1: 4001, 14: 4003})
    root = workdir / "fleet"
    hosts = "\n".join(
        f'[hosts.{h}]\naddress = "localhost"\nlocal_hub = {_q(str(workdir / h / "nvme" / "hub"))}\n'
        for h in DEMO_HOSTS
    )
    fleet = f"""# Demo fleet written by `sparkfleet demo`: two Sparks sharing one NAS-like hub in a temp dir.
schema_version = 1

[defaults]
ssh_user = "root"
nas_hub = {_q(str(fixture.root))}
reserve_gib = 0
{f"kind = {_q(host_kind.name)}" if host_kind else ""}

{hosts}
{host_kinds_toml([host_kind] if host_kind else [])}
[pins.demo-weights]
kind = "hf"
repo = {_q(WEIGHTS_REPO)}
revision = {_q(fixture.weights.commits["main"])}

[pins.demo-drafter]
kind = "hf"
repo = {_q(DRAFTER_REPO)}
revision = "main"

[pins.demo-engram]
kind = "hf"
repo = {_q(ENGRAM_REPO)}
revision = {_q(engram.commit)}
"""
    recipe = f"""[lane]
hosts = {json.dumps(list(DEMO_HOSTS))}
description = "demo EXL3 lane: weights + drafter, optional page15 pack left on the NAS"

[[models]]
pin = "demo-weights"
exclude = ["page15/*"]

[[models]]
pin = "demo-drafter"

# Per-rank engram packs (sparkfleet engram pack demo-exl3-2x HOST), read from the NAS hub.
[engram]
pin = "demo-engram"
pattern = ["layers.{{layer}}.engram.embed.weight", "layers.{{layer}}.engram.embed.scale"]
rows = {{ 1 = 4001, 14 = 4003 }}
row_bytes = 264

# What the checkpoint cannot say (sparkfleet roofline): the demo's engram reads 2 rows a token.
[roofline]
engram_rows_per_token = 2

# The demo server streams words and has no model: a tool-calling score of it would measure nothing,
# so `sparkfleet bench` skips quality here and says why (`bench --quality` runs it anyway: 0/100).
[bench.quality]
skip = {_q(DEMO_QUALITY_SKIP)}

# Serve it behind the gateway too: `sparkfleet gateway up`, then `sparkfleet keys add alice`
# (docs/serving.md). round_robin is the default policy.
[gateway]
""" + demo_launch_tables()
    atomic.write_bytes(root / "hosts" / "fleet.toml", fleet.encode())
    atomic.write_bytes(root / "recipes" / DEMO_LANE / "recipe.toml", recipe.encode())
    return DemoFleet(root=root, nas_hub=fixture.root, fixture=fixture, engram=engram)
