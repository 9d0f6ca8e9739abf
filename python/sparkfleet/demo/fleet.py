"""The embedded default fleet `make demo` runs on: a NAS-like hub and two "Sparks" in a temp dir.

It is written as a real inventory (hosts/fleet.toml + recipes/<lane>/recipe.toml) so the demo goes
through exactly the code paths the real fleet does — only the paths point into the temp dir.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .. import atomic
from ..errors import SparkfleetError
from ..inventory import HostKind
from ..launch.demo import demo_launch_tables
from .hubfixture import (
    DRAFTER_REPO,
    ENGRAM_REPO,
    WEIGHTS_REPO,
    EngramTruth,
    HubFixture,
    build_engram_repo,
    build_nas_hub,
)

DEMO_LANE = "demo-exl3-2x"
DEMO_HOSTS = ("dgx1", "dgx2")
DEMO_MARKER = ".sparkfleet-demo"
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


def write_demo_fleet(
    workdir: Path, shard_bytes: int = 1024 * 1024, host_kind: HostKind | None = None
) -> DemoFleet:
    """Build the NAS fixture and a two-host inventory pointing at it under `workdir`.

    `host_kind` (the checkout's GB10 figures, when the demo runs in one) makes the demo "Sparks"
    that kind, so the demo report's roofline divides by the real machine's figures.
    """
    workdir = workdir.resolve()
    nas = workdir / "nas"
    if nas.exists() or nas.is_symlink():
        # A rerun into the same workdir: the NAS fixture is rebuilt (it is deterministic, so the
        # hosts' staged trees stay valid and the rerun copies nothing); only ever our own fixture.
        if not (nas / DEMO_MARKER).is_file() or nas.is_symlink():
            raise SparkfleetError(
                f"{nas} exists but was not written by `sparkfleet demo`",
                hint="pick another --workdir, or move that directory aside",
            )
        shutil.rmtree(nas)
    fixture = build_nas_hub(nas / "hub", shard_bytes=shard_bytes)
    atomic.write_bytes(nas / DEMO_MARKER, b"written by sparkfleet demo; rebuilt on every demo run\n")
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
""" + demo_launch_tables()
    atomic.write_bytes(root / "hosts" / "fleet.toml", fleet.encode())
    atomic.write_bytes(root / "recipes" / DEMO_LANE / "recipe.toml", recipe.encode())
    return DemoFleet(root=root, nas_hub=fixture.root, fixture=fixture, engram=engram)
