"""The live fleet page: one self-refreshing HTML page drawn from the same snapshot as /metrics.

No script at all: the page reloads itself with `<meta http-equiv="refresh">` every refresh
interval, and its tables are plain HTML with a stylesheet in the head. Every value that came
from a file, a node or the inventory goes through `_e` (html.escape, quotes included), and
every link is built from a lane name and a file name that were checked first (`quote`): an
incident reason, a generation id or an error message holding markup shows as text.

Each row links to what the CLI shows in full: a lane to its bench history page (the page
`sparkfleet report html` writes, served at /lanes/<lane>/history), an incident to its bundle's
summary (/lanes/<lane>/incidents/<bundle>; the bundle's logs stay on disk, 0600, for
`sparkfleet` and the operator).
"""

from __future__ import annotations

import html
import time
from collections.abc import Sequence
from urllib.parse import quote

from ..facts.memory import gib
from .snapshot import FleetSnapshot, GatewayView, HostView, LaneView

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.2em;color:#1b1b1b;background:#fafafa}
h1{font-size:20px;margin:0 0 .2em}h2{font-size:16px;margin:1.2em 0 .4em}
.meta{color:#555;margin-bottom:.8em}
table{border-collapse:collapse;background:#fff;min-width:60%}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eee}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.state{font-weight:600;color:#fff;border-radius:3px;padding:1px 6px;display:inline-block}
.s-ok{background:#1a7f37}.s-bad{background:#cf222e}.s-warn{background:#bf8700}.s-idle{background:#6e7781}
.err{color:#cf222e}.dim{color:#6e7781}
"""
DASH = "—"


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _badge(text: str, kind: str) -> str:
    return f'<span class="state s-{kind}">{_e(text)}</span>'


def _pct(value: float | None) -> str:
    return DASH if value is None else f"{value:.0f} %"


def _num(value: float | None, fmt: str = "{:.1f}") -> str:
    return DASH if value is None else fmt.format(value)


def _when(t: float | None) -> str:
    return DASH if t is None else time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(t))


def lane_state(v: LaneView) -> tuple[str, str]:
    """(word, colour) for a lane: ready, booting, degraded, down (wanted but not up), stopped."""
    if v.ready:
        return "ready", "ok"
    if v.up:
        return "booting", "warn"
    if v.ranks_running:
        return f"{v.ranks_running}/{v.ranks_expected} ranks", "bad"
    return ("down", "bad") if v.wanted else ("stopped", "idle")


def _weights(v: LaneView) -> str:
    if not v.ranks_running:
        return DASH
    nas = {h: n for h, n in sorted(v.nas_weight_files.items()) if n}
    if not nas:
        return "local"
    return '<span class="err">' + "; ".join(f"NAS on {_e(h)} ({n} files)" for h, n in nas.items()) + "</span>"


def _supervisor(v: LaneView) -> str:
    s = v.supervisor
    if s is None:
        return '<span class="dim">not watched</span>'
    kind = {"watching": "ok", "failing": "warn", "restarting": "warn"}.get(s.state, "bad")
    probe = "" if s.last_probe_latency_s is None else f" ({s.last_probe_latency_s:.1f} s)"
    return _badge(s.state, kind) + _e(probe)


def lanes_table(lanes: Sequence[LaneView]) -> str:
    rows = []
    for v in lanes:
        word, kind = lane_state(v)
        lane = quote(v.lane, safe="")
        gen = DASH if v.generation is None else _e(v.generation) + (" ✓ good" if v.generation_good else "")
        decode = DASH if v.bench is None or v.bench.decode_tps is None else f"{v.bench.decode_tps:.1f}"
        bound = None if v.bench is None or v.bench.bound_pct is None else v.bench.bound_pct
        ref = _pct(v.reference_pct)
        if v.reference_tps is not None:
            ref += f' <span class="dim">of {v.reference_tps:g}</span>'
        errors = "".join(f'<div class="err">{_e(e)}</div>' for e in v.errors)
        rows.append(
            f'<tr data-lane="{_e(v.lane)}"><td><a href="/lanes/{lane}/history">{_e(v.lane)}</a></td>'
            f"<td>{_badge(word, kind)}{errors}</td>"
            f'<td class="num">{v.ranks_running}/{v.ranks_expected}</td>'
            f"<td>{gen}</td><td class=\"num\">{decode}</td><td class=\"num\">{ref}</td>"
            f'<td class="num">{_pct(bound)}</td><td>{_weights(v)}</td><td>{_supervisor(v)}</td></tr>'
        )
    head = ("<tr><th>lane</th><th>state</th><th>ranks</th><th>generation</th><th>decode tok/s</th>"
            "<th>vs reference</th><th>vs roofline</th><th>weights</th><th>supervisor</th></tr>")  # fmt: skip
    if not rows:
        return "<p>no lane has a [launch] table</p>"
    return f'<table id="lanes">{head}{"".join(rows)}</table>'


def _bytes_of(used: int | None, total: int | None) -> str:
    return DASH if used is None else gib(used) + ("" if total is None else f" / {gib(total)}")


def hosts_table(hosts: Sequence[HostView]) -> str:
    rows = []
    for v in hosts:
        power = _badge("on", "ok") if v.reachable else _badge("off / unreachable", "bad")
        err = f'<div class="err">{_e(v.error)}</div>' if v.error else ""
        low_mem = (v.memory_available_bytes is not None and v.memory_floor_bytes is not None
                   and v.memory_available_bytes < v.memory_floor_bytes)  # fmt: skip
        low_disk = v.nvme_free_bytes is not None and v.nvme_free_bytes < v.nvme_reserve_bytes
        floor = ""
        if v.memory_floor_bytes is not None:
            floor = f' <span class="dim">floor {gib(v.memory_floor_bytes)}</span>'
        staged = "; ".join(
            f"{_e(s.pin)} {s.staged_bytes * 100 // s.expected_bytes if s.expected_bytes else 100} %"
            for s in v.staged
            if s.expected_bytes is not None
        )
        rates = ", ".join(f"{_e(k)} {r / 1e6:.0f} MB/s" for k, r in sorted(v.rates.items()))
        rows.append(
            f'<tr data-host="{_e(v.host)}"><td>{_e(v.host)}</td><td>{power}{err}</td>'
            f'<td class="{"err" if low_mem else ""}">'
            f"{_bytes_of(v.memory_available_bytes, v.memory_total_bytes)}{floor}</td>"
            f'<td class="{"err" if low_disk else ""}">{_bytes_of(v.nvme_free_bytes, v.nvme_total_bytes)}'
            f' <span class="dim">reserve {gib(v.nvme_reserve_bytes)}</span></td>'
            f"<td>{staged or DASH}</td><td>{rates or DASH}</td></tr>"
        )
    head = ("<tr><th>host</th><th>power</th><th>memory available</th><th>NVMe free</th>"
            "<th>staged</th><th>last measured</th></tr>")  # fmt: skip
    return f'<table id="hosts">{head}{"".join(rows)}</table>'


def incidents_table(lanes: Sequence[LaneView], limit: int = 20) -> str:
    found = sorted(((i, v.lane) for v in lanes for i in v.incidents), key=lambda x: x[0].at, reverse=True)
    if not found:
        return '<p id="incidents">no incidents</p>'
    rows = [
        f'<tr><td>{_when(i.at)}</td><td>{_e(lane)}</td><td>{_e(i.kind)}</td><td>{_e(i.reason)}</td>'
        f'<td><a href="/lanes/{quote(lane, safe="")}/incidents/{quote(i.name, safe="")}">'
        f"{_e(i.name)}</a></td></tr>"
        for i, lane in found[:limit]
    ]
    head = "<tr><th>when</th><th>lane</th><th>kind</th><th>reason</th><th>bundle</th></tr>"
    return f'<table id="incidents">{head}{"".join(rows)}</table>'


def gateway_section(g: GatewayView | None) -> str:
    if g is None:
        return ""
    users: dict[str, list[int]] = {}
    for (user, code), n in g.requests.items():
        counts = users.setdefault(user, [0, 0])
        counts[0] += n
        counts[1] += n if code == "401" else 0
    rows = "".join(f"<tr><td>{_e(u)}</td><td class=\"num\">{a}</td><td class=\"num\">{b}</td></tr>"
                   for u, (a, b) in sorted(users.items()))  # fmt: skip
    replicas = ", ".join(f"{_e(m)} {g.replicas_up.get(m, 0)}/{n}" for m, n in sorted(g.replicas.items()))
    state = _badge("running", "ok") if g.running else _badge("not running", "bad")
    return (f'<h2>Gateway</h2><p id="gateway">{state} replicas up: {replicas or DASH}</p>'
            f"<table><tr><th>user</th><th>requests</th><th>401</th></tr>{rows}</table>")  # fmt: skip


def render(snap: FleetSnapshot, refresh_s: float) -> str:
    """The whole page; it reloads itself every `refresh_s` seconds."""
    every = max(1, round(refresh_s))
    inv = f'<p class="err">inventory: {_e(snap.inventory_error)}</p>' if snap.inventory_error else ""
    body = [
        "<h1>sparkfleet — the fleet</h1>",
        f'<div class="meta">as of {_when(snap.taken_at if snap.refreshes else None)} '
        f"(refreshed in {snap.refresh_s:.1f} s); this page reloads every {every} s</div>",
        inv,
        "<h2>Lanes</h2>", lanes_table(snap.lanes),
        "<h2>Hosts</h2>", hosts_table(snap.hosts),
        "<h2>Latest incidents</h2>", incidents_table(snap.lanes),
        gateway_section(snap.gateway),
    ]  # fmt: skip
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="refresh" content="{every}">'
        f"<title>sparkfleet — the fleet</title><style>{CSS}</style></head>"
        f"<body>{''.join(body)}</body></html>\n"
    )


def incident_page(lane: str, name: str, summary: dict) -> str:
    """An incident bundle's summary (what the supervisor recorded; logs stay in the bundle)."""
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in summary.items())
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(lane)} incident {_e(name)}</title><style>{CSS}</style></head><body>"
        f"<h1>{_e(lane)} — incident {_e(name)}</h1>"
        f'<div class="meta">recipes/{_e(lane)}/incidents/{_e(name)}/ holds the logs, dmesg and envs '
        f'(0600); <a href="/">back to the fleet</a></div><table>{rows}</table></body></html>\n'
    )
