"""`stage --dry-run` over a fleet: every host's own plan, and who would take what from where.

Each host plans on itself (it sees the NAS and its own free space); the coordinator then decides
which files the NAS must send (those some host lacks or holds known-wrong), splits them between
the hosts when fanning out (wave 1 from the NAS, wave 2 between peers), and which hosts lack the
space the real run checks first. The CLI only renders the `FleetDryRun` record.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..base.errors import SparkfleetError
from ..remote.hosts import fan_out
from . import remote
from .fanout import Pull, fanout_plan

if TYPE_CHECKING:
    from ..fleet.inventory import Inventory


@dataclass(frozen=True)
class FleetDryRun:
    hosts: list[str]
    answers: dict[str, dict[str, Any]]  # host → its own `stage --dry-run --json` answer
    spaces: dict[str, dict[str, Any]]  # host → its space preflight (hosts that reported one)
    wave1: dict[str, list[str]]  # host → the files it reads from the NAS
    pulls: list[Pull]  # wave 2 (fan-out only): files a host takes from a peer
    nas_reads: dict[str, int]  # host → bytes it reads from the NAS

    @property
    def plans(self) -> list[dict[str, Any]]:
        """The first host's plans (every host plans the same repos)."""
        return self.answers[self.hosts[0]]["plans"]

    @property
    def short(self) -> list[str]:
        """Hosts whose space preflight failed: the real run would stop there (exit SPACE)."""
        return [h for h, s in self.spaces.items() if not s["ok"]]


def _ignore(host: str, event: dict) -> None:
    pass


def _needs(answer: dict[str, Any]) -> set[tuple]:
    """What the NAS must send this host: the files it lacks or holds known-wrong (complete: none)."""
    return {(f[0], f[1], f[3]) for p in answer["plans"] for f in p["file_list"]
            if f[2] == "copy" or f[0] in set(p.get("repair_list", []))}  # fmt: skip


def fleet_dry_run(
    inv: Inventory, hosts: list[str], options: remote.StageOptions, fanout: bool
) -> FleetDryRun:
    """Ask every host for its plan at once, then decide the NAS reads and peer pulls.

    A fan-out the real run would refuse is refused here first, by the same check."""
    if fanout and len(hosts) > 1:
        remote.check_fanout(inv, hosts, remote.concrete_transport(inv, hosts, options.peer_transport))

    def ask(host: str) -> dict:
        def argv_for(prefix: list[str]) -> list[str]:
            return [*remote.stage_argv(prefix, inv.root.resolve(), host, options), "--dry-run"]

        outcome = remote.run_host_stage(inv, host, argv_for, _ignore, options.ssh_config)
        text = "\n".join(outcome.log)
        try:
            return json.loads(text[text.index("{") :])
        except ValueError:
            raise SparkfleetError(
                outcome.error or f"{host}: no plan came back",
                hint=outcome.hint or outcome.log_tail,
                exit_code=outcome.exit_code,
            ) from None

    answers = dict(zip(hosts, fan_out(ask, hosts), strict=True))
    spaces = {h: a.get("space") for h, a in answers.items() if a.get("space")}
    per_host = {h: _needs(a) for h, a in answers.items()}
    files = sorted(set().union(*per_host.values()))
    sizes = {rel: size for rel, size, _ in files}
    wave1, pulls = (
        fanout_plan(files, hosts) if fanout else ({h: sorted(f[0] for f in per_host[h]) for h in hosts}, [])
    )
    nas_reads = {h: sum(sizes[r] for r in rels) for h, rels in wave1.items()}
    return FleetDryRun(hosts, answers, spaces, wave1, pulls, nas_reads)
