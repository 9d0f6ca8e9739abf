"""Bytes that arrive are checked before they get a final name: a sha256-named blob by hashing it here
(no NAS read at all), anything else against the NAS copy."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from stage_helpers import weights_request

from sparkfleet.base.digests import compare
from sparkfleet.base.errors import SourceError
from sparkfleet.demo.hubfixture import WEIGHTS_REPO
from sparkfleet.facts.hubcache import repo_folder
from sparkfleet.stage import execute
from sparkfleet.stage.copy import place_verified
from sparkfleet.stage.verify import arrival_mode


def _fill_with(data: bytes):
    def fill(tmp: Path) -> None:
        tmp.write_bytes(data)

    return fill


def test_arrival_mode_is_address_under_sample_and_full_stays_full():
    assert arrival_mode("sample") == "address"
    assert arrival_mode("full") == "full"


def test_sha256_named_blob_verified_without_touching_the_source(tmp_path):
    data = os.urandom(3 * 1024 * 1024)
    address = ("sha256", hashlib.sha256(data).hexdigest())
    nowhere = tmp_path / "nas-is-gone" / address[1]  # any stat or read of it would raise
    final = tmp_path / "hub" / "blobs" / address[1]
    place_verified(final, _fill_with(data), nowhere, arrival_mode("sample"), address)
    assert final.read_bytes() == data
    assert compare(final, nowhere, "address", address).same


def test_bytes_that_do_not_match_their_name_are_refused_and_leave_nothing(tmp_path):
    data = os.urandom(1024 * 1024)
    address = ("sha256", hashlib.sha256(data).hexdigest())
    bad = bytearray(data)
    bad[len(bad) // 2 + 3] ^= 0x40  # one bit between any sample windows
    final = tmp_path / "hub" / "blobs" / address[1]
    with pytest.raises(SourceError, match="did not verify"):
        place_verified(final, _fill_with(bytes(bad)), tmp_path / "unused", "address", address)
    assert not final.exists()
    assert os.listdir(final.parent) == []  # no temp left behind either


def test_files_without_an_address_are_still_sampled_against_the_source(tmp_path):
    source = tmp_path / "nas" / "config.json"
    source.parent.mkdir()
    source.write_bytes(b'{"a": 1}')
    final = tmp_path / "hub" / "config.json"
    with pytest.raises(SourceError):
        place_verified(final, _fill_with(b'{"a": 2}'), source, "address", None)
    place_verified(final, _fill_with(b'{"a": 1}'), source, "address", None)
    assert final.read_bytes() == b'{"a": 1}'
    (tmp_path / "nas" / "config.json").unlink()
    with pytest.raises(FileNotFoundError):  # the NAS copy is needed: there is no name to trust
        compare(final, source, "address", None)


def test_fanout_stage_refuses_a_nas_blob_that_mismatches_its_name(big_nas, local):
    """Sampled windows pass a NAS blob corrupted between them; fan-out's hashing on arrival does not."""
    nas = big_nas
    commit = nas.weights.commits["main"]
    link = nas.root / repo_folder(WEIGHTS_REPO) / "snapshots" / commit / "model-00003-of-00004.safetensors"
    blob = Path(os.path.realpath(link))
    with open(blob, "r+b") as fh:
        fh.seek(blob.stat().st_size // 2 + 12345)  # far from every sample window
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(SourceError, match="did not verify"):
        execute.stage([weights_request(nas, local)], share=(0, 1))  # fan-out wave 1, default sample
    assert not [p for p in local.rglob(blob.name) if p.is_file()]  # nothing under its name
    execute.stage([weights_request(nas, local)])  # a plain stage samples windows (as before)
    staged = Path(os.path.realpath(local / link.relative_to(nas.root)))
    assert staged.name == blob.name and staged.is_file()
