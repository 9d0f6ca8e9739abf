"""`sparkfleet smoke`, `bench`, `report list|compare` as a user runs them: a real process each time."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from bench_fleet import write_fleet_root

pytestmark = pytest.mark.slow

# Fast enough for a quick run, slow enough that each token reaches the client as its own chunk: at
# 3000 tok/s a loaded CI machine coalesced tg32's 32 chunks and the "good" run failed its decode probe.
DECODE_TPS = "600"
QUICK = ["--quick", "--depths", "0", "--concurrency", "1,2", "--requests", "2"]


def sparkfleet(*args: str, root: Path | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "sparkfleet"] + (["--root", str(root)] if root else []) + list(args)
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=cwd)


def test_smoke_url_passes_and_json(fake_lane):
    lane = fake_lane()
    done = sparkfleet("smoke", "--url", lane.url)
    assert done.returncode == 0, done.stderr
    assert "11303" in done.stdout and "smoke passed: 2/2" in done.stdout
    doc = json.loads(sparkfleet("smoke", "--url", lane.url, "--json").stdout)
    assert doc["ok"] is True and [c["answer"] for c in doc["cases"]] == ["11303", "42"]


def test_smoke_lane_uses_recipe_cases_and_fails_on_a_wrong_answer(fake_lane, tmp_path):
    lane = fake_lane()
    smoke = (
        '[smoke]\n[[smoke.cases]]\nprompt = "What is 6*7?"\nexpect = "42"\n'
        '[[smoke.cases]]\nprompt = "What is 2+2?"\nexpect = "5"\n'
    )
    name = write_fleet_root(tmp_path, lane.port, smoke=smoke)
    done = sparkfleet("smoke", name, "--json", root=tmp_path)
    assert done.returncode == 1
    doc = json.loads(done.stdout)
    assert [c["passed"] for c in doc["cases"]] == [True, False]
    assert doc["url"] == f"http://127.0.0.1:{lane.port}/v1"


def test_smoke_checks_finish_reason(fake_lane, tmp_path):
    lane = fake_lane()
    smoke = '[smoke]\n[[smoke.cases]]\nprompt = "count with me"\nexpect = "alpha"\nmax_tokens = 200\n'
    name = write_fleet_root(tmp_path, lane.port, smoke=smoke)
    doc = json.loads(sparkfleet("smoke", name, "--json", root=tmp_path).stdout)
    case = doc["cases"][0]
    # the word stream may contain the word, but it ends by length, not stop: a cut-off answer fails
    assert case["finish_reason"] == "length" and not case["passed"]


@pytest.mark.serial  # measures rates/timing: make test runs it alone (it failed under parallel load)
def test_bench_lane_writes_a_full_report_then_compare_against_baseline(fake_lane, tmp_path):
    lane = fake_lane(
        "--decode-tps", "300", "--prefill-tps", "50000", "--tokens-per-chunk", "3", "--usage", "continuous"
    )
    name = write_fleet_root(tmp_path, lane.port)
    done = sparkfleet("bench", name, *QUICK, "--tag", "first", "--json", root=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    report = Path(result["report"]["json"])
    assert report.parent == tmp_path / "recipes" / name / "reports"
    assert report.name.endswith("_first.json") and Path(result["report"]["png"]).stat().st_size > 1000
    doc = json.loads(report.read_text())
    assert doc["hosts"] == ["head", "worker"] and doc["lane"] == name
    assert set(doc["pins"]) == {"weights", "image"} and doc["pins"]["weights"]["value"] == "a" * 40
    recipe = (tmp_path / "recipes" / name / "recipe.toml").read_bytes()
    assert doc["recipe_sha256"] == hashlib.sha256(recipe).hexdigest()
    assert abs(doc["decode_probe"]["metrics"]["decode_tps"] - 300) / 300 < 0.1  # see test_bench_accuracy
    assert doc["spec_accept"]["source"] == "sglang gauge, sampled through this run"
    assert 2.5 < doc["spec_accept"]["value"] <= 3.0  # steps of 3; a request's last step may be shorter
    assert doc["token_sources"] == ["continuous_usage"]
    assert [lv["concurrency"] for lv in doc["sweep"]] == [1, 2]

    listed = sparkfleet("report", "list", name, "--json", root=tmp_path)
    assert [r["name"] for r in json.loads(listed.stdout)["reports"]] == [report.stem]

    # declare the first report the baseline, then a slower lane must regress against it
    recipe_path = tmp_path / "recipes" / name / "recipe.toml"
    bench = f'[bench]\nbaseline = "{report.stem}"\n[bench.thresholds]\ndecode_tps_drop_pct = 5\n'
    recipe_path.write_text(recipe_path.read_text() + bench)
    slow = fake_lane(
        "--decode-tps", "150", "--prefill-tps", "50000", "--tokens-per-chunk", "3", "--usage", "continuous"
    )
    recipe_path.write_text(recipe_path.read_text().replace(f"port = {lane.port}", f"port = {slow.port}"))
    second = sparkfleet("bench", name, *QUICK, "--tag", "slower", root=tmp_path)
    assert second.returncode == 1, second.stdout
    assert "REGRESSION" in second.stdout and "decode_tps" in second.stdout
    compared = sparkfleet("report", "compare", "--lane", name, "--json", root=tmp_path)
    assert compared.returncode == 1
    verdict = json.loads(compared.stdout)
    assert not verdict["ok"] and any(r.startswith("decode_tps") for r in verdict["regressions"])
    same = sparkfleet("report", "compare", report.stem, report.stem, "--lane", name, root=tmp_path)
    assert same.returncode == 0 and "no regression" in same.stdout


def test_bench_url_mode_writes_into_out(fake_lane, tmp_path):
    lane = fake_lane("--decode-tps", DECODE_TPS, "--prefill-tps", "50000")
    out = tmp_path / "reports"
    done = sparkfleet("bench", "--url", lane.url, *QUICK, "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    files = sorted(p.suffix for p in out.iterdir())
    assert files == [".json", ".md", ".png"]
    assert "report: " + str(out) in done.stdout


def test_lane_or_url_is_required():
    done = sparkfleet("bench")
    assert done.returncode == 2 and "LANE or give --url" in done.stderr


def test_a_failed_lane_run_stays_in_the_lane_history_but_out_of_git_unless_asked(fake_lane, tmp_path):
    lane = fake_lane("--error-rate", "1")
    root = tmp_path / "fleet"
    name = write_fleet_root(root, lane.port)
    tracked = root / "recipes" / name / "reports"
    work = tmp_path / "cwd"
    work.mkdir()
    done = sparkfleet("bench", name, *QUICK, "--json", root=root, cwd=work)
    assert done.returncode == 1
    written = Path(json.loads(done.stdout)["report"]["json"])
    assert written.parent == tracked / "failed" and written.is_file()  # git-ignored: see .gitignore
    assert not (work / "sparkfleet-reports").exists()
    assert sorted(p.name for p in tracked.iterdir()) == ["failed"]
    listed = sparkfleet("report", "list", name, root=root, cwd=work)
    assert f"{written.stem}  ✕ failed" in listed.stdout  # in the lane's history, marked
    page = sparkfleet("report", "html", name, "--out", str(work / "h.html"), root=root, cwd=work)
    assert page.returncode == 0 and "1 reports (0 ok)" in page.stdout
    asked = sparkfleet("bench", name, *QUICK, "--save-to-lane", "--json", root=root, cwd=work)
    assert asked.returncode == 1
    assert Path(json.loads(asked.stdout)["report"]["json"]).parent == tracked
    assert len([p for p in tracked.iterdir() if p.is_file()]) == 2  # .json + .md (nothing to plot)


def test_failed_lane_reports_are_git_ignored():
    ROOT = Path(__file__).resolve().parents[2]
    import subprocess

    out = subprocess.run(
        ["git", "check-ignore", "-q", "recipes/dsv41-flash-4x-mia/reports/failed/x.json"], cwd=ROOT
    )
    assert out.returncode == 0
    kept = subprocess.run(["git", "check-ignore", "-q", "recipes/x/reports/x.json"], cwd=ROOT)
    assert kept.returncode == 1


def test_compare_finds_names_across_lanes_and_refuses_a_failed_vs_good_pair(fake_lane, tmp_path):
    good = fake_lane("--decode-tps", DECODE_TPS, "--prefill-tps", "50000")
    bad = fake_lane("--error-rate", "1")
    name = write_fleet_root(tmp_path, good.port)
    ok = sparkfleet("bench", name, *QUICK, "--tag", "good", "--json", root=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    recipe = tmp_path / "recipes" / name / "recipe.toml"
    recipe.write_text(recipe.read_text().replace(f"port = {good.port}", f"port = {bad.port}"))
    failed = sparkfleet("bench", name, *QUICK, "--tag", "broken", "--json", root=tmp_path)
    assert failed.returncode == 1
    a, b = (Path(json.loads(r.stdout)["report"]["json"]).stem for r in (ok, failed))

    pair = sparkfleet("report", "compare", a, b, root=tmp_path)  # no --lane: found in the fleet's lanes
    assert pair.returncode == 1, pair.stdout + pair.stderr  # the failed newer run is a regression
    assert "refused: a failed run's figures are not like for like" in pair.stdout
    assert "REGRESSION" not in pair.stdout and "forced" not in pair.stdout
    assert f"✕ {b} failed" in pair.stdout
    backwards = sparkfleet("report", "compare", b, a, root=tmp_path)
    assert backwards.returncode == 5 and "refused" in backwards.stdout
    assert "REGRESSION" not in backwards.stdout
    forced = sparkfleet("report", "compare", a, b, "--force", root=tmp_path)
    assert forced.returncode == 1 and "refused" not in forced.stdout

    missing = sparkfleet("report", "compare", a, "no-such-report", root=tmp_path)
    assert missing.returncode == 2 and "add --lane" in missing.stderr


def test_a_url_run_cannot_be_saved_to_a_lane(fake_lane, tmp_path):
    lane = fake_lane()
    done = sparkfleet("bench", "--url", lane.url, "--save-to-lane", *QUICK, cwd=tmp_path)
    assert done.returncode == 2 and "--save-to-lane" in done.stderr
    assert not (tmp_path / "sparkfleet-reports").exists()


def test_a_quick_run_against_a_full_baseline_is_refused_not_a_regression(fake_lane, tmp_path):
    lane = fake_lane("--decode-tps", DECODE_TPS, "--prefill-tps", "50000")
    name = write_fleet_root(tmp_path, lane.port)
    first = sparkfleet("bench", name, *QUICK, "--tag", "base", "--json", root=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    stem = Path(json.loads(first.stdout)["report"]["json"]).stem
    recipe = tmp_path / "recipes" / name / "recipe.toml"
    recipe.write_text(recipe.read_text() + f'[bench]\nbaseline = "{stem}"\n')
    other = sparkfleet("bench", name, *QUICK, "--prompt-tokens", "487", "--tag", "other", root=tmp_path)
    assert other.returncode == 0, other.stdout + other.stderr  # the bench itself succeeded
    assert "probe.prompt_tokens: 128 → 487" in other.stdout and "refused" in other.stdout
    assert "REGRESSION" not in other.stdout
    compared = sparkfleet("report", "compare", "--lane", name, root=tmp_path)
    assert compared.returncode == 5 and "probe.prompt_tokens" in compared.stdout


def test_bench_url_no_smoke_benches_a_model_that_fails_arithmetic(fake_lane, tmp_path):
    """Issue 18 (2): a model that cannot do sums (a base or draft model) is still benched."""
    lane = fake_lane("--decode-tps", "3000", "--prefill-tps", "50000", "--wrong-answer")
    out = tmp_path / "reports"
    failing = sparkfleet("bench", "--url", lane.url, *QUICK, "--out", str(out), "--json", cwd=tmp_path)
    assert failing.returncode == 1 and "smoke" in " ".join(json.loads(failing.stdout)["failures"])
    done = sparkfleet(
        "bench", "--url", lane.url, *QUICK, "--no-smoke", "--out", str(out), "--json", cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(Path(json.loads(done.stdout)["report"]["json"]).read_text())
    assert doc["smoke"] == [] and doc["settings"]["smoke"] is False and doc["status"] == "ok"


def test_smoke_cut_off_hint_names_what_a_url_run_can_change(fake_lane, tmp_path):
    """Issue 18 (2): with --url there is no recipe to edit; a model that never stops gets no budget advice."""
    thinking = fake_lane("--reasoning-tokens", "40")
    done = sparkfleet("smoke", "--url", thinking.url, "--max-tokens", "5", "--json")
    problems = [c["problem"] for c in json.loads(done.stdout)["cases"]]
    assert done.returncode == 1 and all("cut off after 5 tokens" in p for p in problems), problems
    assert all("still reasoning" in p and "pass --max-tokens" in p for p in problems), problems
    assert not any("recipe" in p for p in problems), problems
    lane = fake_lane()
    smoke = '[smoke]\n[[smoke.cases]]\nprompt = "count with me"\nexpect = "alpha"\nmax_tokens = 50\n'
    name = write_fleet_root(tmp_path, lane.port, smoke=smoke)
    problem = json.loads(sparkfleet("smoke", name, "--json", root=tmp_path).stdout)["cases"][0]["problem"]
    assert "without stopping" in problem and "--no-smoke" in problem, problem
    assert "smoke.max_tokens in the recipe" in problem, problem


def test_headline_ttft_is_repeated_with_a_confidence_interval(fake_lane, tmp_path):
    """Issue 18 (4): the headline ttft_s was one request with no interval."""
    from sparkfleet.bench.report import key_intervals, key_metrics

    lane = fake_lane("--decode-tps", "3000", "--prefill-tps", "20000", "--overhead-ms", "5")
    out = tmp_path / "reports"
    done = sparkfleet("bench", "--url", lane.url, *QUICK, "--out", str(out), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(Path(json.loads(done.stdout)["report"]["json"]).read_text())
    ttft = doc["ttft"]
    assert len(ttft["samples"]) >= 3 and ttft["ci95"] is not None and ttft["prompt_tokens"] > 0
    assert key_metrics(doc)["ttft_s"] == ttft["mean"] and key_intervals(doc)["ttft_s"] == ttft["ci95"]
    assert all(0.005 <= s < 0.5 for s in ttft["samples"]), ttft  # 5 ms overhead + prefill, never less


def test_prompt_sizes_use_the_engines_tokenize_or_say_words(fake_lane, tmp_path):
    """Issue 18 (5): without --tokenizer, prompts were words labelled tokens (128 "tokens" = 318)."""
    for flags, sizing in (((), "tokens (the engine's /tokenize)"), (("--no-tokenize",), "words")):
        lane = fake_lane("--decode-tps", "3000", "--prefill-tps", "50000", *flags)
        out = tmp_path / sizing.split()[0]
        done = sparkfleet("bench", "--url", lane.url, *QUICK, "--out", str(out), "--json", cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        paths = json.loads(done.stdout)["report"]
        doc = json.loads(Path(paths["json"]).read_text())
        assert doc["prompt_sizing"].startswith(sizing), doc["prompt_sizing"]
        unit = "word" if sizing == "words" else "token"
        assert f"128-{unit} prompt" in Path(paths["markdown"]).read_text()
    assert doc["decode_probe"]["metrics"]["prompt_tokens"] >= 128  # words: each one token or more
