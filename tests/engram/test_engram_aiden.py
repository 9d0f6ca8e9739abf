"""The Aiden lane's engram dry run on a stand-in of the real checkpoint's geometry.

The stand-in is sparse: config.json with DeepSeek-V4.1-Flash's own engram keys and shards whose
safetensors headers declare the real tables (F8_E4M3 [384006168, 256] + F8_E8M0 [.., 8] per layer),
their data holes. The lane's recipe and pins are the checkout's own files, only the hubs moved.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

from click.testing import CliRunner

from sparkfleet.base.errors import ExitCode
from sparkfleet.cli import main
from sparkfleet.demo.hubfixture import checkpoint_engram_config

ROOT = Path(__file__).resolve().parents[2]
LANE = "dsv41-flash-4x-aiden"
REPO = "deepseek-ai/DeepSeek-V4.1-Flash"
COMMIT = "fb2764a5" + "0" * 32  # the pin records only the prefix fb2764a5
ROWS = {1: 384_006_168, 14: 384_016_682}  # text_config.engram_num_embeddings, paired with layer ids


def _sparse_shard(path: Path, layer: int, rows: int) -> str:
    weight, scale = f"layers.{layer}.engram.embed.weight", f"layers.{layer}.engram.embed.scale"
    header = {
        weight: {"dtype": "F8_E4M3", "shape": [rows, 256], "data_offsets": [0, rows * 256]},
        scale: {"dtype": "F8_E8M0", "shape": [rows, 8], "data_offsets": [rows * 256, rows * 264]},
    }
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
        f.truncate(8 + len(blob) + rows * 264)  # a hole: the header is all the dry run reads
    return path.name


def _fleet(tmp_path: Path) -> Path:
    hub = tmp_path / "nas" / "hub"
    repo = hub / ("models--" + REPO.replace("/", "--"))
    snap = repo / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    weight_map = {}
    for i, (layer, rows) in enumerate(sorted(ROWS.items())):
        shard = _sparse_shard(snap / f"model-{i + 1:05d}-of-00002.safetensors", layer, rows)
        for part in ("weight", "scale"):
            weight_map[f"layers.{layer}.engram.embed.{part}"] = shard
    (snap / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (snap / "config.json").write_text(json.dumps({"text_config": checkpoint_engram_config(ROWS)}))
    root = tmp_path / "fleet"
    (root / "hosts").mkdir(parents=True)
    fleet = (ROOT / "hosts" / "fleet.toml").read_text()
    fleet = fleet.replace('"/mnt/nas/huggingface/hub"', json.dumps(str(hub)))
    fleet = fleet.replace('"/home/kilork/hf-local/hub"', json.dumps(str(tmp_path / "nvme" / "hub")))
    (root / "hosts" / "fleet.toml").write_text(fleet)
    shutil.copytree(ROOT / "recipes" / LANE, root / "recipes" / LANE)
    return root


def test_aiden_dry_run_prints_four_quarters_and_47_21_gib_per_rank(tmp_path):
    root = _fleet(tmp_path)
    res = CliRunner().invoke(main, ["--root", str(root), "engram", "pack", LANE, "dgx2", "--dry-run"])
    assert res.exit_code == ExitCode.OK, res.output
    out = res.stdout
    assert "rank 1 of 4" in out
    assert "rank 0 dgx1: layer 1 [0, 96001542), layer 14 [0, 96004170): 47.21 GiB" in out
    assert "rank 1 dgx2: layer 1 [96001542, 192003084), layer 14 [96004170, 192008341): 47.21 GiB" in out
    assert "rank 2 dgx3: layer 1 [192003084, 288004626), layer 14 [192008341, 288012511): 47.21 GiB" in out
    assert "rank 3 dgx4: layer 1 [288004626, 384006168), layer 14 [288012511, 384016682): 47.21 GiB" in out
    assert not (tmp_path / "nvme" / "engram-packs").exists()  # nothing written
    doc = json.loads(
        CliRunner()
        .invoke(main, ["--root", str(root), "engram", "pack", LANE, "dgx1", "--dry-run", "--json"])
        .stdout
    )
    total = sum(r["bytes"] for r in doc["ranks"])
    assert total == (ROWS[1] + ROWS[14]) * 264 == 768_022_850 * 264
