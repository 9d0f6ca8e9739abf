"""Reports: names, atomic files, listing, and comparison with thresholds."""

from __future__ import annotations

import json

import pytest

from sparkfleet.base.errors import SparkfleetError
from sparkfleet.bench.report import compare, list_reports, report_stem, resolve, write_report
from sparkfleet.bench.run import BenchRun
from sparkfleet.bench.target import Thresholds

pytestmark = pytest.mark.slow


def _doc(decode: float, ttft: float = 0.1, quality: float | None = 92.0, status: str = "ok") -> dict:
    return {
        "schema": "sparkfleet.bench/1",
        "status": status,
        "failures": [] if status == "ok" else ["x"],
        "decode_probe": {"metrics": {"decode_tps": decode, "ttft_s": ttft}},
        "table": [
            {"test": "pp512", "depth": 0, "tps_mean": 700.0},
            {"test": "tg128", "depth": 0, "tps_mean": decode},
        ],
        "sweep": [{"concurrency": 1, "aggregate_tps": decode}],
        "quality": {"status": "ok", "score": quality} if quality is not None else None,
    }


def test_stem_is_utc_time_and_safe_tag():
    assert report_stem("2026-09-27T05:30:09Z", "exl3 2x/local") == "2026-09-27_053009_exl3-2x-local"


def test_compare_flags_each_kind_of_regression():
    t = Thresholds(decode_tps_drop_pct=5, ttft_rise_pct=25, quality_drop_points=3)
    assert compare(_doc(35.0), _doc(34.0), t).ok  # -2.9 % is within 5 %
    slow = compare(_doc(35.0), _doc(30.0), t)
    assert not slow.ok and {r.split(":")[0] for r in slow.regressions} == {
        "decode_tps",
        "tg128@d0",
        "aggregate_tps@c1",
    }
    assert not compare(_doc(35.0), _doc(35.0, ttft=0.2), t).ok
    assert not compare(_doc(35.0, quality=93), _doc(35.0, quality=89), t).ok
    assert compare(_doc(35.0, quality=93), _doc(35.0, quality=92), t).ok


def test_a_failed_run_is_always_a_regression():
    verdict = compare(
        _doc(35.0), {**_doc(35.0), "status": "failed", "failures": ["decode probe: dropped"]}, Thresholds()
    )
    assert not verdict.ok and "failed" in verdict.regressions[0]
    missing = _doc(35.0)
    missing["decode_probe"]["metrics"]["decode_tps"] = None
    assert any("missing" in r for r in compare(_doc(35.0), missing, Thresholds()).regressions)


def test_write_list_resolve(tmp_path):
    run = BenchRun(tag="t", created_utc="2026-09-27T05:30:09Z", url="http://127.0.0.1:1/v1")
    paths = write_report(run, tmp_path)
    assert paths.json.name == "2026-09-27_053009_t.json" and paths.png is None
    assert json.loads(paths.json.read_text())["schema"] == "sparkfleet.bench/1"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp left behind
    later = BenchRun(tag="u", created_utc="2026-09-28T00:00:00Z", url="http://127.0.0.1:1/v1")
    write_report(later, tmp_path)
    assert [r.name for r in list_reports(tmp_path)] == ["2026-09-27_053009_t", "2026-09-28_000000_u"]
    assert resolve("latest", tmp_path).stem == "2026-09-28_000000_u"
    assert resolve("053009", tmp_path) == paths.json
    with pytest.raises(SparkfleetError):
        resolve("nope", tmp_path)


def test_api_key_never_reaches_a_report(fake_lane, tmp_path, monkeypatch):
    from sparkfleet.bench.run import BenchSettings, run_bench
    from sparkfleet.bench.target import for_url

    monkeypatch.setenv("SPARKFLEET_API_KEY", "sk-very-secret-123")
    lane = fake_lane("--api-key", "sk-very-secret-123", "--decode-tps", "5000", "--prefill-tps", "100000")
    run = run_bench(for_url(lane.url, tmp_path), BenchSettings.quick(), "keyed")
    assert run.status == "ok", run.failures
    paths = write_report(run, tmp_path)
    for path in (paths.json, paths.markdown):
        assert "sk-very-secret-123" not in path.read_text()


def test_two_reports_in_one_second_never_overwrite_each_other(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    precious = tmp_path / "2026-09-27_053009_t.json"
    precious.write_text('{"schema": "sparkfleet.bench/1", "url": "someone else"}\n')
    runs = [
        BenchRun(tag="t", created_utc="2026-09-27T05:30:09Z", url=f"http://127.0.0.1:{i}/v1")
        for i in range(6)
    ]
    with ThreadPoolExecutor(6) as pool:
        written = list(pool.map(lambda r: write_report(r, tmp_path), runs))
    assert "someone else" in precious.read_text()  # never clobbered
    assert len({p.json for p in written}) == 6 and precious not in {p.json for p in written}
    urls = {json.loads(p.json.read_text())["url"] for p in written}
    assert urls == {r.url for r in runs}
    for p in written:  # each view carries its own record's stem
        assert p.markdown.stem == p.json.stem and p.json.stem in p.markdown.read_text()
    names = [r.name for r in list_reports(tmp_path)]
    assert names[0] == "2026-09-27_053009_t" and len(names) == 7
    assert names[1:] == [f"2026-09-27_053009-{n}_t" for n in range(2, 8)]  # ordered by claim
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_stem_accepts_fractional_seconds():
    assert report_stem("2026-09-27T05:30:09.123456Z", "t") == "2026-09-27_053009_t"


def test_an_ambiguous_name_says_so_and_names_the_candidates(tmp_path):
    for url in ("http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1"):
        write_report(BenchRun(tag="t", created_utc="2026-09-27T05:30:09Z", url=url), tmp_path)
    with pytest.raises(SparkfleetError) as err:
        resolve("053009", tmp_path)
    assert "ambiguous" in err.value.message and "2026-09-27_053009-2_t" in err.value.message
    assert resolve("053009-2", tmp_path).stem == "2026-09-27_053009-2_t"
    assert resolve("2026-09-27_053009_t", tmp_path).stem == "2026-09-27_053009_t"


def test_names_stay_unique_on_a_filesystem_without_hard_links(tmp_path, monkeypatch):
    import errno
    import os

    def no_links(src, dst, *a, **k):
        raise OSError(errno.EPERM, "Operation not permitted", str(dst))

    monkeypatch.setattr(os, "link", no_links)
    first = write_report(BenchRun(tag="t", created_utc="2026-09-27T05:30:09Z", url="http://a/v1"), tmp_path)
    second = write_report(BenchRun(tag="t", created_utc="2026-09-27T05:30:09Z", url="http://b/v1"), tmp_path)
    assert first.json.name == "2026-09-27_053009_t.json" and second.json.name == "2026-09-27_053009-2_t.json"
    assert json.loads(first.json.read_text())["url"] == "http://a/v1"
    assert json.loads(second.json.read_text())["url"] == "http://b/v1"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_markdown_shows_confidence_intervals_net_figures_and_unknown_pp(tmp_path):
    from sparkfleet.bench.probes import TableRow

    run = BenchRun(tag="ci", created_utc="2026-11-30T14:00:00Z")
    run.table = [
        TableRow(
            "pp512", 0, 3, 3900.0, 50.0, (3850.0, 3900.0, 3950.0), 0.13, "server_usage",
            tps_ci95=124.2, tps_net_mean=4100.0, tps_net_ci95=130.0, basis="cached_tokens reported",
        ),
        TableRow(
            "pp512", 4096, 3, None, None, (), None, "server_usage",
            unknown="unknown: 35000 tok/s would exceed the engine's cold prefill rate (3950 tok/s at d0)",
        ),
    ]  # fmt: skip
    markdown = write_report(run, tmp_path).markdown.read_text()
    assert "| pp512 | d0 | 3900.0 | 124.2 | 4100.0 ± 130.0 | 3 |" in markdown
    deep = next(line for line in markdown.splitlines() if "| d4096 |" in line)
    assert "unknown: 35000 tok/s would exceed" in deep and "| — | — | — |" in deep
