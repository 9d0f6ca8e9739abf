"""Bind manifest: local only when staged and verified, NAS read-only otherwise (per directory)."""

from __future__ import annotations

import os
from pathlib import Path

from sparkfleet.demo.hubfixture import WEIGHTS_REPO, build_nas_hub
from sparkfleet.lane.manifest import ModelState, SnapshotFile, build_manifest
from sparkfleet.node.agent import model_state
from sparkfleet.stage.execute import stage
from sparkfleet.stage.plan import StageRequest

C = "c" * 40


def night_shift_model(verified=True, bad=()):
    """141 staged entries in 3 directories + 30 page15 entries left on the NAS."""
    files = [SnapshotFile(f"model-{i:05d}.safetensors", False) for i in range(120)]
    files += [SnapshotFile(f"tokenizer/f{i}.json", False) for i in range(11)]
    files += [SnapshotFile(f"engram/shard-{i}.bin", False) for i in range(10)]
    files += [SnapshotFile(f"page15/page-{i:02d}.bin", True) for i in range(30)]
    return ModelState("org/model", C, tuple(files), verified, tuple(bad))


def test_171_binds_141_local_30_nas():
    m = build_manifest("dgx1", Path("/nvme/hub"), Path("/nas/hub"), [night_shift_model()], "/hub")
    assert (m.total, m.local, m.nas) == (171, 141, 30)
    assert all(b.read_only for b in m.binds)
    page = [b for b in m.binds if "page15" in b.target]
    assert {b.origin for b in page} == {"nas"}
    assert str(page[0].source).startswith(f"/nas/hub/models--org--model/snapshots/{C}/page15/")
    assert page[0].target.startswith(f"/hub/models--org--model/snapshots/{C}/page15/")
    assert m.model_paths["org/model"] == f"/hub/models--org--model/snapshots/{C}"
    reasons = {d.directory: (d.origin, d.reason) for d in m.decisions}
    assert reasons["page15"][0] == "nas" and "excluded" in reasons["page15"][1]
    assert reasons[""] == ("local", "staged and verified")


def test_unverified_tree_never_bound():
    m = build_manifest("h", Path("/l"), Path("/n"), [night_shift_model(verified=False)], "/hub")
    assert (m.local, m.nas) == (0, 171)


def test_bad_entry_sends_its_directory_to_the_nas():
    m = build_manifest("h", Path("/l"), Path("/n"), [night_shift_model(False, ["tokenizer/f3.json"])], "/hub")
    assert (m.local, m.nas) == (130, 41)
    assert {b.origin for b in m.binds if "/tokenizer/" in b.target} == {"nas"}


def test_partly_excluded_directory_goes_to_nas_whole():
    st = ModelState(
        "o/m", C, (SnapshotFile("d/a", False), SnapshotFile("d/b", True), SnapshotFile("x", False)), True
    )
    m = build_manifest("h", Path("/l"), Path("/n"), [st], "/hub")
    assert [(b.target.rsplit("/", 1)[-1], b.origin) for b in m.binds] == [
        ("a", "nas"),
        ("b", "nas"),
        ("x", "local"),
    ]
    assert "partly staged" in next(d.reason for d in m.decisions if d.directory == "d")


def test_process_runtime_reads_one_tree():
    m = build_manifest("h", Path("/l"), Path("/n"), [night_shift_model()], None)
    assert m.model_paths["org/model"] == f"/l/models--org--model/snapshots/{C}"  # page15 simply absent
    m = build_manifest("h", Path("/l"), Path("/n"), [night_shift_model(False, ["tokenizer/f3.json"])], None)
    assert m.model_paths["org/model"] == f"/n/models--org--model/snapshots/{C}"
    full = ModelState("o/m", C, (SnapshotFile("a", False),), True)
    assert build_manifest("h", Path("/l"), Path("/n"), [full], None).model_paths["o/m"].startswith("/l/")


def test_model_state_from_real_staging(tmp_path):
    nas = build_nas_hub(tmp_path / "nas" / "hub", shard_bytes=64 * 1024)
    local = tmp_path / "nvme" / "hub"
    req = StageRequest(nas.root, local, WEIGHTS_REPO, "main", (), ("page15/*",))
    before = model_state(WEIGHTS_REPO, "main", (), ("page15/*",), local, nas.root)
    assert not before.local_verified
    m0 = build_manifest("h", local, nas.root, [before], "/hub")
    assert m0.local == 0 and m0.nas == m0.total

    assert stage([req]).ok
    after = model_state(WEIGHTS_REPO, "main", (), ("page15/*",), local, nas.root)
    assert after.local_verified and not after.bad_paths
    m = build_manifest("h", local, nas.root, [after], "/hub")
    n_page = len(nas.weights.optional[after.commit])
    assert m.nas == n_page and m.local == m.total - n_page
    for b in m.binds:
        assert b.source.exists()
        assert (b.origin == "local") == str(b.source).startswith(str(local))

    # one wrong local blob (the night shift's "51 weight blobs silently wrong"): its directory falls back
    shard = next(
        b.source for b in m.binds if b.origin == "local" and b.target.endswith("00002-of-00004.safetensors")
    )
    real = Path(os.path.realpath(shard))
    data = bytearray(real.read_bytes())
    data[len(data) // 2] ^= 0xFF
    real.write_bytes(bytes(data))
    broken = model_state(WEIGHTS_REPO, "main", (), ("page15/*",), local, nas.root, verify_mode="full")
    assert not broken.local_verified
    assert "model-00002-of-00004.safetensors" in broken.bad_paths
    m2 = build_manifest("h", local, nas.root, [broken], "/hub")
    assert next(b for b in m2.binds if b.target.endswith("00002-of-00004.safetensors")).origin == "nas"
    assert next(b for b in m2.binds if b.target.endswith("tokenizer_config.json")).origin == "local"
