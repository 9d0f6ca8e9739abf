"""The CI workflow does what issue 5 asks of it where the network is."""

from __future__ import annotations

import pytest

from .conftest import REPO

yaml = pytest.importorskip("yaml", reason="PyYAML not installed")


def test_ci_workflow_runs_flake_check_builds_tooling_evaluates_hosts_and_make_test() -> None:
    doc = yaml.safe_load((REPO / ".github" / "workflows" / "ci.yml").read_text())
    runs = "\n".join(
        step.get("run", "") for job in doc["jobs"].values() for step in job["steps"] if isinstance(step, dict)
    )
    assert "nix flake check" in runs
    assert "nix build --print-build-logs .#sparkfleet" in runs
    assert ".#checks.${{ matrix.system }}.eval-$host" in runs
    assert ".ci/run" in runs  # which is `make test`
    assert "nix flake metadata --no-update-lock-file" in runs
    systems = {inc["system"] for inc in doc["jobs"]["flake"]["strategy"]["matrix"]["include"]}
    assert systems == {"x86_64-linux", "aarch64-linux"}
    assert "NIXPKGS_LIB" in runs
