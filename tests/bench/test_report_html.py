"""`sparkfleet report html LANE`: the page in a real browser (Debian's chromium, headless).

The page is rendered by chromium; the DOM after rendering (--dump-dom) is checked for what each
chart drew, and a screenshot is checked pixel by pixel: every series' colour is on screen, in the
chart it belongs to (charts stack top to bottom), the baseline's dashed line crosses every chart,
and a series with no data (no roofline yet) leaves no colour at all.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from itertools import pairwise
from pathlib import Path

import pytest
from bench_fleet import write_fleet_root

from sparkfleet.bench.report.html import COLORS, write_page
from support.chromium import needs_chromium, run_chromium

FP = {
    "host": "dgx1",
    "kernel": "6.11.0",
    "driver": "580.95.05",
    "cuda": "13.0",
    "image_id": "sha256:" + "c" * 64,
}


def _report(
    when: str, decode, *, status="ok", quality=90.0, roofline=None, driver="580.95.05", probe=487
) -> dict:
    doc = {
        "schema": "sparkfleet.bench/1",
        "status": status,
        "failures": [] if status == "ok" else ["warmup: HTTP 500"],
        "tag": "bench",
        "created_utc": f"2026-09-{when}Z",
        "lane": "lane-x",
        "settings": {"probe": {"prompt_tokens": probe, "max_tokens": 400}, "sweep": {"levels": [1, 4]}},
        "pins": {"weights": {"value": "a" * 40}},
        "fingerprints": {"dgx1": {**FP, "driver": driver}, "dgx2": {**FP, "host": "dgx2"}},
    }
    if status == "ok":
        doc["decode_probe"] = {"metrics": {"decode_tps": decode, "ttft_s": 0.1}}
        doc["sweep"] = [
            {"concurrency": 1, "ttft_s": {"p50": 0.100, "p90": 0.12, "p99": 0.150}},
            {"concurrency": 4, "ttft_s": {"p50": 0.300, "p90": 0.4, "p99": 0.500}},
        ]
        doc["quality"] = {"status": "ok", "score": quality}
        if roofline is not None:
            doc["roofline"] = {"decode": {"pct_of_bound": roofline}}
    return doc


def _lane_reports(folder: Path, roofline: bool) -> list[str]:
    docs = [
        ("27T05:30:09", _report("27T05:30:09", 35.0)),
        (
            "28T05:30:09",
            _report("28T05:30:09", {"mean": 36.5, "ci95": 0.8, "n": 3}, quality=88.0, driver="580.105.08"),
        ),
        ("29T05:30:09", _report("29T05:30:09", None, status="failed")),
        ("30T05:30:09", _report("30T05:30:09", 37.0, roofline=71.5 if roofline else None, probe=128)),
    ]
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for when, doc in docs:
        name = f"2026-09-{when[:2]}_{when[3:].replace(':', '')}_bench"
        (folder / f"{name}.json").write_text(json.dumps(doc))
        (folder / f"{name}.md").write_text(f"# {name}\n")
        names.append(name)
    return names


class _Dom(HTMLParser):
    """Elements as (tag, attrs, path of enclosing ids) — enough to query what was drawn."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str], tuple[str, ...]]] = []
        self.stack: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = {k: v or "" for k, v in attrs}
        within = tuple(i for _, i in self.stack if i) + ((a["data-series"],) if "data-series" in a else ())
        self.elements.append((tag, a, within))
        if tag not in ("line", "circle", "polyline", "rect", "br", "meta", "path"):
            self.stack.append((tag, a.get("id") or a.get("data-series") or ""))

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        a = {k: v or "" for k, v in attrs}
        self.elements.append((tag, a, tuple(i for _, i in self.stack if i)))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                break

    def find(self, tag: str, *within: str, cls: str | None = None) -> list[dict[str, str]]:
        return [
            a
            for t, a, w in self.elements
            if t == tag and all(x in w for x in within) and (cls is None or cls in a.get("class", "").split())
        ]


def _dom(text: str) -> _Dom:
    dom = _Dom()
    dom.feed(text)
    return dom


def _page(tmp_path: Path, roofline: bool) -> tuple[Path, list[str]]:
    folder = tmp_path / "recipes" / "lane-x" / "reports"
    names = _lane_reports(folder, roofline)
    page = write_page("lane-x", folder, names[0], tmp_path / "site" / "lane-x.html").path
    return page, names


def test_the_page_is_self_contained_and_links_every_report(tmp_path):
    page, names = _page(tmp_path, roofline=True)
    text = page.read_text()
    dom = _dom(text)
    for tag in ("script", "link", "img", "iframe", "object", "embed"):
        assert dom.find(tag) == [], tag
    assert "url(" not in text and "@import" not in text and " src=" not in text
    hrefs = [a["href"] for a in dom.find("a")]
    assert len(hrefs) == 8  # json + md for each of the 4 reports
    for href in hrefs:
        assert not href.startswith(("http:", "https:", "/")) and (page.parent / href).resolve().is_file()
    rows = dom.find("tr", "runs")
    assert [r.get("data-run") for r in rows if r.get("data-run")] == names[::-1]  # newest first
    assert [r["data-run"] for r in rows if "baseline" in r.get("class", "")] == [names[0]]
    assert "≠ previous run" in text  # the driver moved between the first two runs
    versus = {r["data-run"]: r for r in rows if r.get("data-run")}
    assert "≠ dgx1.driver" in text and "≠ probe.prompt_tokens" in text  # each unlike the baseline, and why
    unlike = {c["data-run"] for c in dom.find("circle", "chart-decode", cls="unlike")}
    assert unlike == {names[1], names[3]} and names[0] in versus  # drawn hollow, the baseline is not


@needs_chromium
def test_chromium_renders_every_chart(tmp_path):
    page, names = _page(tmp_path, roofline=True)
    done = run_chromium(tmp_path, "--dump-dom", page.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    dom = _dom(done.stdout)
    decode = dom.find("circle", "chart-decode", "decode", cls="pt")
    assert [float(c["data-value"]) for c in decode] == [35.0, 36.5, 37.0]  # the failed run has no point
    assert [c["data-run"] for c in decode] == [names[0], names[1], names[3]]
    for series in ("ttft_c1_p50", "ttft_c1_p99", "ttft_top_p50", "ttft_top_p99"):
        assert len(dom.find("circle", "chart-ttft", series, cls="pt")) == 3, series
    ttft = [float(c["data-value"]) for c in dom.find("circle", "chart-ttft", "ttft_top_p99", cls="pt")]
    assert ttft == [500.0, 500.0, 500.0]
    assert [float(c["data-value"]) for c in dom.find("circle", "chart-quality", "quality", cls="pt")] == [
        90.0,
        88.0,
        90.0,
    ]
    assert [float(c["data-value"]) for c in dom.find("circle", "chart-roofline", "roofline", cls="pt")] == [
        71.5
    ]
    assert len(dom.find("line", "chart-decode", cls="ci")) == 1  # the ± of the repeated figure
    for chart in ("decode", "ttft", "quality", "roofline"):
        assert dom.find("line", f"chart-{chart}", cls="baseline"), chart
        assert len(dom.find("polyline", f"chart-{chart}")) >= 1 or chart == "roofline"


def _pixels(png: Path) -> dict[str, list[tuple[int, int]]]:
    from PIL import Image

    image = Image.open(png).convert("RGB")
    wanted = {tuple(int(c[i : i + 2], 16) for i in (1, 3, 5)): k for k, c in COLORS.items()}
    found: dict[str, list[tuple[int, int]]] = {k: [] for k in COLORS}
    width, height = image.size
    data = image.load()
    for y in range(height):
        for x in range(width):
            key = wanted.get(data[x, y])
            if key:
                found[key].append((x, y))
    return found


def _median_y(points: list[tuple[int, int]]) -> int:
    return sorted(y for _, y in points)[len(points) // 2]


@needs_chromium
def test_chromium_screenshot_shows_the_charts_drawn(tmp_path):
    page, _ = _page(tmp_path, roofline=True)
    shot = tmp_path / "page.png"
    done = run_chromium(tmp_path, "--window-size=1100,1500", f"--screenshot={shot}", page.as_uri())
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    px = _pixels(shot)
    for series in (
        "decode",
        "ttft_c1_p50",
        "ttft_c1_p99",
        "ttft_top_p50",
        "ttft_top_p99",
        "quality",
        "roofline",
    ):
        assert len(px[series]) > 40, (series, len(px[series]))
    # each line spans the runs left to right, not a lone legend swatch
    for series in ("decode", "ttft_top_p50", "quality"):
        xs = [x for x, _ in px[series]]
        assert max(xs) - min(xs) > 500, series
    # the charts stack in order: decode, TTFT, quality, roofline
    ys = [_median_y(px[s]) for s in ("decode", "ttft_top_p50", "quality", "roofline")]
    assert ys == sorted(ys) and min(b - a for a, b in pairwise(ys)) > 150, ys
    # the failed run's ✕ is drawn, and the baseline's dashed line crosses all four charts
    assert px["failed"]
    column = max({x for x, _ in px["baseline"]}, key=lambda x: sum(1 for c, _ in px["baseline"] if c == x))
    runs = sorted(y for x, y in px["baseline"] if x == column)
    groups = 1 + sum(1 for a, b in pairwise(runs) if b - a > 40)
    assert groups >= 4 and runs[-1] - runs[0] > 900, (groups, runs[:3], runs[-3:])
    if os.environ.get("SPARKFLEET_KEEP_SCREENSHOT"):  # to look at it: a path to copy it to
        shutil.copy(shot, os.environ["SPARKFLEET_KEEP_SCREENSHOT"])


@needs_chromium
def test_no_roofline_data_leaves_no_roofline_colour(tmp_path):
    page, _ = _page(tmp_path, roofline=False)
    shot = tmp_path / "page.png"
    done = run_chromium(tmp_path, "--window-size=1100,1500", f"--screenshot={shot}", page.as_uri())
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    px = _pixels(shot)
    assert px["roofline"] == [] and len(px["decode"]) > 40
    assert "no roofline section in these reports yet" in page.read_text()


def test_cli_writes_the_page_for_a_lane(tmp_path):
    name = write_fleet_root(tmp_path, 1)
    names = _lane_reports(tmp_path / "recipes" / name / "reports", roofline=False)
    recipe = tmp_path / "recipes" / name / "recipe.toml"
    recipe.write_text(recipe.read_text() + f'[bench]\nbaseline = "{names[1]}"\n')
    out = tmp_path / "out" / "page.html"
    argv = [sys.executable, "-m", "sparkfleet", "--root", str(tmp_path), "report", "html", name]
    done = subprocess.run([*argv, "--out", str(out), "--json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["reports"] == 4 and result["ok"] == 3 and result["baseline"] == names[1]
    dom = _dom(out.read_text())
    assert [r["data-run"] for r in dom.find("tr", "runs") if "baseline" in r.get("class", "")] == [names[1]]
    default = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert default.returncode == 0 and (tmp_path / "sparkfleet-reports" / f"{name}.html").is_file()


def test_report_strings_are_escaped_and_odd_shapes_do_not_break_the_page(tmp_path):
    folder = tmp_path / "reports"
    names = _lane_reports(folder, roofline=False)
    doc = json.loads((folder / f"{names[3]}.json").read_text())
    doc["fingerprints"]["dgx1"]["kernel"] = "<script>alert(1)</script>"
    doc["pins"]["weights"]["value"] = '"><img src=x onerror=alert(1)>'
    doc["roofline"] = ["not", "a", "section"]
    doc["sweep"].append({"concurrency": "eight", "ttft_s": 3})
    (folder / f"{names[3]}.json").write_text(json.dumps(doc))
    text = write_page("lane-x", folder, None, tmp_path / "page.html").path.read_text()
    dom = _dom(text)
    assert dom.find("script") == [] and dom.find("img") == []
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert len(dom.find("circle", "chart-decode", cls="pt")) == 3 and "no baseline declared" in text


def test_runs_in_the_same_minute_are_told_apart_on_the_axis(tmp_path):
    folder = tmp_path / "reports"
    folder.mkdir()
    for when in ("27T05:30:09", "27T05:30:41"):
        name = f"2026-09-27_{when[3:].replace(':', '')}_bench"
        (folder / f"{name}.json").write_text(json.dumps(_report(when, 35.0)))
    text = write_page("lane-x", folder, None, tmp_path / "page.html").path.read_text()
    assert ">09-27 05:30:09<" in text and ">09-27 05:30:41<" in text


@pytest.mark.parametrize(
    "bad",
    [float("nan"), float("inf"), float("-inf"), "fast", {"mean": float("nan"), "ci95": 1.0},
     {"mean": 30.0, "ci95": float("inf")}, 1e308, True],
)  # fmt: skip
def test_a_non_finite_decode_figure_shows_a_dash_and_the_page_still_renders(tmp_path, bad):
    """Issue 20 item 13: one report with decode_tps NaN/Infinity killed the whole page."""
    folder = tmp_path / "recipes" / "lane-x" / "reports"
    folder.mkdir(parents=True)
    good, odd = "2026-09-27_053009_bench", "2026-09-28_053009_bench"
    (folder / f"{good}.json").write_text(json.dumps(_report("27T05:30:09", 35.0)))
    # json.dumps writes NaN/Infinity as the bare tokens Python's json.loads accepts back
    (folder / f"{odd}.json").write_text(json.dumps(_report("28T05:30:09", bad)))
    page = write_page("lane-x", folder, None, tmp_path / "site" / "lane-x.html")
    text = page.path.read_text()
    assert page.reports == 2
    row = text[text.index(f'" data-run="{odd}"><td') :]  # the table row, not a chart point
    row = row[: row.index("</tr>")]
    cells = row.split("<td")
    decode_cell = cells[4]  # when, report, status, decode
    if bad == 1e308:
        assert "—" not in decode_cell  # a finite figure is still a figure, however absurd
    elif isinstance(bad, dict) and bad["mean"] == 30.0:
        assert decode_cell == ">30</td>"  # the mean stays; the infinite ± is dropped
    else:
        assert ">—<" in decode_cell, decode_cell
    assert "nan" not in text.lower().replace("nanos", "") and "inf<" not in text.lower()
    assert f'data-run="{good}" data-value="35" cx=' in text  # the good run is still plotted


def test_runs_with_other_settings_are_a_new_series_with_the_break_marked(tmp_path):
    """The page joined 128- and 200-token probe runs into one decode line without marking the break."""
    from sparkfleet.bench.report.history import Figure, HistoryPoint
    from sparkfleet.bench.report.html import Chart, Series, svg_chart

    def pt(i: int, tokens: int) -> HistoryPoint:
        settings = {"probe": {"prompt_tokens": tokens}}
        return HistoryPoint(f"r{i}", f"2026-09-27T05:3{i}:00Z", "t", "ok", tmp_path / f"r{i}.json", False,
                            decode_tps=Figure(30.0 + i), settings=settings)  # fmt: skip

    points = [pt(0, 128), pt(1, 128), pt(2, 200), pt(3, 200)]
    chart = Chart("decode", "decode", "tok/s", [Series("decode", "d", [p.decode_tps for p in points])], "")
    svg = svg_chart(chart, points)
    assert svg.count("<polyline") == 2  # two series, never one line across the change
    assert svg.count('class="settings-break"') == 1 and "settings changed: probe" in svg
    same = [pt(i, 128) for i in range(4)]
    one = svg_chart(Chart("d", "d", "tok/s", [Series("decode", "d", [p.decode_tps for p in same])], ""), same)
    assert one.count("<polyline") == 1 and "settings-break" not in one


def test_an_interrupted_run_shows_what_it_measured_and_every_mark_is_named(tmp_path):
    """The page showed "—" for an interrupted run's decode where `report list` showed 50.0 tok/s,
    said "no quality run" after six scenarios had run, and drew an orange line no legend named."""
    import re

    from sparkfleet.bench.report import list_reports

    first = _report("27T05:30:09", 35.0, probe=128)
    stopped = _report("28T05:30:09", None, status="interrupted")
    stopped["decode_probe"] = {"metrics": {"decode_tps": 50.0, "ttft_s": 0.07}}
    stopped["quality"] = {"status": "interrupted", "scenarios": 6, "error": "interrupted"}
    last = _report("29T05:30:09", 36.0, probe=487)  # other settings than the first: a new line
    for doc in (first, last):
        doc["quality"] = None
    folder = tmp_path / "reports"
    folder.mkdir()
    for when, doc in (("27T05:30:09", first), ("28T05:30:09", stopped), ("29T05:30:09", last)):
        (folder / f"2026-09-{when[:2]}_{when[3:].replace(':', '')}_bench.json").write_text(json.dumps(doc))
    listed = {r.status: r.decode_tps for r in list_reports(folder)}
    assert listed["interrupted"] == 50.0
    text = write_page("lane-x", folder, None, tmp_path / "page.html").path.read_text()
    dom = _dom(text)
    assert re.search(r"<td><span class=\"bad\"[^>]*>interrupted</span></td><td>50</td>", text)
    stopped_marks = dom.find("circle", "chart-decode", cls="stopped")
    assert [c["data-value"] for c in stopped_marks] == ["50"]  # drawn, hollow, off the line
    assert "no quality run in these reports" not in text
    assert "no quality run finished in these reports (1 started; ended interrupted)" in text
    svgs = "".join(re.findall(r"<svg.*?</svg>", text, flags=re.DOTALL))
    assert COLORS["baseline"] not in svgs  # no baseline declared: nothing drawn in its colour
    legends = " ".join(re.findall(r'<div class="legend">(.*?)</div>', text))
    assert "settings changed" in legends and "✕ run that failed or was interrupted" in legends
    assert "○ what it measured before it stopped" in legends
