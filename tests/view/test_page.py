"""The fleet page as headless Chromium renders it: every row there, every value escaped (the bench
history page's XSS cases, and the view's own: incident reasons, errors, generation ids, pins, user
names), states in their colours on the screenshot, and the page reloading itself without a script."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

from sparkfleet.node.hostread import StagedPin
from sparkfleet.ops.watchstate import WatchState
from sparkfleet.view.page import render
from sparkfleet.view.snapshot import (
    BenchFigures,
    FleetSnapshot,
    GatewayView,
    HostView,
    IncidentView,
    LaneView,
)
from support.chromium import needs_chromium, run_chromium

SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(1)>'
GIB = 1 << 30


class Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(text: str) -> Elements:
    e = Elements()
    e.feed(text)
    return e


def hostile_snapshot() -> FleetSnapshot:
    watch = WatchState("exl3", "needs_human", 1, None, "b", 0.0, 9, 4, 3, 0.0, False, 2.5, SCRIPT)
    ready = LaneView("mia", ("dgx3", "dgx4"), "dgx3", 8000, True, True, True, 2, 2, 1.0, 600.0, 512 << 20,
                     generation="20260927T053009000Z", generation_good=True, image=IMG,
                     bench=BenchFigures("2026-09-27_053009_bench", 1.0, 88.0, 0.12, 71.5),
                     reference_tps=90.2)  # fmt: skip
    incident = IncidentView(IMG, 2.0, "wrong_answer", f"wrong answer {SCRIPT}")
    down = LaneView("exl3", ("dgx1", "dgx2"), "dgx1", 8000, True, False, False, 0, 2, None, 3600.0, 512 << 20,
                    errors=(f"dgx2: {SCRIPT}",), supervisor=watch, incidents=(incident,))  # fmt: skip
    nas = LaneView("aiden", ("dgx5",), "dgx5", 8000, True, True, True, 1, 1, 1.0, 600.0, 512 << 20,
                   nas_weight_files={"dgx5": 51})  # fmt: skip
    hosts = (
        HostView("dgx1", True, None, ("exl3",), 200 * GIB, 512 << 20, 100 << 20, 120 * GIB, 50 * GIB,
                 3700 * GIB, (StagedPin(IMG, "org/repo", "c" * 40, 100, 50, 2, 1),), {"nas_read": 1.1e9}),
        HostView("dgx2", False, f"ssh failed: {IMG}", ("exl3",), 200 * GIB, 512 << 20),
    )  # fmt: skip
    gateway = GatewayView(True, {(SCRIPT, "401"): 3, ("alice", "200"): 7}, {"m": 1}, {"m": 2})
    return FleetSnapshot(3.0, 0.5, 4, None, (ready, down, nas), hosts, gateway)


def test_every_value_is_escaped_and_nothing_runs():
    text = render(hostile_snapshot(), 15)
    dom = parse(text)
    tags = [t for t, _ in dom.tags]
    assert "script" not in tags and "img" not in tags and "iframe" not in tags
    assert not [a for _, attrs in dom.tags for a in attrs if a.startswith("on")]
    # the lane's error, the incident's reason, the gateway's user name
    assert text.count("&lt;script&gt;alert(1)&lt;/script&gt;") == 3
    assert SCRIPT not in text and IMG not in text
    hrefs = [a["href"] for t, a in dom.tags if t == "a"]
    assert "/lanes/mia/history" in hrefs and all(h.startswith("/lanes/") for h in hrefs)
    incident = next(h for h in hrefs if "/incidents/" in h)
    assert incident == "/lanes/exl3/incidents/%22%3E%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E"
    assert ('meta', {"http-equiv": "refresh", "content": "15"}) in dom.tags


@needs_chromium
def test_chromium_renders_the_rows_and_their_states(tmp_path):
    page = tmp_path / "fleet.html"
    page.write_text(render(hostile_snapshot(), 15))
    done = run_chromium(tmp_path, "--dump-dom", page.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    dom = parse(done.stdout)
    rows = {a.get("data-lane") or a.get("data-host") for t, a in dom.tags if t == "tr"} - {None}
    assert rows == {"mia", "exl3", "aiden", "dgx1", "dgx2"}
    text = " ".join(" ".join(dom.text).split())
    for said in ("ready", "down", "needs_human", "off / unreachable", "NAS on dgx5 (51 files)",
                 "98 %", "72 %", "20260927T053009000Z ✓ good", SCRIPT, "wrong_answer"):  # fmt: skip
        assert said in text, said
    assert not [t for t, _ in dom.tags if t in ("script", "img")]


def _shoot(tmp_path: Path, snap: FleetSnapshot) -> Path:
    page, shot = tmp_path / "fleet.html", tmp_path / "fleet.png"
    page.write_text(render(snap, 15))
    done = run_chromium(tmp_path, "--window-size=1300,900", f"--screenshot={shot}", page.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    return shot


def _colours(png: Path, wanted: dict[str, tuple[int, int, int]]) -> dict[str, int]:
    from PIL import Image

    image = Image.open(png).convert("RGB")
    counts = {k: 0 for k in wanted}
    by_rgb = {v: k for k, v in wanted.items()}
    raw = image.tobytes()
    for i in range(0, len(raw), 3):
        rgb = (raw[i], raw[i + 1], raw[i + 2])
        if rgb in by_rgb:
            counts[by_rgb[rgb]] += 1
    return counts


@needs_chromium
def test_the_screenshot_shows_a_green_ready_and_a_red_down(tmp_path):
    """Only the snapshot's states colour the page: a fleet of ready lanes shows no red at all."""
    colours = {"ok": (0x1A, 0x7F, 0x37), "bad": (0xCF, 0x22, 0x2E)}
    seen = _colours(_shoot(tmp_path, hostile_snapshot()), colours)
    assert seen["ok"] > 200 and seen["bad"] > 200, seen
    fine = HostView("dgx3", True, None, ("mia",), 200 * GIB, 512 << 20, 100 * GIB, 120 * GIB, 900 * GIB,
                    3700 * GIB)  # fmt: skip
    calm = FleetSnapshot(3.0, 0.1, 1, None, hostile_snapshot().lanes[:1], (fine,), None)
    seen = _colours(_shoot(tmp_path, calm), colours)
    assert seen["ok"] > 200 and seen["bad"] == 0, seen
