"""A hostile peer hub on the demo fleet's local fan-out: bytes read in place are still verified.

On the demo fleet every host is this machine, so wave 2 reads a peer's hub in place (transport
`local`). Whoever can write that peer's hub can offer anything under a blob's name: the same size
with other bytes, a link to a file outside the hub, a FIFO. None of it may be published: the
wrong bytes fail their sha256 name on arrival, the link and the FIFO are not a file the peer
holds, and the host takes those files from the NAS instead.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparkfleet.base.errors import ExitCode
from sparkfleet.cli import main
from sparkfleet.demo.fleet import write_demo_fleet
from sparkfleet.demo.hubfixture import WEIGHTS_REPO
from sparkfleet.facts.hubcache import repo_folder

from .tally import bad_input, lost_bytes

SURFACE = "stage-local-peer"
pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.surface("file:peer hub blob (stage --fanout, local peers)")
def test_a_hostile_peer_hub_is_never_published(tmp_path, figures):
    demo = write_demo_fleet(tmp_path, shard_bytes=256 * 1024)
    root = ["--root", str(demo.root)]
    assert CliRunner().invoke(main, [*root, "stage", "dgx2"]).exit_code == ExitCode.OK
    weights = demo.local_hub("dgx2") / repo_folder(WEIGHTS_REPO) / "blobs"
    blobs = sorted(weights.iterdir())  # every weights blob turned hostile (the drafter's stay good)
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"OUTSIDE" * 1000)
    swapped, linked, fifos = blobs[0::3], blobs[1::3], blobs[2::3]
    for blob in swapped:
        size = blob.stat().st_size
        blob.unlink()
        blob.write_bytes(b"\xee" * size)  # same size, other bytes
    for blob in linked:
        blob.unlink()
        blob.symlink_to(outside)
    for blob in fifos:
        blob.unlink()
        os.mkfifo(blob)

    wave2 = [*root, "stage", "dgx1", "--here", "--peers", "dgx1,dgx2", "--full", "--json"]
    result = CliRunner().invoke(main, wave2)
    assert result.exit_code == ExitCode.OK, result.output
    run = json.loads(result.stdout)
    failures = [f for r in run["repos"] for f in r["peer_failures"]]
    taken = {str(p.relative_to(demo.local_hub("dgx1"))): p.read_bytes()
             for p in demo.local_hub("dgx1").rglob("blobs/*") if p.is_file()}  # fmt: skip
    nas = {rel: data for rel, data in _files(demo.nas_hub).items() if rel in taken}
    lost = lost_bytes(figures, SURFACE, nas, taken)
    for bad in blobs:
        rel = str(bad.relative_to(demo.local_hub("dgx2")))
        bad_input(figures, SURFACE, refused=taken.get(rel) == nas.get(rel) is not None)
    assert lost == 0
    assert any(f.startswith("dgx2: ") and b.name in f for b in swapped for f in failures), failures
    assert b"OUTSIDE" not in b"".join(taken.values())
    assert run["peer_bytes"] > 0  # the good blobs did come from the peer
    verify = CliRunner().invoke(main, [*root, "verify", "dgx1", "--full"])
    assert verify.exit_code == ExitCode.OK, verify.output
