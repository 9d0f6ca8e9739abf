"""A lane's roofline inputs, gathered where the files are: the staged snapshots on a host.

`lane_inputs` runs on the host that holds the lane's staged weights (the head, over ssh as
`sparkfleet roofline LANE --here --json`, or this machine): it reads config.json and the safetensors
headers of the lane's target model (and drafter, and the engram pin's tables when they live in
another repo), from the local hub when staged there, else from the NAS (said so), plus the host's
own measurements. The result is plain JSON, so the operator's machine needs neither the weights
nor the NAS to put a roofline into a report.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ..base.errors import SourceError
from ..facts.hubcache import HubRoot
from ..fleet.inventory import Host, Inventory, Lane, Pin
from .model import CostOptions, ModelCost, model_cost, snapshot_files


@dataclass(frozen=True)
class RooflineConfig:
    """The recipe's [roofline] table: what the files cannot say."""

    drafter: str | None = None
    draft_tokens: int | None = None
    options: CostOptions = CostOptions()

    @classmethod
    def of(cls, lane: Lane) -> RooflineConfig:
        section = lane.sections.roofline
        return cls(
            drafter=section.drafter,
            draft_tokens=section.draft_tokens,
            options=CostOptions(
                engram_rows_per_token=section.engram_rows_per_token,
                kv_cache_bytes=section.kv_cache_bytes,
            ),
        )


def snapshot_dir(hub: Path, pin: Pin) -> Path:
    root = HubRoot(hub)
    commit = root.resolve_revision(pin.source, pin.value)
    return root.repo_dir(pin.source) / "snapshots" / commit


def read_pin(host: Host, pin: Pin, options: CostOptions) -> tuple[ModelCost, str]:
    """The pin's cost from the host's local hub (staged), else its NAS hub; and where it was read."""
    try:
        snap, origin = snapshot_dir(host.local_hub, pin), "local"
        config, files = snapshot_files(snap, host.local_hub)
    except SourceError as exc:
        local_problem = exc.message
        snap, origin = snapshot_dir(host.nas_hub, pin), f"nas (not staged locally: {local_problem})"
        config, files = snapshot_files(snap, host.nas_hub)
    return model_cost(f"{pin.name} ({pin.ref})", config, files, options), origin


def lane_inputs(inv: Inventory, lane: Lane, host: Host) -> dict[str, Any]:
    """Costs of the lane's models as read on `host` (plain JSON: see `cost_from_doc`)."""
    if not lane.models:
        raise SourceError(f"lane {lane.name} names no models")
    config = RooflineConfig.of(lane)
    target_pin = inv.pins[lane.models[0].pin]
    target, origin = read_pin(host, target_pin, config.options)
    engram_pin = lane.sections.engram.pin if lane.sections.engram is not None else None
    if engram_pin and engram_pin != target_pin.name and engram_pin in inv.pins:
        tables, _ = read_pin(host, inv.pins[engram_pin], config.options)
        if tables.engram_row_bytes:
            target = replace(
                target,
                engram_row_bytes={**target.engram_row_bytes, **tables.engram_row_bytes},
                engram_rows_per_token=tables.engram_rows_per_token,
                notes=[*target.notes, f"engram tables read from the {engram_pin} pin"]
                + [n for n in tables.notes if "engram" in n],
            )
    out: dict[str, Any] = {"host": host.name, "target": asdict(target), "origin": origin}
    if config.drafter:
        if config.drafter not in inv.pins:
            raise SourceError(f"{lane.recipe_path}: roofline.drafter: unknown pin {config.drafter!r}")
        drafter, d_origin = read_pin(host, inv.pins[config.drafter], config.options)
        out["drafter"] = asdict(drafter)
        out["drafter_origin"] = d_origin
    return out


def cost_from_doc(doc: dict[str, Any]) -> ModelCost:
    """A ModelCost back from its JSON form (integer keys and tuples restored)."""
    fields = dict(doc)
    fields["moe_layers"] = {int(k): (int(v[0]), float(v[1])) for k, v in doc.get("moe_layers", {}).items()}
    fields["engram_row_bytes"] = {int(k): int(v) for k, v in doc.get("engram_row_bytes", {}).items()}
    return ModelCost(**fields)
