"""Prometheus scrape targets from the inventory, as file_sd files, and the scrape config that reads them.

Why generated: an address typed into prometheus.yml by hand goes stale the day a lane moves to
other hosts or a port changes. hosts/fleet.toml and the recipes already say where every engine
listens (a lane's head address and `[launch] port`) and which host runs a node exporter
(`node_exporter_port`); `sparkfleet view targets` writes them as Prometheus file_sd JSON, which
Prometheus re-reads on change, so a recipe edit reaches the scrape without a Prometheus restart.

Three files, one job each (`JOBS`): the view itself, every served lane's engine /metrics (vLLM
and SGLang serve theirs without the lane's key, as the demo server does), every node exporter.
Each target carries a `lane` or `host` label, so an engine's series join the view's by lane.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..base.atomic import ensure_dir, write_bytes
from ..base.errors import SparkfleetError
from ..fleet.inventory import Inventory
from ..lane.recipe import launch_recipe
from .collect import launched_lanes

# file_sd file -> the scrape job that reads it
JOBS = {
    "view.json": "sparkfleet-view",
    "engines.json": "sparkfleet-engines",
    "nodes.json": "sparkfleet-nodes",
}
RULES_NAME = "sparkfleet-rules.yml"


@dataclass(frozen=True)
class TargetGroup:
    targets: tuple[str, ...]
    labels: dict[str, str]

    def to_dict(self) -> dict:
        return {"targets": list(self.targets), "labels": self.labels}


def _hostport(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address and not address.startswith("[") else f"{address}:{port}"


def target_groups(inv: Inventory, view: str) -> dict[str, list[TargetGroup]]:
    """file_sd file name -> its target groups. `view`: the address:port Prometheus reaches the view at."""
    engines = []
    for name in launched_lanes(inv):
        try:
            recipe = launch_recipe(inv, name)
        except SparkfleetError:
            continue  # a lane that does not plan is shown by the view as such, not scraped
        head = inv.host(recipe.world.head)
        labels = {"lane": name, "host": head.name}
        engines.append(TargetGroup((_hostport(head.address, recipe.port),), labels))
    nodes = [
        TargetGroup((_hostport(h.address, h.node_exporter_port),), {"host": h.name})
        for _, h in sorted(inv.hosts.items())
        if h.node_exporter_port
    ]
    return {"view.json": [TargetGroup((view,), {})], "engines.json": engines, "nodes.json": nodes}


def write_targets(inv: Inventory, view: str, out: Path) -> dict[str, Path]:
    """Write the file_sd files into `out` (atomically: Prometheus may read them at any moment)."""
    ensure_dir(out)
    written = {}
    for name, groups in target_groups(inv, view).items():
        path = out / name
        write_bytes(path, (json.dumps([g.to_dict() for g in groups], indent=1) + "\n").encode())
        written[name] = path
    return written


def scrape_config(
    targets_dir: Path,
    rules: Path,
    interval_s: float = 15.0,
    credentials_file: Path | None = None,
    evaluation_s: float | None = None,
) -> dict:
    """prometheus.yml's `global`, `rule_files` and `scrape_configs` for the fleet, as a dict.

    JSON is YAML: `view prometheus-config` prints it as JSON, which Prometheus reads as YAML. An
    existing Prometheus takes the `scrape_configs` entries and the rule file (docs/fleet-ops.md).
    `credentials_file` holds the view's key when the view serves beyond loopback.
    """
    every = f"{interval_s:g}s"
    jobs = []
    for name, job in JOBS.items():
        entry: dict = {"job_name": job, "file_sd_configs": [{"files": [str(targets_dir / name)]}]}
        if name == "view.json" and credentials_file is not None:
            entry["authorization"] = {"credentials_file": str(credentials_file)}
        jobs.append(entry)
    return {
        "global": {"scrape_interval": every, "evaluation_interval": f"{(evaluation_s or interval_s):g}s"},
        "rule_files": [str(rules)],
        "scrape_configs": jobs,
    }


def write_prometheus_dir(inv: Inventory, view: str, out: Path, interval_s: float,
                         key_file: Path | None = None) -> dict[str, Path]:  # fmt: skip
    """`view targets`: the file_sd files, the rules and a prometheus.yml reading them, all in `out`.

    A folder that cannot be written is an error naming it (nothing half-written stays behind a
    final name: each file is written whole or not at all)."""
    out = out.absolute()
    try:
        written = write_targets(inv, view, out)
        rules = out / RULES_NAME
        write_bytes(rules, rules_path().read_bytes())
        config = scrape_config(out, rules, interval_s, key_file.absolute() if key_file else None)
        prom = out / "prometheus.yml"
        write_bytes(prom, (json.dumps(config, indent=1) + "\n").encode())
    except OSError as exc:
        raise SparkfleetError(
            f"{out}: cannot write Prometheus's files there ({exc.strerror or exc})",
            hint="--out names a folder this user can create and write",
        ) from None
    return {**written, "rules": rules, "prometheus": prom}


def rules_path() -> Path:
    """The alert rules shipped with sparkfleet (promtool-checked: tests/view/test_rules.py)."""
    return Path(__file__).parent / "rules" / RULES_NAME
