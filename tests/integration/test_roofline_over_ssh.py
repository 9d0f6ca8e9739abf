"""`roofline LANE` and `measure HOST` run where the files are: on the head host, over real OpenSSH."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sparkfleet.demo.hubfixture import build_nas_hub
from sparkfleet.demo.synthmodel import SynthSpec
from support.lanefleet import use_ssh
from support.stagefleet import write_lane_fleet

pytestmark = [pytest.mark.netns, pytest.mark.slow]

SHARD = 2 * 1024 * 1024


def cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sparkfleet", "--root", str(root), *args],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip


def test_roofline_and_measure_run_on_the_head_host(tmp_path, fleet_hosts, monkeypatch) -> None:
    hosts = fleet_hosts(["dgx1"])
    nas = tmp_path / "nas" / "hub"
    build_nas_hub(nas, shard_bytes=SHARD, absolute_links=False)
    root = write_lane_fleet(tmp_path / "fleet", {"dgx1": hosts["dgx1"].nvme / "hub"}, {"dgx1": nas}, "one")
    use_ssh(monkeypatch, tmp_path / "ssh_config", hosts)

    before = cli(root, "roofline", "one", "--json")  # not staged yet: read from the NAS, said so
    assert before.returncode == 0, before.stderr
    assert json.loads(before.stdout)["read_from"].startswith("nas (not staged locally")

    assert "no decode bound" in " ".join(json.loads(before.stdout)["notes"])  # no host kind yet

    staged = cli(root, "stage", "dgx1")
    assert staged.returncode == 0, staged.stderr
    assert "% of this host's" in staged.stdout  # the stage summary's own bound, measured on dgx1
    measured = cli(root, "measure", "dgx1", "--quick", "--json")
    assert measured.returncode == 0, measured.stderr
    figures = json.loads(measured.stdout)
    assert figures["nvme_read"]["value"] > 0 and figures["nas_read"]["value"] > 0
    assert figures["nvme_write"]["method"].startswith("state dir")
    state = hosts["dgx1"].nvme / "sparkfleet" / "measurements.json"  # beside the host's local hub
    assert set(json.loads(state.read_text())) >= {"nvme_read", "nas_read", "nvme_write", "cpu_memory_copy"}

    fleet_toml = root / "hosts" / "fleet.toml"
    fleet_toml.write_text(
        fleet_toml.read_text().replace('reserve_gib = 0\n', 'reserve_gib = 0\nkind = "k"\n')
        + '[host_kinds.k]\nmemory_bandwidth = { value = 100, unit = "GB/s", source = "test" }\n'
    )
    after = cli(root, "roofline", "one", "--json", "--context", "4096")
    assert after.returncode == 0, after.stderr
    doc = json.loads(after.stdout)
    assert (doc["host"], doc["read_from"]) == ("dgx1", "local")
    spec = SynthSpec.for_layer_bytes(SHARD, layers=4)
    assert doc["model"]["decode_bytes_per_token"] == spec.decode_bytes_per_token()
    assert doc["model"]["kv_bytes_per_token"] == spec.kv_bytes_per_token()
    assert doc["machine"]["figures"]["nvme_read"]["origin"] == "measured"
    per_rank = spec.decode_bytes_per_token() + 4096 * spec.kv_bytes_per_token()
    assert doc["step"]["memory_ms"] == pytest.approx(per_rank / 100e9 * 1000)
