"""What a bench or smoke run points at: a lane from the inventory, or any OpenAI-compatible URL.

For a lane, the URL is http://<head host address>:<port>/v1 — the head is lane.hosts[0] and the port
the recipe's [launch] port (30000, SGLang's default, when the recipe names none); [bench] url
overrides both (e.g. a load balancer). The target also carries what a report must record: the pins
in force (the lane's models and its launch image), the recipe's sha256 and the host list.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..base.errors import SparkfleetError
from ..base.sanitize import clean, split_credentials
from ..facts.hubcache import repo_folder
from ..fleet.inventory import Inventory, Lane
from .client import Endpoint
from .probes import DEFAULT_SMOKE, DEFAULT_SMOKE_MAX_TOKENS, SmokeCase

DEFAULT_PORT = 30000
API_KEY_ENV = "SPARKFLEET_API_KEY"
DEFAULT_URL_OUT = Path("sparkfleet-reports")  # a --url or --gateway run's reports, relative to the cwd


@dataclass(frozen=True)
class Thresholds:
    """How much worse than the baseline a report may be before `compare` calls it a regression."""

    decode_tps_drop_pct: float = 5.0
    prefill_tps_drop_pct: float = 10.0
    ttft_rise_pct: float = 25.0
    aggregate_tps_drop_pct: float = 10.0
    quality_drop_points: float = 3.0


@dataclass(frozen=True)
class BenchTarget:
    url: str
    lane: str | None = None
    hosts: tuple[str, ...] = ()
    pins: dict[str, dict[str, Any]] = field(default_factory=dict)
    recipe_sha256: str | None = None
    reports_dir: Path | None = None
    smoke: tuple[SmokeCase, ...] = tuple(SmokeCase(p, e) for p, e in DEFAULT_SMOKE)
    baseline: str | None = None
    thresholds: Thresholds = field(default_factory=Thresholds)
    api_key_env: str = API_KEY_ENV
    url_auth: str | None = field(default=None, repr=False)  # from `user:pass@` in --url, never stored
    tokenizer: Path | None = None  # the model's own tokenizer.json, when a readable hub holds it
    # "weights from NAS on dgx2 (10 files)" when the serving generation was launched that way
    weights: str = ""
    # a lane's own key (its head's key file, read once through the agent); never repr'd or stored
    key_loader: Callable[[], str | None] | None = field(default=None, repr=False, compare=False)
    key_cache: dict[str, str | None] = field(default_factory=dict, repr=False, compare=False)
    gateway: dict[str, Any] | None = None  # `bench --gateway`: the policy and the replicas behind it
    # the recipe's [bench.quality]: why this lane's bench runs no quality phase (None: it runs one),
    # and the per-request deadline its quality phase holds to (None: QualitySettings' default)
    quality_skip: str | None = None
    quality_request_timeout_s: float | None = None

    def api_key(self) -> str | None:
        """$SPARKFLEET_API_KEY (or [bench] api_key_env) when set: a gateway or user key; else the
        lane's key from its head host. Never from argv, never into a report."""
        explicit = os.environ.get(self.api_key_env)
        if explicit or self.key_loader is None:
            return explicit or None
        if "key" not in self.key_cache:
            self.key_cache["key"] = self.key_loader()
        return self.key_cache["key"]

    def endpoint(self, model: str | None, timeout: float) -> Endpoint:
        return Endpoint(self.url, model, self.api_key(), timeout, basic_auth=self.url_auth)


def lane_url(inv: Inventory, lane: Lane) -> str:
    url, launch = lane.sections.bench.url, lane.sections.launch
    if url is not None:
        return url
    port = launch.port if launch is not None and launch.port is not None else DEFAULT_PORT
    head = inv.host(lane.hosts[0])
    return f"http://{head.address}:{port}/v1"


def pins_in_force(inv: Inventory, lane: Lane) -> dict[str, dict[str, Any]]:
    """Every pin the lane runs on: its models and its launch image (value exactly as recorded)."""
    names = [m.pin for m in lane.models]
    launch = lane.sections.launch
    if launch is not None and launch.image is not None:
        names.append(launch.image)
    out = {}
    for name in names:
        pin = inv.pins.get(name)
        if pin is not None:
            out[name] = {
                "kind": pin.kind,
                "source": pin.source,
                "value": pin.value,
                "tag": pin.tag,
                "resolved": pin.resolved,
            }
    return out


def smoke_cases(lane: Lane) -> tuple[SmokeCase, ...]:
    smoke = lane.sections.smoke
    default_max = int(smoke.max_tokens if smoke.max_tokens is not None else DEFAULT_SMOKE_MAX_TOKENS)
    cases = tuple(
        SmokeCase(c.prompt, str(c.expect), int(c.max_tokens if c.max_tokens is not None else default_max))
        for c in smoke.cases
    )
    return cases or tuple(SmokeCase(p, e, default_max) for p, e in DEFAULT_SMOKE)


def staged_tokenizer(inv: Inventory, lane: Lane) -> Path | None:
    """The lane's first model's tokenizer.json in a hub this machine can read, or None.

    The head's staged local hub first (a bench run on the head), then the NAS hub; the snapshot is
    the pinned revision (a full commit, or the one snapshot a recorded prefix names). Offline: only
    files already on disk are looked at.
    """
    if not lane.models:
        return None
    need = lane.models[0]
    head = inv.host(lane.hosts[0])
    for hub in (head.local_hub, head.nas_hub):
        snapshots = hub / repo_folder(need.repo) / "snapshots"
        try:
            names = [p.name for p in snapshots.iterdir()] if snapshots.is_dir() else []
        except OSError:
            continue
        for name in sorted(n for n in names if need.revision and n.startswith(need.revision)):
            candidate = snapshots / name / "tokenizer.json"
            if candidate.is_file():
                return candidate
    return None


def head_key(inv: Inventory, name: str) -> str | None:
    """The lane's API key from its head host's key file (apikeys), read through the launch agent."""
    from ..launch.lanekeys import lane_key
    from ..remote.hosts import HostUnreachable
    from ..remote.nodecall import call_agent

    try:
        return lane_key(inv, name, call_agent)
    except HostUnreachable:
        return None  # the request itself will say the host is unreachable


def for_lane(inv: Inventory, name: str) -> BenchTarget:
    lane = inv.lane(name)
    bench = lane.sections.bench
    thresholds = Thresholds(**{k: float(v) for k, v in bench.thresholds.items()})
    request_s = bench.quality.request_timeout_s
    creds = split_credentials(lane_url(inv, lane))  # a [bench] url may carry user:pass@
    return BenchTarget(
        url=creds.url,
        url_auth=creds.basic_auth,
        lane=lane.name,
        hosts=lane.hosts,
        pins=pins_in_force(inv, lane),
        recipe_sha256=hashlib.sha256(lane.recipe_path.read_bytes()).hexdigest(),
        reports_dir=lane.recipe_path.parent / "reports",
        smoke=smoke_cases(lane),
        baseline=bench.baseline,
        thresholds=thresholds,
        api_key_env=bench.api_key_env if bench.api_key_env is not None else API_KEY_ENV,
        tokenizer=staged_tokenizer(inv, lane),
        weights=serving_weights(inv, lane.name),
        key_loader=None if bench.url is not None else functools.partial(head_key, inv, name),
        quality_skip=clean(str(bench.quality.skip)) if bench.quality.skip else None,
        quality_request_timeout_s=float(request_s) if _positive(request_s) else None,
    )


def _positive(value: Any) -> bool:
    """A finite number above zero (TOML allows nan and inf, which no deadline can be)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < float("inf")


def for_gateway(
    state_dir: Path, out: Path | None, on_event: Callable[[str], None] = lambda _m: None
) -> BenchTarget:
    """The running `sparkfleet gateway` (its URL, its key, its policy and replicas for the report),
    once it routes to the lanes that serve behind it: a bench's first request must not meet a
    gateway that has not taken a just-relaunched lane yet (503 "No models available")."""
    from ..serving.gateway import gateway_key, serving_now

    st = serving_now(state_dir, on_event=on_event)
    workers = [{k: w[k] for k in ("lane", "model", "url")} for w in st["workers"]]
    return BenchTarget(
        url=st["url"],
        reports_dir=out,
        key_loader=functools.partial(gateway_key, state_dir),
        gateway={"policy": st["policy"], "workers": workers},
    )


def serving_weights(inv: Inventory, lane: str) -> str:
    """What the lane's serving generation recorded about NAS-bound weights ("" when all local)."""
    from ..lane.weights import weights_note
    from ..launch.generations import current

    gen = current(inv.root, lane)
    return weights_note((gen or {}).get("nas_weights"))


def for_url(url: str, out: Path | None) -> BenchTarget:
    """A target for any URL; `user:pass@` in it becomes an Authorization header, never a stored URL."""
    creds = split_credentials(url)
    if not url.startswith(("http://", "https://")):
        raise SparkfleetError(
            f"--url wants an http(s) URL, got {clean(creds.url)!r}", hint="e.g. http://127.0.0.1:30000/v1"
        )
    url = creds.url.rstrip("/")
    if not url.endswith("/v1"):
        url += "/v1"
    return BenchTarget(url=url, reports_dir=out, url_auth=creds.basic_auth)


def pick_target(
    inventory: Callable[[], Inventory],
    lane: str | None,
    url: str | None,
    out: Path | None,
    gateway: bool = False,
    on_event: Callable[[str], None] = lambda _m: None,
) -> BenchTarget:
    """What `smoke` or `bench` points at: the running gateway, a URL, or a lane (exactly one;
    `inventory` is read only for a lane). `out`: the report folder instead of the target's own."""
    if gateway:
        if lane or url:
            raise SparkfleetError("--gateway takes no LANE or --url", hint="sparkfleet bench --gateway")
        from ..serving.gateway import state_dir_in_force

        return for_gateway(state_dir_in_force(), out or DEFAULT_URL_OUT, on_event)
    if bool(lane) == bool(url):
        raise SparkfleetError(
            "name a LANE or give --url (exactly one)",
            hint="e.g. `sparkfleet bench dsv41-flash-exl3-2x` or `--url http://127.0.0.1:30000/v1`",
        )
    if url:
        return for_url(url, out or DEFAULT_URL_OUT)
    target = for_lane(inventory(), lane or "")
    return dataclasses.replace(target, reports_dir=out) if out is not None else target
