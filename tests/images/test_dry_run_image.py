"""`launch --dry-run` of a Nix-built-image lane before any `image load`.

The operator wants the preview exactly when no image is loaded yet: it used to exit 2 with "the
docker runtime needs an image". Run on the checkout's own inventory (the TP4 lane).
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from sparkfleet.base.errors import ExitCode
from sparkfleet.cli import main
from sparkfleet.images.record import host_span

ROOT = Path(__file__).resolve().parents[2]


def _dry(tmp_path, monkeypatch, *extra, lane="dsv41-flash-4x-mia"):
    monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(tmp_path / "state"))
    return CliRunner().invoke(main, ["--root", str(ROOT), "launch", lane, "--dry-run", *extra])


def test_dry_run_without_a_loaded_image_prints_the_plan(tmp_path, monkeypatch):
    res = _dry(tmp_path, monkeypatch)
    assert res.exit_code == ExitCode.OK, res.output
    assert "image: mia-tp4-image (not loaded on dgx1..dgx4)" in res.stdout
    heads = [ln for ln in res.stdout.splitlines() if ln.startswith("[")]
    assert len(heads) == 4 and heads[-1].startswith("[4] rank 0 (head) on dgx1")
    assert "sglang.launch_server" in res.stdout and "--node-rank 3" in res.stdout
    doc = json.loads(_dry(tmp_path, monkeypatch, "--json").stdout)
    assert doc["image"] == "mia-tp4-image (not loaded on dgx1..dgx4)" and len(doc["ranks"]) == 4


def test_dry_run_after_a_load_names_the_build_and_missing_hosts(tmp_path, monkeypatch):
    rec = tmp_path / "state" / "images" / "dsv41-flash-4x-mia.json"
    rec.parent.mkdir(parents=True)
    built = "sha256:" + "cd" * 32
    rec.write_text(json.dumps({"build": {"image_id": built}, "hosts": {
        "dgx1": {"image_id": built}, "dgx2": {"image_id": built}}}))  # fmt: skip
    res = _dry(tmp_path, monkeypatch)
    assert res.exit_code == ExitCode.OK, res.output
    assert f"mia-tp4-image {built}" in res.stdout and "not loaded on dgx3, dgx4" in res.stdout
    assert f" {built} python3 -m sglang.launch_server" in res.stdout


def test_dry_run_of_a_lane_whose_image_pin_is_a_tag_previews_and_launch_still_refuses(tmp_path, monkeypatch):
    """The Aiden lane's image is pinned by its tag (production-1.2) until `pins resolve`: the preview
    used to exit 2 on it; it shows the plan with the tag marked unresolved. launch refuses it still."""
    lane = "dsv41-flash-4x-aiden"
    res = _dry(tmp_path, monkeypatch, lane=lane)
    assert res.exit_code == ExitCode.OK, res.output
    note = (
        "aidendle94/sparkrun-sglang-dsv41-gb10:production-1.2 (pin aiden-production not resolved to a "
        "digest: `sparkfleet pins resolve` names it; launch refuses until then)"
    )
    assert f"image: {note}" in res.stdout
    heads = [ln for ln in res.stdout.splitlines() if ln.startswith("[")]
    assert len(heads) == 4 and heads[-1].startswith("[4] rank 0 (head) on dgx1")
    assert " '<aidendle94/sparkrun-sglang-dsv41-gb10:production-1.2: not resolved>' " in res.stdout
    assert res.stdout.count("--ep-size 4") == 4 and res.stdout.count("EP_SIZE=4") == 4  # TP4/EP4, each rank
    doc = json.loads(_dry(tmp_path, monkeypatch, "--json", lane=lane).stdout)
    assert doc["image"] == note and len(doc["ranks"]) == 4
    real = CliRunner().invoke(main, ["--root", str(ROOT), "launch", lane])
    assert real.exit_code == ExitCode.USAGE and "image pin aiden-production is not resolved" in real.output


def test_host_span():
    assert host_span(["dgx1", "dgx2", "dgx3", "dgx4"]) == "dgx1..dgx4"
    assert host_span(["dgx1", "dgx3", "dgx4"]) == "dgx1, dgx3, dgx4"
    assert host_span(["a", "b"]) == "a, b"


def test_the_fleet_has_fabric_addresses_so_the_dry_run_knows_the_rendezvous(tmp_path, monkeypatch):
    """hosts/fleet.toml gives dgx1..dgx4 their RoCE addresses: no "unknown DIST_INIT_ADDR"."""
    import ipaddress

    from sparkfleet.fleet import inventory

    inv = inventory.load(ROOT)
    subnet = ipaddress.ip_network("10.100.32.0/24")
    ips = {h: inv.host(h).fabric_ip for h in ("dgx1", "dgx2", "dgx3", "dgx4")}
    assert all(ip and ipaddress.ip_address(ip) in subnet for ip in ips.values()), ips
    assert len(set(ips.values())) == 4
    res = _dry(tmp_path, monkeypatch)
    assert "unknown DIST_INIT_ADDR" not in res.stdout
    assert "DIST_INIT_ADDR=10.100.32.1:20000" in res.stdout and "SGLANG_HOST_IP=10.100.32.4" in res.stdout
