"""The fleet snapshot as Prometheus metrics, through prometheus_client's custom-collector API.

Naming follows Prometheus's conventions: a `sparkfleet_` prefix, then what is measured
(`lane_`, `host_`, `gateway_`, `view_`), base units in the name (`_bytes`, `_seconds`,
`_bytes_per_second`, `_ratio` for a share), `_total` for counters, and the lane, host, pin or
user as labels. `METRICS` is the one list of them: the collector emits exactly these families
(every one on every scrape, with no samples where nothing is known), and docs/fleet-ops.md's
table is generated from the registry that serves them (`python -m sparkfleet.view.metricsdoc`).

A value nobody could read is left out (no sample), never reported as 0: an alert on "free bytes
under the reserve" must not fire because a host did not answer. That a host did not answer is
its own metric (`sparkfleet_host_reachable 0`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..ops.watchstate import NOT_RUNNING, STATES
from .lanefiles import INCIDENT_KINDS
from .snapshot import FleetSnapshot, GatewayView, HostView, LaneView

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class MetricSpec:
    name: str  # without `_total` for counters (prometheus_client adds it)
    kind: str  # "gauge" | "counter"
    labels: tuple[str, ...]
    help: str

    @property
    def exposed(self) -> str:
        """The name in the text a scrape reads (a counter's samples and TYPE line end in _total)."""
        return self.name + "_total" if self.kind == "counter" else self.name


def _g(name: str, labels: tuple[str, ...], text: str) -> MetricSpec:
    return MetricSpec(name, "gauge", labels, text)


def _c(name: str, labels: tuple[str, ...], text: str) -> MetricSpec:
    return MetricSpec(name, "counter", labels, text)


L, H = ("lane",), ("host",)
METRICS: tuple[MetricSpec, ...] = (
    _g("sparkfleet_lane_up", L, "1 when every rank of the lane runs and every host of it answered"),
    _g("sparkfleet_lane_ready", L, "1 when the lane is up and its head answers /health and /v1/models"),
    _g("sparkfleet_lane_wanted", L, "1 when the lane's newest generation was launched and not stopped"),
    _g("sparkfleet_lane_ranks_running", L, "ranks of the lane running now"),
    _g("sparkfleet_lane_ranks_expected", L, "ranks the lane has (its hosts)"),
    _g("sparkfleet_lane_started_timestamp_seconds", L, "when the lane's earliest running rank started"),
    _g("sparkfleet_lane_ready_timeout_seconds", L, "the recipe's time for the lane to become ready"),
    _g("sparkfleet_lane_generation_info", ("lane", "generation", "image"), "the serving generation (1)"),
    _g("sparkfleet_lane_generation_good", L, "1 when the serving generation was promoted good"),
    _g("sparkfleet_lane_nas_weight_files", ("lane", "host"),
       "weight files of the serving generation read from the NAS, not the local NVMe, per host"),
    _g("sparkfleet_lane_decode_tokens_per_second", L, "decode rate of the lane's newest successful bench"),
    _g("sparkfleet_lane_ttft_seconds", L, "time to first token of the newest bench's decode probe"),
    _g("sparkfleet_lane_decode_bound_ratio", L, "newest bench decode as a share of the roofline bound"),
    _g("sparkfleet_lane_decode_reference_tokens_per_second", L, "the recipe's decode reference figure"),
    _g("sparkfleet_lane_decode_reference_ratio", L, "newest bench decode as a share of the reference figure"),
    _g("sparkfleet_lane_decode_floor_ratio", L, "the share of the reference below which the lane is slow"),
    _g("sparkfleet_lane_bench_timestamp_seconds", L, "when the newest successful bench ran"),
    _c("sparkfleet_lane_incidents", ("lane", "kind"), "incident bundles the supervisor wrote, by kind"),
    _g("sparkfleet_lane_last_incident_timestamp_seconds", L, "when the newest incident bundle was written"),
    _g("sparkfleet_lane_supervisor_state", ("lane", "state"),
       "1 for what the lane's supervisor (sparkfleet watch) does now, 0 for the other states"),
    _g("sparkfleet_lane_supervisor_probe_ok", L, "1 when the supervisor's last known-answer probe passed"),
    _g("sparkfleet_lane_supervisor_probe_latency_seconds", L, "how long the supervisor's last probe took"),
    _g("sparkfleet_lane_supervisor_probe_timestamp_seconds", L, "when the supervisor last probed"),
    _c("sparkfleet_lane_supervisor_restarts", L, "restarts by the running supervisor"),
    _g("sparkfleet_host_reachable", H, "1 when the host's agent answered in time (0: off or unreachable)"),
    _g("sparkfleet_host_facts_duration_seconds", H, "how long the host's agent took to answer"),
    _g("sparkfleet_host_memory_available_bytes", H, "MemAvailable on the host"),
    _g("sparkfleet_host_memory_total_bytes", H, "MemTotal on the host"),
    _g("sparkfleet_host_memory_floor_bytes", H, "the highest memory floor of the lanes on the host"),
    _g("sparkfleet_host_nvme_free_bytes", H, "free bytes on the filesystem of the host's local hub"),
    _g("sparkfleet_host_nvme_size_bytes", H, "size of the filesystem of the host's local hub"),
    _g("sparkfleet_host_nvme_reserve_bytes", H, "the free space fleet.toml asks the host to keep"),
    _g("sparkfleet_host_staged_bytes", ("host", "pin"), "bytes of the pin staged on the host's NVMe"),
    _g("sparkfleet_host_staged_expected_bytes", ("host", "pin"), "bytes of the pin the host's lanes need"),
    _g("sparkfleet_host_measured_rate_bytes_per_second", ("host", "measurement"),
       "the last measured rate on the host (nvme_write, nvme_read, nas_read, fabric_link)"),
    _g("sparkfleet_gateway_up", (), "1 when the gateway on this machine runs"),
    _c("sparkfleet_gateway_requests", ("user", "code"), "requests through the gateway, by user and status"),
    _g("sparkfleet_gateway_replicas", ("model",), "replicas the gateway serves a model with"),
    _g("sparkfleet_gateway_replicas_up", ("model",), "replicas that answer the gateway's key"),
    _g("sparkfleet_view_refresh_timestamp_seconds", (), "when the view's newest refresh finished"),
    _g("sparkfleet_view_refresh_duration_seconds", (), "how long the newest refresh took"),
    _c("sparkfleet_view_refreshes", (), "refreshes since the view started"),
    _g("sparkfleet_view_inventory_ok", (), "1 when fleet.toml and the recipes loaded in the last refresh"),
)  # fmt: skip
SPECS = {m.name: m for m in METRICS}

Sample = tuple[tuple[str, ...], float]


def _b(flag: bool) -> float:
    return 1.0 if flag else 0.0


def lane_samples(v: LaneView) -> Iterator[tuple[str, Sample]]:
    one = (v.lane,)
    yield "sparkfleet_lane_up", (one, _b(v.up))
    yield "sparkfleet_lane_ready", (one, _b(v.ready))
    yield "sparkfleet_lane_wanted", (one, _b(v.wanted))
    yield "sparkfleet_lane_ranks_running", (one, v.ranks_running)
    yield "sparkfleet_lane_ranks_expected", (one, v.ranks_expected)
    yield "sparkfleet_lane_ready_timeout_seconds", (one, v.ready_timeout_s)
    if v.started_at is not None:
        yield "sparkfleet_lane_started_timestamp_seconds", (one, v.started_at)
    if v.generation is not None:
        yield "sparkfleet_lane_generation_info", ((v.lane, v.generation, v.image or ""), 1.0)
        yield "sparkfleet_lane_generation_good", (one, _b(v.generation_good))
    for host in v.hosts:
        if v.ranks_running:
            yield "sparkfleet_lane_nas_weight_files", ((v.lane, host), v.nas_weight_files.get(host, 0))
    b = v.bench
    if b is not None:
        yield "sparkfleet_lane_bench_timestamp_seconds", (one, b.created_at)
        if b.decode_tps is not None:
            yield "sparkfleet_lane_decode_tokens_per_second", (one, b.decode_tps)
        if b.ttft_s is not None:
            yield "sparkfleet_lane_ttft_seconds", (one, b.ttft_s)
        if b.bound_pct is not None:
            yield "sparkfleet_lane_decode_bound_ratio", (one, b.bound_pct / 100.0)
    if v.reference_tps is not None:
        yield "sparkfleet_lane_decode_reference_tokens_per_second", (one, v.reference_tps)
        yield "sparkfleet_lane_decode_floor_ratio", (one, v.decode_floor_pct / 100.0)
    if v.reference_pct is not None:
        yield "sparkfleet_lane_decode_reference_ratio", (one, v.reference_pct / 100.0)
    for kind in INCIDENT_KINDS:
        yield "sparkfleet_lane_incidents", ((v.lane, kind), sum(1 for i in v.incidents if i.kind == kind))
    if v.incidents:
        yield "sparkfleet_lane_last_incident_timestamp_seconds", (one, v.incidents[0].at)
    sup = v.supervisor
    state = sup.state if sup is not None else NOT_RUNNING
    for s in (*STATES, NOT_RUNNING):
        yield "sparkfleet_lane_supervisor_state", ((v.lane, s), _b(s == state))
    if sup is not None:
        yield "sparkfleet_lane_supervisor_restarts", (one, sup.restarts)
        if sup.last_probe_ok is not None:
            yield "sparkfleet_lane_supervisor_probe_ok", (one, _b(sup.last_probe_ok))
        if sup.last_probe_latency_s is not None:
            yield "sparkfleet_lane_supervisor_probe_latency_seconds", (one, sup.last_probe_latency_s)
        if sup.last_probe_at is not None:
            yield "sparkfleet_lane_supervisor_probe_timestamp_seconds", (one, sup.last_probe_at)


def host_samples(v: HostView) -> Iterator[tuple[str, Sample]]:
    one = (v.host,)
    yield "sparkfleet_host_reachable", (one, _b(v.reachable))
    yield "sparkfleet_host_nvme_reserve_bytes", (one, v.nvme_reserve_bytes)
    if v.memory_floor_bytes is not None:
        yield "sparkfleet_host_memory_floor_bytes", (one, v.memory_floor_bytes)
    for name, value in (
        ("sparkfleet_host_facts_duration_seconds", v.answered_s),
        ("sparkfleet_host_memory_available_bytes", v.memory_available_bytes),
        ("sparkfleet_host_memory_total_bytes", v.memory_total_bytes),
        ("sparkfleet_host_nvme_free_bytes", v.nvme_free_bytes),
        ("sparkfleet_host_nvme_size_bytes", v.nvme_total_bytes),
    ):
        if v.reachable and isinstance(value, int | float):
            yield name, (one, value)
    for s in v.staged if v.reachable else ():
        if s.expected_bytes is not None:
            yield "sparkfleet_host_staged_bytes", ((v.host, s.pin), s.staged_bytes)
            yield "sparkfleet_host_staged_expected_bytes", ((v.host, s.pin), s.expected_bytes)
    for name, rate in sorted(v.rates.items()) if v.reachable else ():
        yield "sparkfleet_host_measured_rate_bytes_per_second", ((v.host, name), rate)


def gateway_samples(g: GatewayView) -> Iterator[tuple[str, Sample]]:
    yield "sparkfleet_gateway_up", ((), _b(g.running))
    for (user, code), n in sorted(g.requests.items()):
        yield "sparkfleet_gateway_requests", ((user, code), n)
    for model, n in sorted(g.replicas.items()):
        yield "sparkfleet_gateway_replicas", ((model,), n)
        yield "sparkfleet_gateway_replicas_up", ((model,), g.replicas_up.get(model, 0))


def snapshot_samples(snap: FleetSnapshot) -> Iterator[tuple[str, Sample]]:
    if snap.refreshes:
        yield "sparkfleet_view_refresh_timestamp_seconds", ((), snap.taken_at)
        yield "sparkfleet_view_refresh_duration_seconds", ((), snap.refresh_s)
    yield "sparkfleet_view_refreshes", ((), snap.refreshes)
    yield "sparkfleet_view_inventory_ok", ((), _b(snap.inventory_error is None and snap.refreshes > 0))
    for lane in snap.lanes:
        yield from lane_samples(lane)
    for host in snap.hosts:
        yield from host_samples(host)
    if snap.gateway is not None:
        yield from gateway_samples(snap.gateway)


class FleetCollector(Collector):
    """Every METRICS family from the newest snapshot `source()` returns (it never blocks on a node)."""

    def __init__(self, source: Callable[[], FleetSnapshot]) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}
        for spec in METRICS:
            cls = GaugeMetricFamily if spec.kind == "gauge" else CounterMetricFamily
            families[spec.name] = cls(spec.name, spec.help, labels=list(spec.labels))
        for name, (labels, value) in snapshot_samples(self.source()):
            families[name].add_metric(list(labels), float(value))
        yield from families.values()


def registry_for(source: Callable[[], FleetSnapshot]) -> CollectorRegistry:
    """A registry holding only the fleet's metrics (no process or platform collectors)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FleetCollector(source))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    """The Prometheus text exposition of the registry."""
    return generate_latest(registry)
