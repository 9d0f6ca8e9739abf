"""The one place that reads file content to decide whether two files are the same.

Never mtime, never size alone (night-shift lessons 3 and 4: NFS mtime lies, and two weight shards
can share a size). `sample` compares size plus fixed windows — head, tail and evenly spread
between — which catches truncation, swaps and most corruption for ~1 MiB of reads per file.
`full` reads every byte: against the content address where the name is one (sha256 for 64-hex
repo blobs, git blob sha1 for 40-hex), else against the source's own full digest.
`address` is for bytes that just arrived (stage/verify.py says when): a file named by its sha256
is hashed whole here and compared with its name, with no read of the source at all; any other
file is sampled against the source as in `sample`.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

WINDOW = 64 * 1024
SPREAD_WINDOWS = 14  # plus head and tail
READ_CHUNK = 8 * 1024 * 1024


def sample_offsets(size: int) -> list[int]:
    """Window offsets for a file of `size` bytes: head, evenly spread, tail (deduplicated)."""
    if size <= WINDOW * (SPREAD_WINDOWS + 2):
        return [0] if size else []
    last = size - WINDOW
    spread = [last * i // (SPREAD_WINDOWS + 1) for i in range(1, SPREAD_WINDOWS + 1)]
    return sorted({0, *spread, last})


def sample_note() -> str:
    """What `sample` reads and what it therefore misses, for every output that reports a sampled check."""
    whole = WINDOW * (SPREAD_WINDOWS + 2)
    return (
        f"sampled: each file's size and {SPREAD_WINDOWS + 2} windows of {WINDOW // 1024} KiB "
        f"(a file up to {whole // (1024 * 1024)} MiB read whole); a byte changed between the windows "
        "of a larger file is not seen"
    )


def sample_digest(path: Path) -> tuple[int, str]:
    """(size, blake2b over the sample windows). Small files are read whole."""
    with open(path, "rb", buffering=0) as fh:
        size = os.fstat(fh.fileno()).st_size
        h = hashlib.blake2b(size.to_bytes(8, "little"), digest_size=20)
        if size <= WINDOW * (SPREAD_WINDOWS + 2):
            h.update(_read_all(fh))
        else:
            # No readahead around the windows: over NFS/sshfs it would multiply what the NAS sends.
            os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_RANDOM)
            for offset in sample_offsets(size):
                h.update(os.pread(fh.fileno(), WINDOW, offset))
        return size, h.hexdigest()


def _read_all(fh) -> bytes:
    chunks = []
    while chunk := fh.read(READ_CHUNK):
        chunks.append(chunk)
    return b"".join(chunks)


def full_digest(path: Path, algorithm: str = "blake2b") -> str:
    """Digest of every byte. `gitsha1` is git's blob hash: sha1(b"blob <len>\\0" + data)."""
    with open(path, "rb", buffering=0) as fh:
        if algorithm == "gitsha1":
            h = hashlib.sha1(f"blob {os.fstat(fh.fileno()).st_size}\0".encode(), usedforsecurity=False)
        elif algorithm == "blake2b":
            h = hashlib.blake2b(digest_size=32)
        else:
            h = hashlib.new(algorithm)
        buf = bytearray(READ_CHUNK)
        view = memoryview(buf)
        while n := fh.readinto(buf):
            h.update(view[:n])
        return h.hexdigest()


@dataclass(frozen=True)
class Verdict:
    """Whether a local file matches its source, and if not, why (for the report)."""

    same: bool
    reason: str = ""


def compare(local: Path, source: Path, mode: str, address: tuple[str, str] | None = None) -> Verdict:
    """Compare `local` with `source` by `mode` ("sample", "full" or "address"); see the module docstring."""
    try:
        local_size = local.stat().st_size
    except FileNotFoundError:
        return Verdict(False, "missing")
    if mode == "address" and address is not None and address[0] == "sha256":
        got = full_digest(local, "sha256")  # the name is the promise: no stat, no read of the source
        if got != address[1]:
            return Verdict(False, f"sha256 {got[:16]}… != name {address[1][:16]}…")
        return Verdict(True)
    source_size = source.stat().st_size
    if local_size != source_size:
        return Verdict(False, f"size {local_size} != source {source_size}")
    if mode in ("sample", "address"):
        if sample_digest(local) != sample_digest(source):
            return Verdict(False, "sampled content differs from the source")
        return Verdict(True)
    if mode != "full":
        raise ValueError(f"unknown verify mode {mode!r}")
    if address is not None:
        algorithm, expected = address
        got = full_digest(local, algorithm)
        if got != expected:
            return Verdict(False, f"{algorithm} {got[:16]}… != name {expected[:16]}…")
        return Verdict(True)
    if full_digest(local) != full_digest(source):
        return Verdict(False, "full content differs from the source")
    return Verdict(True)
