"""modules/view.nix evaluated with nixpkgs' lib: the sparkfleet-view unit runs what `view serve`
takes, and the Prometheus it wires reads the very target files and rules the CLI writes, in a
prometheus.yml that passes the promtool check NixOS's build runs on it."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
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
from sparkfleet.fleet import hostfacts, inventory
from sparkfleet.view.service import parse_listen
from sparkfleet.view.targets import rules_path, scrape_config

pytestmark = [pytest.mark.nix, requires_nix, requires_nixpkgs_lib]
EVAL = REPO / "tests" / "nix" / "stubs" / "eval-host.nix"
TARGETS = Path("/var/lib/sparkfleet-view/targets")
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool missing (Debian package prometheus)")
# dgx1 with the sparkfleet modules alone (no host folder): what `extra` enables is all it runs
HOST = '{ sparkfleet.host = "dgx1"; users.allowNoPasswordLogin = true; }'


@pytest.fixture
def fleet_root(tmp_path: Path) -> Path:
    root = tmp_path / "fleet"
    shutil.copytree(REPO / "hosts", root / "hosts", ignore=shutil.ignore_patterns("dgx*"))
    shutil.copytree(REPO / "recipes", root / "recipes", ignore=shutil.ignore_patterns("reports"))
    return root


def evaluate(root: Path, extra: str) -> dict:
    args = f"nixpkgsLib = {nix_str(nixpkgs_lib())}; fleetRoot = {nix_str(root)}; "
    args += f'host = "dgx1"; hostModule = {HOST}; extra = {extra};'
    return nix_eval(f"import {EVAL} {{ {args} }}", timeout=120)


def build_check(prometheus: dict, folder: Path) -> subprocess.CompletedProcess[str] | None:
    """What NixOS's prometheus module runs while building the host: `promtool check rules` on each
    rule file, then `promtool check config` (`--syntax-only` when checkConfig says so) on the
    prometheus.yml it writes from the options. The first failing run, else None (checkConfig =
    false checks nothing)."""
    check = prometheus["checkConfig"]
    assert check in (True, False, "syntax-only")
    yml = folder / "prometheus.yml"
    yml.write_text(json.dumps(prometheus["yml"], indent=1))  # JSON is YAML, as the module's yaml.generate
    syntax_only = ["--syntax-only"] if check == "syntax-only" else []
    runs = [["check", "rules", rules] for rules in prometheus["yml"]["rule_files"]]
    runs.append(["check", "config", *syntax_only, str(yml)])
    for argv in runs if check else []:
        proc = subprocess.run([PROMTOOL, *argv], capture_output=True, text=True, timeout=60, check=False)
        if proc.returncode != 0:
            return proc
    return None


@needs_promtool
def test_the_unit_and_prometheus_match_what_the_cli_writes(fleet_root, tmp_path):
    on = "{ sparkfleet.view = { enable = true; prometheus.enable = true; interval = 5; }; }"
    cfg = evaluate(fleet_root, on)
    assert cfg["failedAssertions"] == []
    unit = cfg["services"]["sparkfleet-view"]
    argv = shlex.split(unit["serviceConfig"]["ExecStart"])
    assert argv == ["/run/current-system/sw/bin/sparkfleet", "view", "serve", "--listen", "127.0.0.1:9841",
                    "--interval", "5", "--node-timeout", "10", "--targets-dir", str(TARGETS)]  # fmt: skip
    parse_listen(argv[4])  # what the module lets through, the CLI takes
    assert unit["serviceConfig"]["User"] == hostfacts.facts(inventory.load(fleet_root), "dgx1").sshUser
    assert unit["serviceConfig"]["StateDirectory"] == "sparkfleet-view"
    assert unit["wantedBy"] == ["multi-user.target"]
    assert unit["environment"]["SPARKFLEET_STATE_DIR"] == "/var/lib/sparkfleet-view"
    assert cfg["systemPackages"] == ["sparkfleet-0.1.0"]  # the `sparkfleet` the unit runs
    prom = cfg["prometheus"]
    assert prom["enable"] is True
    # the prometheus.yml NixOS writes is the one `sparkfleet view targets` writes, rules included
    assert prom["yml"] == scrape_config(TARGETS, rules_path(), 5.0)
    failed = build_check(prom, tmp_path)
    assert failed is None, failed.stdout + failed.stderr


@needs_promtool
def test_a_key_beyond_loopback_reaches_prometheus_and_the_build_still_checks(fleet_root, tmp_path):
    """The key file lives on the host, never in the store: the build's promtool cannot read it,
    so a full `check config` would fail the build; the module asks for --syntax-only then."""
    key = "/run/keys/sparkfleet-view.key"
    prometheus = f'prometheus = {{ enable = true; credentialsFile = "{key}"; }};'
    on = f'{{ sparkfleet.view = {{ enable = true; listen = "0.0.0.0:9841"; {prometheus} }}; }}'
    prom = evaluate(fleet_root, on)["prometheus"]
    assert prom["yml"] == scrape_config(TARGETS, rules_path(), 15.0, credentials_file=Path(key))
    assert prom["checkConfig"] == "syntax-only"
    failed = build_check(prom, tmp_path)
    assert failed is None, failed.stdout + failed.stderr
    # the full check is what would have failed the build: it stats the key file
    full = build_check({**prom, "checkConfig": True}, tmp_path)
    assert full is not None and key in full.stdout + full.stderr


def test_off_by_default_and_a_bad_listen_fails_evaluation(fleet_root):
    cfg = evaluate(fleet_root, "{ }")
    assert "sparkfleet-view" not in cfg["services"] and cfg["prometheus"]["enable"] is False
    assert cfg["systemPackages"] == []
    with pytest.raises(NixEvalError, match="listen"):
        evaluate(fleet_root, '{ sparkfleet.view = { enable = true; listen = "0.0.0.0 9841"; }; }')
