"""Engram test helpers: a fleet inventory (hosts h1..hN) over a NAS hub with a checkpoint-like repo."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sparkfleet.demo.hubfixture import ENGRAM_REPO, EngramTruth
from sparkfleet.fleet import inventory
from support import lanefleet
from support.lanefleet import lane_recipe, write_recipe

ENGRAM_MODELS = '\n[[models]]\npin = "engram-ckpt"\n'

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
        write_recipe(
            self.root, name, lane_recipe(hosts, ENGRAM_MODELS, f'\n[engram]\npin = "engram-ckpt"\n{engram}')
        )

    def inv(self) -> inventory.Inventory:
        return inventory.load(self.root)


def write_fleet(tmp: Path, truth: EngramTruth, nas_hub: Path, hosts: tuple[str, ...]) -> EngramFleet:
    root = lanefleet.write_fleet(
        tmp / "fleet",
        {h: {"address": "127.0.0.1", "local_hub": tmp / h / "nvme" / "hub"} for h in hosts},
        defaults={"ssh_user": "root", "nas_hub": nas_hub, "reserve_gib": 0},
        pins={"engram-ckpt": {"kind": "hf", "repo": ENGRAM_REPO, "revision": "main"}},
    )
    return EngramFleet(tmp, root, nas_hub, truth, hosts)
