"""Packing engram rows per rank: exact bytes, headers, receipts, skip / refuse / force / repair."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from engram_helpers import PARTS_TABLES

from sparkfleet.base.errors import SourceError, SpaceError, SparkfleetError
from sparkfleet.demo.hubfixture import ENGRAM_REPO, build_engram_repo
from sparkfleet.engram.pack import EngramMismatch, interleave, pack
from sparkfleet.engram.ranges import HEADER_BYTES, MAGIC, PackHeader, pack_name, rank_range
from sparkfleet.engram.receipt import JOURNAL_NAME, RECEIPT_NAME
from sparkfleet.engram.verify import verify
from sparkfleet.stage import execute
from sparkfleet.stage.execute import free_bytes
from sparkfleet.stage.plan import StageRequest

ROW = 264  # 256 F8_E4M3 weight bytes + 8 F8_E8M0 scale bytes


def rows_of(path: Path) -> bytes:
    return path.read_bytes()[HEADER_BYTES:]


def fingerprint(out: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in sorted(out.iterdir()) if p.is_file()}


@pytest.mark.parametrize("world", [1, 2, 3, 4, 5, 7, 8])
@pytest.mark.parametrize("total", [0, 1, 7, 1001, 1003, 384_006_168, 384_016_682])
def test_rank_ranges_partition_every_row_once(total, world):
    ranges = [rank_range(total, r, world) for r in range(world)]
    assert ranges[0][0] == 0 and ranges[-1][1] == total
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
    sizes = [hi - lo for lo, hi in ranges]
    assert max(sizes) - min(sizes) <= 1


def test_tp4_lane_share_is_the_logged_47_2_gib_per_rank():
    """The night shift's figure: tables of 384,006,168 / 384,016,682 rows of 264 B, quartered."""
    for rank in range(4):
        size = sum(
            PackHeader(layer, *rank_range(total, rank, 4), total, ROW).file_size
            for layer, total in ((1, 384_006_168), (14, 384_016_682))
        )
        assert round(size / 1024**3, 1) == 47.2


@pytest.mark.parametrize(
    "lane,hosts", [("eng4", ["h1", "h2", "h3", "h4"]), ("eng3", ["h2", "h3", "h4"])], ids=["W4", "W3"]
)
def test_all_ranks_concatenated_equal_the_source_table(fleet, lane, hosts):
    inv = fleet.inv()
    world = len(hosts)
    for rank, host in enumerate(hosts):
        # A chunk of 7 rows: every pack crosses many chunk boundaries.
        result = pack(inv, lane, host, chunk_bytes=7 * ROW)
        assert result.action == "packed" and result.rank == rank and result.world == world
    for layer in (1, 14):
        files = [fleet.out_dir(lane, h) / pack_name(layer, r, world) for r, h in enumerate(hosts)]
        assert b"".join(rows_of(f) for f in files) == fleet.truth.packed_rows(layer)
        total = fleet.truth.rows(layer)
        assert total % world  # the split is uneven on purpose
        for rank, f in enumerate(files):
            data = f.read_bytes()
            lo, hi = rank_range(total, rank, world)
            assert data[:8] == b"DSV41EN1"
            assert PackHeader.decode(data) == PackHeader(layer, lo, hi, total, ROW)
            assert int.from_bytes(data[:8], "little") == MAGIC
            assert data[48:HEADER_BYTES] == bytes(HEADER_BYTES - 48)
            assert len(data) == HEADER_BYTES + (hi - lo) * ROW


def test_single_tensor_table_and_pattern_forms(make_fleet):
    fleet = make_fleet(rows={3: 517, 9: 260})
    fleet.add_lane(
        "byname", ["h1", "h2", "h3"], '[[engram.tables]]\nlayer = 3\nname = "layers.3.engram.embed.weight"\n'
    )
    fleet.add_lane(
        "bypattern",
        ["h1", "h2"],
        'pattern = ["layers.{layer}.engram.embed.weight", "layers.{layer}.engram.embed.scale"]\n'
        "rows = { 3 = 517, 9 = 260 }\nrow_bytes = 264\n",
    )
    inv = fleet.inv()
    for host in ("h1", "h2", "h3"):
        pack(inv, "byname", host, chunk_bytes=1000)
    weight = b"".join(
        rows_of(fleet.out_dir("byname", h) / pack_name(3, r, 3)) for r, h in enumerate(["h1", "h2", "h3"])
    )
    assert weight == fleet.truth.tables[3]["weight"]
    assert (
        PackHeader.decode((fleet.out_dir("byname", "h1") / pack_name(3, 0, 3)).read_bytes()).row_bytes == 256
    )
    for host in ("h1", "h2"):
        result = pack(inv, "bypattern", host)
        assert sorted(result.written) == [pack_name(3, result.rank, 2), pack_name(9, result.rank, 2)]
    for layer in (3, 9):
        got = b"".join(
            rows_of(fleet.out_dir("bypattern", h) / pack_name(layer, r, 2))
            for r, h in enumerate(["h1", "h2"])
        )
        assert got == fleet.truth.packed_rows(layer)


def test_no_index_json_reads_shard_headers(make_fleet):
    fleet = make_fleet(with_index=False)
    fleet.add_lane("eng2", ["h1", "h2"], PARTS_TABLES)
    inv = fleet.inv()
    for host in ("h1", "h2"):
        pack(inv, "eng2", host)
    got = b"".join(
        rows_of(fleet.out_dir("eng2", h) / pack_name(14, r, 2)) for r, h in enumerate(["h1", "h2"])
    )
    assert got == fleet.truth.packed_rows(14)


def test_receipt_records_source_ranges_and_digests(fleet):
    result = pack(fleet.inv(), "eng4", "h3")
    out = fleet.out_dir("eng4", "h3")
    doc = json.loads((out / RECEIPT_NAME).read_text())
    ident = doc["identity"]
    assert ident["source"] == {"repo": ENGRAM_REPO, "commit": fleet.truth.commit}
    assert (ident["world_size"], ident["rank"], ident["format"]) == (4, 2, "DSV41EN1")
    tables = {t["layer"]: t for t in ident["tables"]}
    assert (tables[1]["lo"], tables[1]["hi"]) == rank_range(1001, 2, 4)
    assert (tables[14]["lo"], tables[14]["hi"], tables[14]["total_rows"]) == (*rank_range(1003, 2, 4), 1003)
    assert [p["tensor"] for p in tables[1]["parts"]] == [
        "layers.1.engram.embed.weight",
        "layers.1.engram.embed.scale",
    ]
    assert tables[1]["parts"][0]["dtype"] == "F8_E4M3" and tables[1]["parts"][1]["shape"] == [1001, 8]
    assert all(len(p["blob"]) == 64 for t in tables.values() for p in t["parts"])  # shard sha256 etags
    for name, rec in doc["files"].items():
        data = (out / name).read_bytes()
        assert rec["sha256"] == hashlib.sha256(data).hexdigest() and rec["size"] == len(data)
    assert doc["source"]["revision"] == "main" and doc["source"]["origin"] == "nas"
    assert "local hub" in doc["source"]["fallback_reason"] and ENGRAM_REPO in doc["source"]["fallback_reason"]
    assert doc["packer"] == "sparkfleet.engram" and doc["sparkfleet_version"]
    assert (doc["lane"], doc["host"]) == ("eng4", "h3")
    assert not (out / JOURNAL_NAME).exists()
    assert result.source["origin"] == "nas"


def test_rerun_skips_and_leaves_files_untouched(fleet):
    inv = fleet.inv()
    pack(inv, "eng4", "h1")
    out = fleet.out_dir("eng4", "h1")
    before = fingerprint(out)
    again = pack(inv, "eng4", "h1", full=True)
    assert again.action == "skipped" and again.written == [] and len(again.kept) == 2
    assert fingerprint(out) == before
    assert verify(inv, "eng4", "h1", full=True).ok
    forced = pack(inv, "eng4", "h1", force=True)  # --force repacks even what the receipt vouches for
    assert forced.action == "packed" and len(forced.written) == 2 and forced.kept == []
    after = fingerprint(out)
    assert all(after[n] != before[n] for n in forced.written)
    assert verify(inv, "eng4", "h1", full=True).ok


def test_local_staged_source_is_preferred_and_gives_the_same_packs(fleet):
    inv = fleet.inv()
    first = pack(inv, "eng4", "h2")
    assert first.source["origin"] == "nas" and first.source["fallback_reason"]
    out = fleet.out_dir("eng4", "h2")
    before = fingerprint(out)
    run = execute.stage([StageRequest(fleet.nas_hub, fleet.local_hub("h2"), ENGRAM_REPO, "main", (), ())])
    assert run.ok
    again = pack(inv, "eng4", "h2")
    assert again.source["origin"] == "local" and again.source["fallback_reason"] is None
    assert again.action == "skipped" and fingerprint(out) == before  # same commit: same identity
    # Packing fresh from the local hub gives the very same bytes.
    fresh = pack(inv, "eng4", "h2", force=True)
    assert fresh.source["origin"] == "local"
    assert verify(inv, "eng4", "h2", full=True).ok


def test_wrong_receipt_refuses_and_force_repacks(fleet):
    inv = fleet.inv()
    pack(inv, "eng4", "h4")
    out = fleet.out_dir("eng4", "h4")
    before = fingerprint(out)
    # The pin's ref moves to a new checkpoint revision with other row counts.
    new = build_engram_repo(fleet.nas_hub, rows={1: 1201, 14: 1003}, seed=5, label="engram-v2")
    with pytest.raises(EngramMismatch) as exc:
        pack(inv, "eng4", "h4")
    assert "source.commit" in exc.value.message and "--force" in exc.value.hint
    assert str(out / RECEIPT_NAME) in exc.value.message
    assert fingerprint(out) == before  # nothing changed
    report = verify(inv, "eng4", "h4")
    assert not report.ok and any("identity differs" in p for p in report.problems)
    forced = pack(inv, "eng4", "h4", force=True)
    assert forced.action == "packed" and forced.forced
    assert sorted(forced.written) == [pack_name(1, 3, 4), pack_name(14, 3, 4)]
    doc = json.loads((out / RECEIPT_NAME).read_text())
    assert doc["identity"]["source"]["commit"] == new.commit
    lo, hi = rank_range(1201, 3, 4)
    assert rows_of(out / pack_name(1, 3, 4)) == new.packed_rows(1, lo, hi)
    assert verify(inv, "eng4", "h4", full=True).ok


def test_tampered_receipt_refuses(fleet):
    inv = fleet.inv()
    pack(inv, "eng4", "h1")
    path = fleet.out_dir("eng4", "h1") / RECEIPT_NAME
    doc = json.loads(path.read_text())
    doc["identity"]["rank"] = 1
    path.write_text(json.dumps(doc))
    with pytest.raises(EngramMismatch, match=r"rank: wanted 0, receipt has 1"):
        pack(inv, "eng4", "h1")


def test_unidentified_packs_refuse_without_force(fleet):
    out = fleet.out_dir("eng4", "h2")
    out.mkdir(parents=True)
    stranger = out / pack_name(1, 1, 4)
    stranger.write_bytes(b"someone else's pack")
    with pytest.raises(EngramMismatch, match="without a sparkfleet receipt"):
        pack(fleet.inv(), "eng4", "h2")
    assert stranger.read_bytes() == b"someone else's pack"
    pack(fleet.inv(), "eng4", "h2", force=True)
    assert rows_of(stranger) == fleet.truth.packed_rows(1, *rank_range(1001, 1, 4))


def test_damaged_pack_is_found_by_verify_and_repaired(fleet):
    inv = fleet.inv()
    pack(inv, "eng4", "h1")
    target = fleet.out_dir("eng4", "h1") / pack_name(14, 0, 4)
    data = bytearray(target.read_bytes())
    data[HEADER_BYTES + 5000] ^= 0xFF
    target.write_bytes(bytes(data))
    report = verify(inv, "eng4", "h1", full=True)
    assert not report.ok and "sha256" in report.files[target.name]
    repaired = pack(inv, "eng4", "h1")
    assert repaired.action == "repaired" and repaired.written == [target.name]
    assert target.name in repaired.repaired_reasons
    assert rows_of(target) == fleet.truth.packed_rows(14, *rank_range(1003, 0, 4))
    assert verify(inv, "eng4", "h1", full=True).ok


def test_missing_tensor_names_it_and_creates_nothing(fleet):
    fleet.add_lane(
        "typo",
        ["h1"],
        "[[engram.tables]]\nlayer = 1\n"
        'parts = ["layers.1.engram.embed.weight", "layers.1.engram.embed.scales"]\n',
    )
    with pytest.raises(SourceError) as exc:
        pack(fleet.inv(), "typo", "h1")
    assert "'layers.1.engram.embed.scales'" in exc.value.message and "engram layer 1" in exc.value.message
    assert "layers.1.engram.embed.scale" in exc.value.hint  # the closest real name
    assert not fleet.out_dir("typo", "h1").exists()


def test_wrong_row_count_assertion_refuses(fleet):
    fleet.add_lane("rows", ["h1"], "rows = { 1 = 384006168 }\n" + PARTS_TABLES)
    with pytest.raises(SourceError, match="has 1001 rows, the recipe says 384006168"):
        pack(fleet.inv(), "rows", "h1")


def test_truncated_shard_is_a_clear_error(fleet):
    commit_dir = (
        fleet.nas_hub / "models--demo-org--DeepSeek-V4.1-Flash-Engram" / "snapshots" / fleet.truth.commit
    )
    shard = commit_dir / "model-00002-of-00003.safetensors"
    blob = shard.resolve()
    with open(blob, "r+b") as fh:
        fh.truncate(blob.stat().st_size - 100)
    with pytest.raises(SourceError, match=r"model-00002-of-00003\.safetensors.*truncated|data ends at byte"):
        pack(fleet.inv(), "eng4", "h1")


def test_preflight_refuses_before_writing(fleet):
    out = fleet.out_dir("eng4", "h1")
    with pytest.raises(SpaceError, match="not enough space"):
        # A reserve a terabyte above what is free: other test workers share this disk and free space
        # while this runs (a reserve of exactly `free` passed on the CI machine once); the exact edge
        # is tested on a tmpfs nobody else writes (below).
        pack(fleet.inv(), "eng4", "h1", reserve_bytes=free_bytes(fleet.tmp) + 2**40)
    leftovers = [p.name for p in out.rglob("*") if p.is_file() and p.parent == out] if out.exists() else []
    assert leftovers == []


def test_enospc_on_a_small_tmpfs_refuses_before_writing(fleet, tmpfs):
    mnt = tmpfs(256 * 1024)
    fleet.add_lane("tiny", ["h1"], f'out_dir = "{mnt}/{{lane}}-{{host}}"\n' + PARTS_TABLES)
    with pytest.raises(SpaceError) as exc:
        pack(fleet.inv(), "tiny", "h1")  # one rank = whole tables: 2 x ~264 KiB
    assert str(mnt) in exc.value.message
    out = mnt / "tiny-h1"
    assert [p for p in out.iterdir() if p.is_file()] == []
    st = os.statvfs(mnt)
    assert st.f_bfree == st.f_blocks or st.f_blocks - st.f_bfree <= 2  # nothing was spent (a dir or two)


def test_too_few_inodes_on_a_tmpfs_refuses_before_writing(fleet, tmpfs):
    """Bytes to spare but inodes short: refused before byte one, as staging would be (one space.py)."""
    mnt = tmpfs(16 * 1024 * 1024, options="nr_inodes=6")  # root, out dir, .locks, lock: 2 left
    fleet.add_lane("inodes", ["h1"], f'out_dir = "{mnt}/packs"\n' + PARTS_TABLES)
    with pytest.raises(SpaceError, match=r"not enough inodes on .*packs.*: need 4 files") as exc:
        pack(fleet.inv(), "inodes", "h1")  # one rank = 2 packs, the journal and the receipt's temp
    assert str(mnt) in exc.value.message
    assert [p.name for p in (mnt / "packs").iterdir() if p.is_file()] == []


def test_interleave_with_and_without_numpy_is_identical():
    blocks = [bytes(range(256)) * 3, bytes(range(100, 124))]
    with_np = bytes(interleave(blocks, [256, 8], 3))
    without = bytes(interleave(blocks, [256, 8], 3, use_numpy=False))
    assert with_np == without
    assert with_np[:264] == bytes(range(256)) + bytes(range(100, 108))
    assert with_np[264 : 264 + 264] == bytes(range(256)) + bytes(range(108, 116))


def test_disk_filling_mid_pack_is_a_space_error_and_leaves_no_partial(fleet, tmpfs):
    mnt = tmpfs(200 * 1024)  # less than the first pack (4 KiB header + 1001 rows x 264 B = 268 KB)
    fleet.add_lane("fills", ["h1"], f'out_dir = "{mnt}/packs"\n' + PARTS_TABLES)
    with pytest.raises(SpaceError, match="filled up while packing"):
        pack(fleet.inv(), "fills", "h1", reserve_bytes=-(10**9))  # a lying reserve: preflight passes
    out = mnt / "packs"
    assert sorted(p.name for p in out.iterdir() if p.is_file()) == [JOURNAL_NAME]
    assert not (out / RECEIPT_NAME).exists()


def test_killed_after_the_last_pack_before_the_receipt_completes_without_rewriting(fleet):
    inv = fleet.inv()
    pack(inv, "eng4", "h2")
    out = fleet.out_dir("eng4", "h2")
    (out / RECEIPT_NAME).rename(out / JOURNAL_NAME)  # the journal then names every file, as at that moment
    packs = {n: v for n, v in fingerprint(out).items() if n.endswith(".bin")}
    result = pack(inv, "eng4", "h2")
    assert result.action == "completed" and result.written == [] and len(result.kept) == 2
    assert {n: v for n, v in fingerprint(out).items() if n.endswith(".bin")} == packs
    assert (out / RECEIPT_NAME).exists() and not (out / JOURNAL_NAME).exists()
    assert verify(inv, "eng4", "h2", full=True).ok


def test_a_second_pack_of_the_same_directory_is_refused_while_one_runs(fleet):
    from sparkfleet.base.errors import LockBusyError
    from sparkfleet.engram.pack import pack_lock

    with pack_lock(fleet.out_dir("eng4", "h1")), pytest.raises(LockBusyError, match=f"pid {os.getpid()}"):
        pack(fleet.inv(), "eng4", "h1")


def test_force_replaces_an_unreadable_receipt(fleet):
    inv = fleet.inv()
    pack(inv, "eng4", "h3")
    path = fleet.out_dir("eng4", "h3") / RECEIPT_NAME
    path.write_text("{not json")
    with pytest.raises(SparkfleetError, match="unreadable engram receipt"):
        pack(inv, "eng4", "h3")
    assert pack(inv, "eng4", "h3", force=True).action == "packed"
    assert verify(inv, "eng4", "h3").ok


def test_world_size_change_refuses_then_force_replaces_and_removes_old_packs(fleet):
    inv = fleet.inv()
    pack(inv, "eng4", "h1")
    out = fleet.out_dir("eng4", "h1")
    fleet.add_lane("eng4", ["h1", "h2", "h3"], PARTS_TABLES)  # the lane shrinks to three hosts
    with pytest.raises(EngramMismatch, match="world_size: wanted 3, receipt has 4"):
        pack(fleet.inv(), "eng4", "h1")
    assert sorted(p.name for p in out.glob("*.bin")) == [pack_name(1, 0, 4), pack_name(14, 0, 4)]
    forced = pack(fleet.inv(), "eng4", "h1", force=True)
    assert sorted(forced.removed) == [pack_name(1, 0, 4), pack_name(14, 0, 4)]
    assert sorted(p.name for p in out.glob("*.bin")) == [pack_name(1, 0, 3), pack_name(14, 0, 3)]
    assert rows_of(out / pack_name(1, 0, 3)) == fleet.truth.packed_rows(1, *rank_range(1001, 0, 3))
    assert verify(fleet.inv(), "eng4", "h1", full=True).ok


@pytest.mark.parametrize("where", ["receipt-files", "journal-stale", "journal-files"])
@pytest.mark.parametrize(
    "name", ["../../victim.bin", "/tmp/sf-victim-engram-{unique}.bin", "..", "sub/engram-l1-r0of4.bin"]
)
def test_tampered_journal_or_receipt_never_deletes_outside_the_pack_dir(fleet, where, name):
    """Issue 10.14: `engram pack` deleted files named by a tampered journal or receipt."""
    # an absolute victim of its own: make test's workers run this test's cases side by side
    name = name.format(unique=f"{os.getpid()}-{where}")
    inv = fleet.inv()
    pack(inv, "eng4", "h1")
    out = fleet.out_dir("eng4", "h1")
    victim = Path(os.path.normpath(out / name))
    if victim in (out, out.parent):
        victim = out.parent / "keep.bin"
    victim.parent.mkdir(parents=True, exist_ok=True)
    victim.write_bytes(b"not ours")
    try:
        doc = json.loads((out / RECEIPT_NAME).read_text())
        entry = next(iter(doc["files"].values()))
        if where == "receipt-files":
            doc["files"][name] = entry
            doc["identity"]["world_size"] = 9  # an identity change makes --force remove what it names
            (out / RECEIPT_NAME).write_text(json.dumps(doc))
        else:
            doc["journal_of"] = RECEIPT_NAME
            if where == "journal-stale":
                doc["stale"] = [name]
            else:
                doc["files"][name] = entry
            (out / RECEIPT_NAME).unlink()
            (out / JOURNAL_NAME).write_text(json.dumps(doc))
        with pytest.raises(SparkfleetError, match="not a pack file of this directory"):
            pack(inv, "eng4", "h1")
        assert victim.read_bytes() == b"not ours"
        pack(inv, "eng4", "h1", force=True)
        assert victim.read_bytes() == b"not ours"
        assert verify(inv, "eng4", "h1", full=True).ok
    finally:
        if name.startswith("/tmp/"):
            victim.unlink(missing_ok=True)
