"""`stage --dry-run` runs the space preflight too: it exits 3 exactly where the real run would."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from sparkfleet.cli import main
from sparkfleet.demo.fleet import write_demo_fleet
from sparkfleet.demo.hubfixture import WEIGHTS_REPO, build_nas_hub
from sparkfleet.errors import ExitCode


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_dry_run_reports_space_and_exits_3_when_the_real_run_would(tmp_path):
    demo = write_demo_fleet(tmp_path, shard_bytes=256 * 1024)
    ok = run("--root", str(demo.root), "stage", "dgx1", "--dry-run")
    assert ok.exit_code == ExitCode.OK, ok.output
    assert "space on " in ok.stdout and ": ok" in ok.stdout

    short = run("--root", str(demo.root), "stage", "dgx1", "--dry-run", "--reserve-gib", "1000000")
    assert short.exit_code == ExitCode.SPACE
    assert "NOT ENOUGH" in short.stdout and "to copy" in short.stdout  # the plan is still shown
    doc = json.loads(
        run(
            "--root", str(demo.root), "stage", "dgx1", "--dry-run", "--reserve-gib", "1000000", "--json"
        ).stdout
    )
    assert (
        doc["space"]["ok"] is False
        and doc["space"]["needed"] > 0
        and "not enough space" in doc["space"]["error"]
    )
    real = run("--root", str(demo.root), "stage", "dgx1", "--reserve-gib", "1000000")
    assert real.exit_code == ExitCode.SPACE  # the control: the real run refuses the same way
    assert not demo.local_hub("dgx1").joinpath("models--" + WEIGHTS_REPO.replace("/", "--")).exists()


@pytest.mark.fuse
def test_dry_run_on_a_full_tmpfs_matches_the_real_run(tmp_path, tmpfs):
    nas = build_nas_hub(tmp_path / "nas", shard_bytes=2 * 1024 * 1024)
    dest = tmpfs(4 * 1024 * 1024) / "hub"
    args = ["stage", "--source", str(nas.root), "--dest", str(dest), "--repo", WEIGHTS_REPO]
    dry = run(*args, "--dry-run")
    real = run(*args)
    assert dry.exit_code == real.exit_code == ExitCode.SPACE, (dry.output, real.output)
    assert "NOT ENOUGH" in dry.stdout
    fits = [*args, "--exclude", "page15/*", "--exclude", "model-0000[234]-*"]
    assert run(*fits, "--dry-run").exit_code == ExitCode.OK
