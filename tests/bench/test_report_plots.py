"""The report PNG, read back as matplotlib objects: what is drawn, not only that a file exists."""

from __future__ import annotations

import statistics

import pytest

from sparkfleet.bench.report.plots import build_figure, render_png

SAMPLES = {1: [0.050, 0.052, 0.055, 0.051], 4: [0.120, 0.180, 0.150, 0.210, 0.160, 0.140, 0.170, 0.190]}


def _doc() -> dict:
    return {
        "lane": "lane",
        "tag": "t",
        "created_utc": "2026-09-27T05:30:09Z",
        "sweep": [
            {
                "concurrency": c,
                "aggregate_tps": 40.0 * c * 0.9,
                "per_request_tps": {"p50": 40.0 * 0.9},
                "ttft_samples_s": samples,
            }
            for c, samples in SAMPLES.items()
        ]
        + [{"concurrency": 8, "aggregate_tps": None, "per_request_tps": None, "ttft_samples_s": []}],
        "table": [
            {"test": "pp512", "depth": 0, "tps_mean": 3900.0, "tps_std": 40.0, "tps_ci95": 99.4},
            {"test": "pp2048", "depth": 0, "tps_mean": 3800.0, "tps_std": 30.0},
            {"test": "tg128", "depth": 0, "tps_mean": {"mean": 38.5, "ci95": 0.7, "n": 3}},
            {"test": "pp512", "depth": 4096, "tps_mean": None, "error": "HTTP 500"},
        ],
    }


@pytest.fixture
def fig():
    figure = build_figure(_doc())
    yield figure
    from matplotlib import pyplot as plt

    plt.close(figure)


def _axes(fig, title_start: str):
    (ax,) = [a for a in fig.axes if a.get_title().startswith(title_start)]
    return ax


def test_ttft_is_drawn_per_concurrency_level_not_pooled(fig):
    ax = _axes(fig, "TTFT per concurrency")
    medians = {a.get_gid(): a for a in ax.lines if (a.get_gid() or "").startswith("ttft-median-c")}
    assert set(medians) == {"ttft-median-c1", "ttft-median-c4"}  # the failed level c=8 has no box
    for c, samples in SAMPLES.items():
        y = medians[f"ttft-median-c{c}"].get_ydata()
        assert y[0] == pytest.approx(statistics.median(samples) * 1000)
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == ["1", "4"] and "concurrency" in ax.get_xlabel()


def test_every_axis_starts_at_zero_and_counts_have_integer_ticks(fig):
    for ax in fig.axes:
        assert ax.get_ylim()[0] == 0, ax.get_title()
    tps = _axes(fig, "tok/s vs concurrency")
    ticks = list(tps.xaxis.get_majorticklocs()) + list(tps.xaxis.get_minorticklocs())
    assert ticks and all(float(t).is_integer() for t in ticks)
    assert [t.get_text() for t in tps.get_xticklabels()] == ["1", "4"]
    agg = [ln for ln in tps.lines if ln.get_label() == "aggregate"][0]
    assert list(agg.get_xdata()) == [1, 4] and list(agg.get_ydata()) == [36.0, 144.0]


def _bars(ax) -> dict:
    return {b.get_gid(): b.get_height() for b in ax.patches if (b.get_gid() or "").startswith("bar-")}


def _spans(ax) -> list:
    (errs,) = [c for c in ax.containers if c.__class__.__name__ == "ErrorbarContainer"]
    return [round(abs(s[1][1] - s[0][1]) / 2, 3) for s in errs.lines[2][0].get_segments()]


def test_pp_and_tg_panels_show_each_measured_row_with_its_spread(fig):
    pp, tg = _axes(fig, "pp (prefill)"), _axes(fig, "tg (decode)")
    assert _bars(pp) == {"bar-pp512@d0": 3900.0, "bar-pp2048@d0": 3800.0} and _bars(tg) == {
        "bar-tg128@d0": 38.5
    }
    assert [t.get_text() for t in pp.get_xticklabels()] == ["pp512@d0", "pp2048@d0", "pp512@d4096"]
    assert [t.get_text() for t in pp.texts] == ["failed"]  # the failed row says so where its bar would be
    # the 95 % CI where recorded (flat tps_ci95 or a {mean, ci95} figure), else the stdev
    assert _spans(pp) == [99.4, 30.0] and _spans(tg) == [0.7]
    assert tg.get_ylim()[1] < 50  # its own axis: a 38 tok/s bar is not a sliver next to 3900


def test_png_is_written_and_nothing_to_draw_is_none():
    png = render_png(_doc())
    assert png is not None and png.startswith(b"\x89PNG")
    assert render_png({"sweep": [], "table": []}) is None
    only_table = build_figure({"table": _doc()["table"]})
    assert [a.get_title()[:2] for a in only_table.axes] == ["pp", "tg"]
