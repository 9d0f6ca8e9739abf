"""The receipt of one host's packs for one lane: what was packed from what, and what came out.

Two halves. `identity` is everything that decides the packs' bytes — source repo and commit, every
table's tensors (shard, blob, dtype, shape), row range, world size, rank, pack format — and is
what a rerun compares: equal means the packs on disk are the packs wanted (skip after a verify);
different means the directory holds someone else's packs, which are refused, never silently
overwritten. `outputs` (size, sha256 and sampled digest per file) is what `verify` checks. Where
the bytes were read from (local hub or NAS), when, and by which sparkfleet are recorded but are
not identity: the same commit gives the same bytes from either hub.

The receipt is written last, atomically, after every pack is published; a journal with the same
identity is kept while packing so a killed run's finished files are recognised on the rerun.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..base import atomic
from ..base.errors import SparkfleetError
from .ranges import is_pack_name

RECEIPT_NAME = "engram-receipt.json"
JOURNAL_NAME = ".engram-pack-journal.json"
PACK_FORMAT = "DSV41EN1"
# Bumped only when the bytes a pack holds for the same identity would change.
PACKER_FORMAT_VERSION = 1


@dataclass(frozen=True)
class FileRecord:
    """One published pack file as the receipt (or journal) knows it."""

    name: str
    size: int
    sha256: str
    sample: str  # digests.sample_digest's hex over the same file

    def to_dict(self) -> dict[str, Any]:
        return {"size": self.size, "sha256": self.sha256, "sample": self.sample}


@dataclass(frozen=True)
class Receipt:
    """A parsed receipt or journal."""

    path: Path
    identity: dict[str, Any]
    files: dict[str, FileRecord]
    info: dict[str, Any]


def read(path: Path) -> Receipt | None:
    """The receipt/journal at `path`, None if absent; a receipt that is not ours is an error."""
    try:
        doc = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise SparkfleetError(
            f"{path}: unreadable engram receipt ({exc})",
            hint="move the directory aside, or pass --force to repack it",
        ) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("identity"), dict):
        raise SparkfleetError(
            f"{path}: not a sparkfleet engram receipt (no identity)",
            hint="move the directory aside, or pass --force to repack it",
        )
    try:
        files = {
            name: FileRecord(name, int(f["size"]), str(f["sha256"]), str(f["sample"]))
            for name, f in (doc.get("files") or {}).items()
        }
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SparkfleetError(
            f"{path}: unreadable engram receipt (bad files entry: {exc!r})",
            hint="move the directory aside, or pass --force to repack it",
        ) from None
    info = {k: v for k, v in doc.items() if k not in ("identity", "files")}
    stale = info.get("stale") or []
    named = [*files, *(stale if isinstance(stale, list) else [stale])]
    bad = [n for n in named if not isinstance(n, str) or not is_pack_name(n)]
    if bad:
        # A tampered receipt or journal must never make the packer delete or trust another path.
        raise SparkfleetError(
            f"{path}: names {bad[0]!r}, which is not a pack file of this directory",
            hint="the receipt was tampered with or is not ours: move the directory aside, or pass --force",
        )
    return Receipt(path, doc["identity"], files, info)


def write(path: Path, identity: dict[str, Any], files: dict[str, FileRecord], info: dict[str, Any]) -> None:
    doc = {**info, "identity": identity, "files": {n: files[n].to_dict() for n in sorted(files)}}
    atomic.write_bytes(path, (json.dumps(doc, indent=2, sort_keys=False) + "\n").encode())


def differences(want: dict[str, Any], have: dict[str, Any], prefix: str = "") -> list[str]:
    """Key paths where two identities differ, with both values (for the refusal message)."""
    out: list[str] = []
    # Plain values first (world_size, rank, commit…): they explain the nested differences that follow.
    nested = (dict, list)
    for key in sorted(set(want) | set(have), key=lambda k: (isinstance(want.get(k), nested), str(k))):
        path = f"{prefix}.{key}" if prefix else str(key)
        a, b = want.get(key, "<absent>"), have.get(key, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            out += differences(a, b, path)
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                if isinstance(x, dict) and isinstance(y, dict):
                    out += differences(x, y, f"{path}[{i}]")
                elif x != y:
                    out.append(f"{path}[{i}]: wanted {x!r}, receipt has {y!r}")
        elif a != b:
            out.append(f"{path}: wanted {_short(a)}, receipt has {_short(b)}")
    return out


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."
