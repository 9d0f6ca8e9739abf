"""modules/view.nix evaluated with nixpkgs' lib: the sparkfleet-view unit runs what `view serve`
takes, and the Prometheus it wires reads the very target files and rules the CLI writes."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest

from nix.conftest import (
    REPO,
    NixEvalError,
    nix_eval,
    nix_str,
    nixpkgs_lib,
    requires_nix,
    requires_nixpkgs_lib,
)
from sparkfleet import hostfacts, inventory
from sparkfleet.view.service import parse_listen
from sparkfleet.view.targets import rules_path, scrape_config

pytestmark = [pytest.mark.nix, requires_nix, requires_nixpkgs_lib]
EVAL = Path(__file__).parent / "stubs" / "eval-view.nix"
TARGETS = Path("/var/lib/sparkfleet-view/targets")


@pytest.fixture
def fleet_root(tmp_path: Path) -> Path:
    root = tmp_path / "fleet"
    shutil.copytree(REPO / "hosts", root / "hosts", ignore=shutil.ignore_patterns("dgx*"))
    shutil.copytree(REPO / "recipes", root / "recipes", ignore=shutil.ignore_patterns("reports"))
    return root


def evaluate(root: Path, extra: str) -> dict:
    args = f"nixpkgsLib = {nix_str(nixpkgs_lib())}; fleetRoot = {nix_str(root)}; "
    args += f'host = "dgx1"; extra = {extra};'
    return nix_eval(f"import {EVAL} {{ {args} }}", timeout=120)


def test_the_unit_and_prometheus_match_what_the_cli_writes(fleet_root):
    on = "{ sparkfleet.view = { enable = true; prometheus.enable = true; interval = 5; }; }"
    cfg = evaluate(fleet_root, on)
    assert cfg["failedAssertions"] == []
    unit = cfg["unit"]
    argv = shlex.split(unit["serviceConfig"]["ExecStart"])
    assert argv == ["/run/current-system/sw/bin/sparkfleet", "view", "serve", "--listen", "127.0.0.1:9841",
                    "--interval", "5", "--node-timeout", "10", "--targets-dir", str(TARGETS)]  # fmt: skip
    parse_listen(argv[4])  # what the module lets through, the CLI takes
    assert unit["serviceConfig"]["User"] == hostfacts.facts(inventory.load(fleet_root), "dgx1").sshUser
    assert unit["serviceConfig"]["StateDirectory"] == "sparkfleet-view"
    assert unit["wantedBy"] == ["multi-user.target"]
    assert unit["environment"]["SPARKFLEET_STATE_DIR"] == "/var/lib/sparkfleet-view"
    prom = cfg["prometheus"]
    want = scrape_config(TARGETS, rules_path(), 5.0)
    assert prom["enable"] and prom["scrapeConfigs"] == want["scrape_configs"]
    assert prom["globalConfig"] == want["global"]
    assert prom["ruleFiles"] == [str(rules_path())]


def test_off_by_default_and_a_bad_listen_fails_evaluation(fleet_root):
    cfg = evaluate(fleet_root, "{ }")
    assert cfg["unit"] is None and cfg["prometheus"]["enable"] is False
    with pytest.raises(NixEvalError, match="listen"):
        evaluate(fleet_root, '{ sparkfleet.view = { enable = true; listen = "0.0.0.0 9841"; }; }')
