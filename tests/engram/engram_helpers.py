"""Engram test helpers: a fleet inventory (hosts h1..hN) over a NAS hub with a checkpoint-like repo."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from sparkfleet import inventory
from sparkfleet.demo.hubfixture import ENGRAM_REPO, EngramTruth

PARTS_TABLES = """
[[engram.tables]]
layer = 1
parts = ["layers.1.engram.embed.weight", "layers.1.engram.embed.scale"]

[[engram.tables]]
layer = 14
parts = ["layers.14.engram.embed.weight", "layers.14.engram.embed.scale"]
"""


@dataclass
class EngramFleet:
    """A fleet root whose hosts h1..hN share the NAS hub; lanes are added per test."""

    tmp: Path
    root: Path
    nas_hub: Path
    truth: EngramTruth
    hosts: tuple[str, ...]

    def local_hub(self, host: str) -> Path:
        return self.tmp / host / "nvme" / "hub"

    def out_dir(self, lane: str, host: str) -> Path:
        return self.local_hub(host).parent / "engram-packs" / lane

    def add_lane(self, name: str, hosts: list[str], engram: str) -> None:
        path = self.root / "recipes" / name / "recipe.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            f'[lane]\nhosts = {json.dumps(hosts)}\n\n[[models]]\npin = "engram-ckpt"\n\n'
            f'[engram]\npin = "engram-ckpt"\n{engram}'
        )

    def inv(self) -> inventory.Inventory:
        return inventory.load(self.root)


def write_fleet(tmp: Path, truth: EngramTruth, nas_hub: Path, hosts: tuple[str, ...]) -> EngramFleet:
    root = tmp / "fleet"
    (root / "hosts").mkdir(parents=True)
    host_tables = "\n".join(
        f'[hosts.{h}]\naddress = "127.0.0.1"\nlocal_hub = {json.dumps(str(tmp / h / "nvme" / "hub"))}\n'
        for h in hosts
    )
    (root / "hosts" / "fleet.toml").write_text(
        f"""schema_version = 1

[defaults]
ssh_user = "root"
nas_hub = {json.dumps(str(nas_hub))}
reserve_gib = 0

{host_tables}
[pins.engram-ckpt]
kind = "hf"
repo = {json.dumps(ENGRAM_REPO)}
revision = "main"
"""
    )
    return EngramFleet(tmp, root, nas_hub, truth, hosts)
