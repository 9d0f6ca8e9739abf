"""The background loop behind the view: refresh the fleet snapshot every interval, never per scrape.

Why a loop and not work per request: Prometheus scrapes on its own clock, a browser reloads the
page when it likes, and several of either may come at once; none of them may start an ssh
session or an agent call. So a thread asks every lane and every host once per `interval_s` (all
at once, through a pool), and requests read the newest snapshot under a lock.

Why a bound per node: one host that hangs (a dead NFS mount under its hub, a half-open ssh) must
not hold the picture of the others. Each lane and host gets `node_timeout_s`; what has not
answered by then is shown as not answering (host unreachable, lane not up), and its call is left
to finish in the background: it is not asked again while it is still out.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_all
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from ..base.errors import SparkfleetError
from ..fleet.inventory import Inventory
from ..lane.recipe import launch_recipe
from .collect import host_floor, host_view, lane_view, launched_lanes
from .gatewaylog import AccessCounts, access_counts, gateway_view
from .snapshot import FleetSnapshot, HostView, LaneView

POOL_WIDTH = 16
T = TypeVar("T")


def _late_lane(inv: Inventory, name: str, why: str) -> LaneView:
    """A lane that did not answer in time: not up, nothing confirmed."""
    lane = inv.lane(name)
    try:
        r = launch_recipe(inv, name)
        head, port, ready_s, floor = r.world.head, r.port, r.timeouts.ready_s, r.memory.floor
    except SparkfleetError:
        head, port, ready_s, floor = lane.hosts[0], 0, 0.0, 0
    return LaneView(name, tuple(lane.hosts), head, port, False, False, False, 0, len(lane.hosts), None,
                    ready_s, floor, errors=(why,))  # fmt: skip


def _late_host(inv: Inventory, name: str, why: str) -> HostView:
    return HostView(name, False, why, tuple(lane.name for lane in inv.lanes_of(name)),
                    inv.host(name).reserve_bytes, host_floor(inv, name))  # fmt: skip


class Refresher:
    """Keeps the newest FleetSnapshot; `start()` runs the loop in a daemon thread, `refresh()` once."""

    def __init__(
        self,
        load: Callable[[], Inventory],
        interval_s: float = 15.0,
        node_timeout_s: float = 10.0,
        gateway_state: Path | None = None,
        clock: Callable[[], float] = time.time,
        after_load: Callable[[Inventory], None] = lambda _inv: None,
    ) -> None:
        """`after_load(inventory)` runs after every load that succeeded (view serve's targets)."""
        self.load, self.interval_s, self.node_timeout_s = load, interval_s, node_timeout_s
        self.after_load = after_load
        self.clock = clock
        self.counts: AccessCounts | None = access_counts(gateway_state) if gateway_state else None
        self.gateway_state = gateway_state
        self.pool = ThreadPoolExecutor(max_workers=POOL_WIDTH, thread_name_prefix="sparkfleet-view")
        self.inflight: dict[str, Future] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.inv: Inventory | None = None
        self.snapshot = FleetSnapshot(0.0, 0.0, 0, "no refresh yet", (), ())

    def current(self) -> FleetSnapshot:
        with self.lock:
            return self.snapshot

    def _submit(self, key: str, fn: Callable[[], object]) -> Future | None:
        """Start `fn` for `key` unless its previous call is still out (then None)."""
        prev = self.inflight.get(key)
        if prev is not None and not prev.done():
            return None
        fut = self.pool.submit(fn)
        self.inflight[key] = fut
        return fut

    def refresh(self) -> FleetSnapshot:
        """Ask every lane and host once (each within the bound) and publish the snapshot."""
        t0 = time.monotonic()
        error = None
        try:
            self.inv = self.load()
            self.after_load(self.inv)
        except (SparkfleetError, OSError) as exc:  # keep showing the last good inventory
            error = getattr(exc, "message", None) or str(exc)
        inv = self.inv
        if inv is None:
            return self._publish(FleetSnapshot(self.clock(), time.monotonic() - t0, 0, error, (), ()))
        lanes = launched_lanes(inv)
        timeout = self.node_timeout_s
        futures: dict[str, Future | None] = {}
        for name in lanes:
            futures[f"lane:{name}"] = self._submit(f"lane:{name}", lambda n=name: lane_view(inv, n))
        for name in sorted(inv.hosts):
            futures[f"host:{name}"] = self._submit(f"host:{name}", lambda n=name: host_view(inv, n, timeout))
        gw: Future | None = None
        if self.counts is not None and self.gateway_state is not None:
            gw = self._submit("gateway", lambda: gateway_view(inv, self.gateway_state, self.counts))
        wait_all([f for f in [*futures.values(), gw] if f is not None], timeout=timeout + 2.0)
        late = f"no answer within {timeout:g} s"
        lane_views = [self._result(futures[f"lane:{n}"], late, lambda why, n=n: _late_lane(inv, n, why))
                      for n in lanes]  # fmt: skip
        host_views = [self._result(futures[f"host:{n}"], late, lambda why, n=n: _late_host(inv, n, why))
                      for n in sorted(inv.hosts)]  # fmt: skip
        gateway = self._result(gw, late, lambda _why: self.snapshot.gateway) if gw is not None else None
        return self._publish(FleetSnapshot(self.clock(), time.monotonic() - t0, 0, error, tuple(lane_views),
                                           tuple(host_views), gateway))  # fmt: skip

    def _publish(self, snap: FleetSnapshot) -> FleetSnapshot:
        with self.lock:
            self.snapshot = replace(snap, refreshes=self.snapshot.refreshes + 1)
            return self.snapshot

    @staticmethod
    def _result(fut: Future | None, late: str, fallback: Callable[[str], T]) -> T:
        """The call's answer; `fallback(why)` when it is still out (`late`) or raised (the loop goes on)."""
        if fut is None or not fut.done():
            return fallback(late)
        try:
            return fut.result()
        except Exception as exc:  # noqa: BLE001 - whatever one lane or host did, the others are shown
            return fallback(f"{type(exc).__name__}: {exc}"[:300])

    def _loop(self) -> None:
        while not self.stopping.is_set():
            start = time.monotonic()
            with contextlib.suppress(Exception):  # the view outlives any one bad refresh
                self.refresh()
            self.stopping.wait(max(0.0, self.interval_s - (time.monotonic() - start)))

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self._loop, name="sparkfleet-view-refresh", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self.stopping.set()
        self.pool.shutdown(wait=False, cancel_futures=True)

