"""The Aiden lane's engram layout: the kit's own (tools/engram_local.py), not DSV41EN1 packs.

A small stand-in checkpoint with DeepSeek-V4.1-Flash's key names and real bytes (two tables, 256 FP8
weight bytes + 8 scale bytes a row, one table per shard plus a shard without engram tensors); the
lane's recipe and pins are the checkout's own, only the hubs moved and the row counts shrunk.
Rank r of 4 gets, for every shard holding a table, a file of the same name and size with the header
verbatim and only rows [N*r/4, N*(r+1)/4) of each table at their own offsets; the index and
engram-local.json beside them. Rank 0 (shards_rank) gets nothing: it reads the shards.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

from click.testing import CliRunner

from sparkfleet.base.errors import ExitCode
from sparkfleet.cli import main
from sparkfleet.demo.hubfixture import checkpoint_engram_config
from sparkfleet.engram.ranges import rank_range
from sparkfleet.fleet import inventory
from sparkfleet.launch.plan import dry_run

ROOT = Path(__file__).resolve().parents[2]
LANE = "dsv41-flash-4x-aiden"
REPO = "deepseek-ai/DeepSeek-V4.1-Flash"
COMMIT = "fb2764a5" + "0" * 32
ROWS = {1: 1001, 14: 1003}
STAND_IN_DIGEST = "sha256:" + "5e" * 32


def _shard(path: Path, tensors: dict[str, tuple[str, list[int], bytes]]) -> tuple[int, dict]:
    header, blobs, at = {}, b"", 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + len(data)]}
        blobs += data
        at += len(data)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    path.write_bytes(struct.pack("<Q", len(head)) + head + blobs)
    return 8 + len(head), header


def _fleet(tmp_path: Path) -> tuple[Path, Path, dict]:
    hub = tmp_path / "nas" / "hub"
    repo = hub / ("models--" + REPO.replace("/", "--"))
    snap = repo / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    weight_map, layout = {}, {}
    for i, (layer, rows) in enumerate(sorted(ROWS.items())):
        weight = os.urandom(rows * 256)
        scale = os.urandom(rows * 8)
        name = f"model-{i + 1:05d}-of-00003.safetensors"
        tensors = {
            f"layers.{layer}.attn.w": ("BF16", [4, 4], os.urandom(32)),  # a tensor before the table
            f"layers.{layer}.engram.embed.weight": ("F8_E4M3", [rows, 256], weight),
            f"layers.{layer}.engram.embed.scale": ("F8_E8M0", [rows, 8], scale),
        }
        hlen, header = _shard(snap / name, tensors)
        layout[layer] = (name, hlen, header)
        for t in tensors:
            weight_map[t] = name
    _shard(snap / "model-00003-of-00003.safetensors", {"lm_head.weight": ("BF16", [8, 8], os.urandom(128))})
    weight_map["lm_head.weight"] = "model-00003-of-00003.safetensors"
    (snap / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (snap / "config.json").write_text(json.dumps({"text_config": checkpoint_engram_config(ROWS)}))
    root = tmp_path / "fleet"
    (root / "hosts").mkdir(parents=True)
    fleet = (ROOT / "hosts" / "fleet.toml").read_text()
    fleet = fleet.replace('"/mnt/nas/huggingface/hub"', json.dumps(str(hub)))
    fleet = fleet.replace('"/home/kilork/hf-local/hub"', json.dumps(str(tmp_path / "nvme" / "hub")))
    fleet = fleet.replace(
        'tag = "production-1.2"\n', f'tag = "production-1.2"\ndigest = "{STAND_IN_DIGEST}"\n'
    )
    (root / "hosts" / "fleet.toml").write_text(fleet)
    shutil.copytree(ROOT / "recipes" / LANE, root / "recipes" / LANE)
    recipe = root / "recipes" / LANE / "recipe.toml"
    text = recipe.read_text()
    assert "rows = { 1 = 384006168, 14 = 384016682 }" in text
    recipe.write_text(
        text.replace("rows = { 1 = 384006168, 14 = 384016682 }", "rows = { 1 = 1001, 14 = 1003 }")
    )
    return root, snap, layout


def _pack(root: Path, host: str, *extra: str):
    args = [
        "--root",
        str(root),
        "engram",
        "pack",
        LANE,
        host,
        "--here",
        "--reserve-gib",
        "0",
        "--json",
        *extra,
    ]
    return CliRunner().invoke(main, args)


def test_rank_1_gets_sparse_copies_of_the_shards_with_only_its_rows(tmp_path):
    root, snap, layout = _fleet(tmp_path)
    res = _pack(root, "dgx2")
    assert res.exit_code == ExitCode.OK, res.output
    doc = json.loads(res.stdout)
    assert doc["action"] == "packed" and doc["rank"] == 1 and doc["world"] == 4
    out = Path(doc["out_dir"])
    names = {layout[layer][0] for layer in ROWS}
    assert {p.name for p in out.iterdir() if not p.name.startswith(".")} == names | {
        "model.safetensors.index.json",
        "engram-local.json",
    }  # no DSV41EN1 pack, no copy of the shard without engram tensors
    manifest = json.loads((out / "engram-local.json").read_text())
    want = {str(layer): list(rank_range(n, 1, 4)) for layer, n in ROWS.items()}
    assert (
        manifest["layers"] == want
        and manifest["quant"] == "fp8"
        and "tools/engram_local.py" in manifest["note"]
    )
    assert (out / "model.safetensors.index.json").read_bytes() == (
        snap / "model.safetensors.index.json"
    ).read_bytes()
    for layer, (name, hlen, header) in layout.items():
        src, dst = (snap / name).read_bytes(), (out / name).read_bytes()
        assert len(dst) == len(src) and dst[:hlen] == src[:hlen]  # same size, header verbatim
        lo, hi = want[str(layer)]
        owned = bytearray(len(src))
        for part, width in (("weight", 256), ("scale", 8)):
            a = hlen + header[f"layers.{layer}.engram.embed.{part}"]["data_offsets"][0]
            span = slice(a + lo * width, a + hi * width)
            assert dst[span] == src[span]  # this rank's rows, at their own offsets
            owned[span] = b"\1" * (span.stop - span.start)
        owned[:hlen] = b"\1" * hlen
        assert all(b == 0 for b, mine in zip(dst, owned, strict=True) if not mine)  # a hole everywhere else

    verified = CliRunner().invoke(main, ["--root", str(root), "engram", "verify", LANE, "dgx2", "--json"])
    assert verified.exit_code == ExitCode.OK and json.loads(verified.stdout)["ok"], verified.output

    again = json.loads(_pack(root, "dgx2").stdout)
    assert again["action"] == "skipped" and sorted(again["kept"]) == sorted(names)

    (out / layout[14][0]).write_bytes(b"\0" * len((out / layout[14][0]).read_bytes()))  # rows lost
    broken = CliRunner().invoke(main, ["--root", str(root), "engram", "verify", LANE, "dgx2", "--json"])
    assert not json.loads(broken.stdout)["ok"] and "header differs" in broken.stdout
    fixed = json.loads(_pack(root, "dgx2").stdout)
    assert fixed["action"] == "repaired" and fixed["written"] == [layout[14][0]]
    assert "header differs" in fixed["repaired_reasons"][layout[14][0]]


def test_rank_0_reads_the_shards_and_writes_nothing(tmp_path):
    root, _, _ = _fleet(tmp_path)
    res = _pack(root, "dgx1")
    assert res.exit_code == ExitCode.OK, res.output
    doc = json.loads(res.stdout)
    assert doc["action"] == "reads-shards" and doc["written"] == []
    assert doc["files"]["SPARK_ENGRAM_ROWS"]["value"] == "1:0:250,14:0:250"
    assert not Path(doc["out_dir"]).exists()
    text = CliRunner().invoke(main, ["--root", str(root), "engram", "pack", LANE, "dgx1", "--dry-run"]).stdout
    assert "reads its rows from the checkpoint's shards, no copy (SPARK_ENGRAM_ROWS=1:0:250,14:0:250)" in text


def test_lane_env_points_each_rank_at_its_rows(tmp_path, monkeypatch):
    """launch-sgl-dsv41.sh run_cmd(): /engram-local + SPARK_ENGRAM_DIR, or the model path + its rows."""
    monkeypatch.setenv("SPARKFLEET_STATE_DIR", str(tmp_path / "state"))
    root, _, _ = _fleet(tmp_path)
    plan = dry_run(inventory.load(root), LANE)
    by_rank = {s.rank: s for s in plan.by_rank()}
    head = by_rank[0]
    assert head.env["SPARK_ENGRAM_ROWS"] == "1:0:250,14:0:250"
    assert "DSV41_PACKED_DIR" not in head.env
    assert not [b for b in head.binds if b.target == "/engram-local"]
    for rank in (1, 2, 3):
        spec = by_rank[rank]
        assert spec.env["SPARK_ENGRAM_DIR"] == "/engram-local" and "SPARK_ENGRAM_ROWS" not in spec.env
        (bind,) = [b for b in spec.binds if b.target == "/engram-local"]
        assert bind.read_only and bind.source == tmp_path / "nvme" / "engram-packs" / LANE
