"""Gates a lane passes before any rank starts: memory admission, ports, host stack drift, fabric canary.

Facts → decision: the probe already brought each node's memory and busy ports (NodeFacts); the
host fingerprints are read with ordinary tools; the canary runs on every node in the lane's own
image. Each gate refuses with ExitCode.REFUSED and names host, numbers, rank pair or interface, so
the operator sees the reason before a single container exists.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..base.errors import ExitCode, SparkfleetError
from ..base.jsonable import to_jsonable
from ..facts.memory import MemoryFacts, admit, summary
from ..lane.recipe import rank_port
from ..node.protocol import CanaryRequest, CanarySettings, FingerprintRequest
from ..remote.hosts import fan_out
from ..remote.hoststack import HostFingerprint, drift, fingerprint_hosts
from ..remote.nodecall import ask_host, call_agent

if TYPE_CHECKING:
    from ..fleet.inventory import Inventory
    from .plan import LanePlan


class GateRefused(SparkfleetError):
    """A launch gate (memory, ports, drift, canary) refused the lane."""

    exit_code = ExitCode.REFUSED


@dataclass
class CanaryReport:
    ok: bool
    backend: str
    ranks: list[dict[str, Any]]
    problems: list[str]
    busbw_gbps: float | None
    seconds: float | None


@dataclass
class PreflightReport:
    memory: dict[str, str] = field(default_factory=dict)  # host -> summary
    fingerprints: dict[str, dict] = field(default_factory=dict)
    drift: list[str] = field(default_factory=list)
    drift_allowed: bool = False
    canary: CanaryReport | None = None


def check_memory(plan: LanePlan) -> dict[str, str]:
    """Every host's memory against the lane's need; refuse with every host's numbers at once."""
    need = plan.recipe.memory
    problems, seen = [], {}
    for host, nf in sorted(plan.facts.items()):
        if nf.memory is None:
            problems.append(f"{host}: memory not readable: {nf.memory_error or 'no answer'}")
            continue
        facts = MemoryFacts(**nf.memory)
        seen[host] = summary(facts)
        problems += admit(host, need, facts)
    if problems:
        raise GateRefused(
            f"lane {plan.lane} does not fit in memory; nothing was started:\n  " + "\n  ".join(problems),
            hint="free memory on the host(s), lower the KV budget / mem fraction in [launch.memory], "
            "or pick other hosts",
        )
    return seen


def check_ports(plan: LanePlan) -> None:
    problems = []
    head = plan.by_rank()[0]
    for spec in plan.by_rank():
        busy = set(plan.facts[spec.host].ports_in_use)
        for port, what in _lane_ports(plan, spec.host):
            if port in busy:
                problems.append(f"{spec.host}: {what} port {port} is already in use")
    if problems:
        raise GateRefused(
            "; ".join(problems),
            hint=f"stop what listens there (ss -ltnp on the host); the rendezvous is {head.host}'s dist port",
        )


def _lane_ports(plan: LanePlan, host: str) -> list[tuple[int, str]]:
    spec = plan.specs[host]
    out = [(rank_port(plan.recipe, spec.rank), "serving")]
    if spec.rank == 0 and spec.nnodes > 1:
        out.append((plan.recipe.dist_port, "rendezvous (dist-init)"))
    return out


def read_fingerprint(inv: Inventory, host: str, image: str | None, call_agent: Callable) -> dict[str, Any]:
    """One host's stack, read on the node by its agent (one ssh call): the one way both the drift
    gate and a bench report read it."""
    return ask_host(inv, host, FingerprintRequest(host, image), call=call_agent)["fingerprint"]


def fingerprints(inv: Inventory, plan: LanePlan, call_agent: Callable) -> dict[str, HostFingerprint]:
    """Every host's stack for the drift gate (all at once); a host that cannot answer refuses the launch."""
    image = plan.by_rank()[0].image

    def one(h: str) -> HostFingerprint:
        return HostFingerprint.from_dict(read_fingerprint(inv, h, image, call_agent))

    hosts = list(plan.specs)
    return dict(zip(hosts, fan_out(one, hosts), strict=True))


def lane_fingerprints(
    inv: Inventory, lane_name: str, image: str | None = None, call_agent: Callable = call_agent
) -> dict[str, dict[str, Any]]:
    """{host: fingerprint dict} for every host of a lane, all at once: what a bench report carries.
    A host that cannot answer gets {"error": ...} (`fingerprint_hosts`), never a crash."""
    return fingerprint_hosts(
        inv.lane(lane_name).hosts, lambda h: read_fingerprint(inv, h, image, call_agent)
    )


def check_drift(inv: Inventory, fps: dict[str, HostFingerprint], allow: bool) -> list[str]:
    drifts = [str(d) for h, fp in sorted(fps.items()) for d in drift(inv.host(h).stack, fp)]
    if drifts and not allow:
        raise GateRefused(
            "host stack drift; the lane was not started:\n  " + "\n  ".join(drifts),
            hint="bring the host back to the declared stack, update [stack] in hosts/fleet.toml once the "
            "new stack is proven, or launch with --allow-drift",
        )
    return drifts


def canary_backend(plan: LanePlan) -> str:
    c = plan.recipe.canary
    if c.backend:
        return c.backend
    return "nccl" if plan.recipe.gpus != "none" and plan.recipe.runtime != "process" else "gloo"


def run_canary(inv: Inventory, plan: LanePlan, call_agent: Callable) -> CanaryReport:
    """All ranks' canaries at once; refuse with the rank pair and interface on any failure."""
    c = plan.recipe.canary
    backend = canary_backend(plan)
    specs = plan.by_rank()
    master, _, port = specs[0].env["DIST_INIT_ADDR"].rpartition(":")
    settings = CanarySettings(backend=backend, bytes=c.size_bytes, pair_bytes=min(c.size_bytes, 4 << 20),
                              iters=c.iterations, timeout=c.timeout_s, python=c.python)  # fmt: skip

    def one(spec):
        req = CanaryRequest(to_jsonable(spec), settings, master, int(port))
        try:
            ans = ask_host(inv, spec.host, req, timeout=c.timeout_s + 180, call=call_agent)
            return {"host": spec.host, **ans["result"]}
        except SparkfleetError as exc:
            return {"host": spec.host, "rank": spec.rank, "ok": False, "stage": "agent", "error": exc.message}

    results = fan_out(one, specs)
    report = judge_canary(results, {s.rank: s.host for s in specs}, backend, c.min_busbw_gbps)
    if not report.ok:
        raise GateRefused(
            f"fabric canary ({backend}) failed for lane {plan.lane}; no weights were loaded:\n  "
            + "\n  ".join(report.problems),
            hint="check the named interface and route between the two hosts (ip addr, ip route, "
            "ibdev2netdev, the switch port); --no-canary skips this gate",
        )
    return report


def _who(rank: int, hosts: dict[int, str], ip: str | None, ifname: str | None) -> str:
    return f"rank {rank} ({hosts.get(rank, '?')}, {ip or '?'} on {ifname or '?'})"


def judge_canary(results: list[dict], hosts: dict[int, str], backend: str, floor_gbps: float) -> CanaryReport:
    """Pure: the ranks' canary answers → problems naming rank pairs and interfaces."""
    problems: list[str] = []
    pairs: dict[tuple[int, int], dict] = {}
    for r in results:
        for p in r.get("pairs", []):
            pairs[(p["src"], p["dst"])] = p
    for (src, dst), p in sorted(pairs.items()):
        if not p["ok"]:
            problems.append(
                f"{_who(src, hosts, p['src_ip'], p['src_ifname'])} cannot reach "
                f"{_who(dst, hosts, p['dst_ip'], p['dst_ifname'])} port {p['dst_port']}: {p['error']}"
            )
    if not pairs:
        # A rank that refused its own env (no such interface, no GPU) is the cause; the ranks left
        # waiting for it at the rendezvous are the effect: cause first, naming who waited on whom.
        causes = [r for r in results if not r.get("ok") and r.get("stage") in ("env", "address", "import")]
        for r in sorted(results, key=lambda r: r not in causes):
            if not r.get("ok"):
                waited = (
                    f" (waiting for rank {', '.join(str(c.get('rank')) for c in causes)})"
                    if causes and r not in causes
                    else ""
                )
                problems.append(
                    f"rank {r.get('rank')} on {r.get('host')}: {r.get('stage')}: {r.get('error')}{waited}"
                )
    elif not problems:
        for r in results:
            if not r.get("ok"):
                who = _who(r["rank"], hosts, r.get("ip"), r.get("ifname"))
                problems.append(f"{who}: {r.get('stage')}: {r.get('error')}")
    bws = [r["busbw_gbps"] for r in results if r.get("ok") and r.get("busbw_gbps") is not None]
    busbw = min(bws) if bws else None
    if not problems and floor_gbps and busbw is not None and busbw < floor_gbps:
        measured = [p for p in pairs.values() if p.get("ok") and p.get("gbps")]
        slow = min(measured, key=lambda p: p["gbps"]) if measured else None
        where = (
            f"; slowest pair {_who(slow['src'], hosts, slow['src_ip'], slow['src_ifname'])} -> "
            f"{_who(slow['dst'], hosts, slow['dst_ip'], slow['dst_ifname'])} at {slow['gbps']:.2f} Gbit/s"
            if slow
            else ""
        )
        problems.append(
            f"all-reduce bus bandwidth {busbw:.2f} Gbit/s is under the floor {floor_gbps:g} Gbit/s{where}"
        )
    secs = [r["seconds"] for r in results if r.get("seconds") is not None]
    return CanaryReport(not problems, backend, results, problems, busbw, max(secs) if secs else None)


def preflight(
    inv: Inventory,
    plan: LanePlan,
    call_agent: Callable,
    canary: bool = True,
    allow_drift: bool = False,
    on_event: Callable[[str], None] = lambda _m: None,
) -> PreflightReport:
    """Memory, ports, drift, canary, in that order (cheapest first); raises GateRefused on the first no."""
    report = PreflightReport(drift_allowed=allow_drift)
    report.memory = check_memory(plan)
    on_event("memory admission ok: " + "; ".join(f"{h}: {s}" for h, s in report.memory.items()))
    check_ports(plan)
    fps = fingerprints(inv, plan, call_agent)
    report.fingerprints = {h: fp.to_dict() for h, fp in fps.items()}
    report.drift = check_drift(inv, fps, allow_drift)
    on_event("host stack: " + stack_verdict([inv.host(h) for h in fps], report.drift))
    if canary and plan.recipe.canary.enabled and len(plan.specs) > 1:  # one rank: no fabric to test
        report.canary = run_canary(inv, plan, call_agent)
        bw = f", bus bandwidth {report.canary.busbw_gbps:.2f} Gbit/s" if report.canary.busbw_gbps else ""
        on_event(f"fabric canary ok ({report.canary.backend}, {len(report.canary.ranks)} ranks{bw})")
    return report


def stack_verdict(hosts: list, drifts: list[str]) -> str:
    """What the drift gate can truly say: `matches` only for hosts that declare a stack."""
    if drifts:
        return "DRIFT allowed: " + "; ".join(drifts)
    declared = [h.name for h in hosts if h.stack]
    undeclared = [h.name for h in hosts if not h.stack]
    if not declared:
        return "no stack declared (nothing to compare; [stack] in hosts/fleet.toml)"
    said = f"{', '.join(declared)} match the declared stack"
    return said + (f"; no stack declared for {', '.join(undeclared)}" if undeclared else "")

