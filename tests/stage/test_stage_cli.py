"""The `stage` and `verify` commands, in inventory mode on the demo fleet and in direct mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparkfleet.cli import main
from sparkfleet.demo.fleet import DEMO_LANE, write_demo_fleet
from sparkfleet.demo.hubfixture import WEIGHTS_REPO
from sparkfleet.facts.hubcache import repo_folder


@pytest.fixture
def demo(tmp_path):
    return write_demo_fleet(tmp_path, shard_bytes=256 * 1024)


def run(*args: str):
    result = CliRunner().invoke(main, list(args))
    return result


def test_dry_run_prints_plan_and_writes_nothing(demo):
    result = run("--root", str(demo.root), "stage", "dgx1", "--dry-run", "--json")
    assert result.exit_code == 0, result.output
    plans = json.loads(result.output)["plans"]
    weights = next(p for p in plans if p["repo"] == WEIGHTS_REPO)
    assert weights["excluded_entries"] == 3 and weights["excluded_bytes"] == 3 * 64 * 1024
    assert weights["links"] > weights["entries"]  # chains have more than one hop
    assert weights["bytes_to_copy"] == weights["bytes_total"] > 0
    assert not demo.local_hub("dgx1").exists()
    text = run("--root", str(demo.root), "stage", "dgx1", "--dry-run")
    assert "excluded 3" in text.output and "to copy" in text.output


def test_stage_then_verify_json_contract(demo):
    staged = run("--root", str(demo.root), "stage", "dgx2", "--lane", DEMO_LANE, "--json", "--jobs", "2")
    assert staged.exit_code == 0, staged.output
    record = json.loads(staged.output)
    assert record["ok"] and record["copied_bytes"] > 0 and record["excluded_bytes"] > 0
    verified = run("--root", str(demo.root), "verify", "dgx2", "--json")
    assert verified.exit_code == 0
    totals = json.loads(verified.output)
    assert {"links_ok", "dangling", "mismatches", "missing"} <= set(totals)
    assert (totals["dangling"], totals["mismatches"], totals["missing"]) == (0, 0, 0)
    assert totals["links_ok"] == 12
    line = run("--root", str(demo.root), "verify", "dgx2")
    assert "links ok: 12, dangling: 0, mismatches: 0, missing: 0" in line.output


def test_verify_exit_code_on_damage(demo):
    assert run("--root", str(demo.root), "stage", "dgx1").exit_code == 0
    commit = demo.fixture.weights.commits["main"]
    shard = demo.local_hub("dgx1") / repo_folder(WEIGHTS_REPO) / "snapshots" / commit / "config.json"
    Path(os.path.realpath(shard)).write_bytes(b"{}")
    result = run("--root", str(demo.root), "verify", "dgx1")
    assert result.exit_code == 1
    assert "mismatches: 1" in result.output


def test_direct_mode(demo, tmp_path):
    dest = tmp_path / "direct"
    args = ["stage", "--source", str(demo.nas_hub), "--dest", str(dest), "--repo", f"{WEIGHTS_REPO}@main",
            "--exclude", "page15/*", "--full"]  # fmt: skip
    assert run(*args).exit_code == 0
    verify = run("verify", "--source", str(demo.nas_hub), "--dest", str(dest), "--repo", WEIGHTS_REPO,
                 "--exclude", "page15/*", "--json")  # fmt: skip
    assert json.loads(verify.output)["ok"] is True


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["stage"], "name a HOST"),
        (["stage", "dgx1", "--source", "/x"], "not both"),
        (["stage", "--source", "/x", "--dest", "/y"], "at least one --repo"),
        (["stage", "dgx9"], "unknown host 'dgx9'"),
        (["stage", "dgx1", "--lane", "nope"], "unknown lane 'nope'"),
        (["stage", "--source", "/nonexistent", "--dest", "/tmp/x", "--repo", "a/b"], "hub cache not found"),
    ],
)
def test_usage_errors_are_clear(demo, args, message):
    result = run("--root", str(demo.root), *args)
    assert result.exit_code == 2 and message in result.output, result.output
    assert "Traceback" not in result.output


@pytest.mark.slow
def test_demo_command_runs_end_to_end(tmp_path):
    env = {**os.environ, "TERM": "dumb"}
    proc = subprocess.run(
        [sys.executable, "-m", "sparkfleet", "demo", "--workdir", str(tmp_path / "demo"), "--shard-mib", "1"],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "links ok: 9, dangling: 0, mismatches: 0" in proc.stdout
    assert "copied 0 (0 B)" in proc.stdout  # the rerun
    assert "demo ok" in proc.stdout


def test_a_host_running_another_version_refuses(demo):
    result = run("--root", str(demo.root), "stage", "dgx1", "--here", "--require-version", "0.0.0-other")
    assert result.exit_code == 2 and "the coordinator runs 0.0.0-other" in result.output
    assert not demo.local_hub("dgx1").exists()
    events = run("--root", str(demo.root), "stage", "dgx1", "--here", "--events", "--require-version", "9")
    event = json.loads(events.output.strip().splitlines()[-1])
    assert event["event"] == "error" and "coordinator runs 9" in event["message"]


def test_remote_argv_is_an_argv_with_the_version_pinned(tmp_path):
    from sparkfleet import __version__
    from sparkfleet.stage.remote import StageOptions, stage_argv

    options = StageOptions(lane="l; rm -rf /", exclude=("page15/*",), ssh_config=tmp_path / "cfg")
    argv = stage_argv(["sparkfleet"], tmp_path, "dgx2", options, share=(1, 4))
    assert argv[:6] == ["sparkfleet", "--root", str(tmp_path), "stage", "dgx2", "--here"]
    assert argv[argv.index("--lane") + 1] == "l; rm -rf /"  # one argument, quoted later by SshHost
    assert argv[argv.index("--require-version") + 1] == __version__
    assert argv[argv.index("--share") + 1] == "1/4" and "page15/*" in argv
