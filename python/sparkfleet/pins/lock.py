"""Import the EXL3 kit's recipe-lock.json: full commits and the image digest for the fleet's pins.

coolbho3k/DeepSeek-v4.1-Flash-2x-DGX-Spark ships `recipe-lock.json` (format
`ds41_public_recipe_lock_v2`): `model` and `draft` (and, in later revisions, other repos) as
{repo, revision, manifest_sha256}, `runtime.image` as image@sha256:digest, and the runtime's
files with sha256 and size. Importing it at the kit revision the fleet pins turns pins that
said `main` into the exact commits the kit was tested with.

Matching is by source, never by our pin names: an hf pin whose repo is the lock's repo takes its
revision, an oci pin whose image is the lock's image takes its digest. A pin that already
records something else (a different full commit or digest, or a prefix the lock does not
extend) is drift: the import refuses and writes nothing. Lock entries that no pin names, and
the runtime files (the lock gives no URL to fetch them from), are reported, not invented.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..fleet import edit as fleetedit
from ..fleet.inventory import FLEET_FILE, Inventory, Pin, validate
from .common import PinError

LOCK_FORMATS = ("ds41_public_recipe_lock_v2",)
_HEX40 = re.compile(r"[0-9a-f]{40}")
_IMAGE = re.compile(r"(?P<image>[a-z0-9._/:-]+?)@(?P<digest>sha256:[0-9a-f]{64})")


@dataclass(frozen=True)
class LockEntry:
    """One pinned thing the lock names: an HF repo at a commit, or an image at a digest."""

    key: str  # where in the lock: "model", "draft", "runtime.image", ...
    kind: str  # "hf" | "oci"
    source: str  # repo or image name
    value: str  # commit or digest


@dataclass(frozen=True)
class LockImport:
    lock: Path
    from_pin: str
    at: str | None
    updated: dict[str, dict[str, str]]  # pin -> fields set
    unchanged: tuple[str, ...]
    unmatched: tuple[str, ...]  # lock entries no pin names
    not_imported: tuple[str, ...]  # lock facts with no pin kind (runtime files without a URL)
    written: bool = False


def _err(path: Path, key: str, why: str) -> PinError:
    return PinError(f"{path}: {key}: {why}", hint="is this the kit's recipe-lock.json?")


def _object(path: Path, key: str, value: Any) -> dict[str, Any]:
    """`value` if it is a JSON object; absent (null) reads as empty; anything else is refused."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _err(path, key, f"expected an object, got {type(value).__name__} {value!r:.60}")
    return value


def _typed(path: Path, key: str, value: Any, kind: type, what: str) -> Any:
    if not isinstance(value, kind) or isinstance(value, bool):
        raise _err(path, key, f"expected {what}, got {type(value).__name__} {value!r:.60}")
    return value


def parse_lock(path: Path) -> tuple[list[LockEntry], list[str]]:
    """Entries the lock pins, and the facts it holds that no pin kind can carry.

    Every value is type-checked before use: a lock of the wrong shape is a PinError naming its
    key, never a traceback (the lock comes from a kit we do not control).
    """
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise PinError(f"{path}: no such file") from None
    except (ValueError, RecursionError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise PinError(f"{path}: not valid JSON: {why}") from None
    if not isinstance(doc, dict):
        raise _err(path, "(top level)", "expected an object")
    if doc.get("format") not in LOCK_FORMATS:
        raise _err(path, "format", f"{doc.get('format')!r:.60} is not one of {', '.join(LOCK_FORMATS)}")
    entries: list[LockEntry] = []
    for key, value in sorted(doc.items()):
        if isinstance(value, dict) and "repo" in value:
            repo = _typed(path, f"{key}.repo", value["repo"], str, "a repo name (a string)")
            rev = value.get("revision")
            if not isinstance(rev, str) or not _HEX40.fullmatch(rev):
                raise _err(path, f"{key}.revision", f"expected a full 40-hex commit, got {rev!r:.60}")
            entries.append(LockEntry(key, "hf", repo, rev))
    runtime = _object(path, "runtime", doc.get("runtime"))
    facts: list[str] = []
    if "image" in runtime:
        image = runtime["image"]
        m = _IMAGE.fullmatch(image) if isinstance(image, str) else None
        if m is None:
            raise _err(path, "runtime.image", f"expected image@sha256:<64 hex>, got {image!r:.80}")
        entries.append(LockEntry("runtime.image", "oci", m.group("image"), m.group("digest")))
    for name, f in sorted(_object(path, "runtime.files", runtime.get("files")).items()):
        key = f"runtime.files.{name}"
        f = _typed(path, key, f, dict, "an object {sha256, bytes}")
        sha = _typed(path, f"{key}.sha256", f.get("sha256"), str, "a sha256 (a string)")
        size = _typed(path, f"{key}.bytes", f.get("bytes"), int, "a size in bytes (an integer)")
        facts.append(f"{key}: sha256 {sha} ({size} bytes), no URL in the lock")
    return entries, facts


def _matches(pin: Pin, entry: LockEntry) -> bool:
    return pin.kind == entry.kind and pin.source == entry.source


def _check_agrees(pin: Pin, entry: LockEntry, lock: Path) -> bool:
    """True if the pin already says exactly this; raise if it says something else."""
    if pin.value == entry.value:
        return True
    recorded = pin.value.removeprefix("sha256:")
    wanted = entry.value.removeprefix("sha256:")
    is_prefix = re.fullmatch(r"[0-9a-f]+", recorded) is not None
    if pin.resolved or (is_prefix and not wanted.startswith(recorded)):
        raise PinError(
            f"pin {pin.name} records {pin.value}, but {lock} ({entry.key}) says {entry.value}",
            hint="the kit moved, or the lock is from another revision: check --from/--at, then fix the pin",
        )
    return False  # a ref name (`main`) or a prefix the lock extends: take the lock's value


def import_lock(
    inv: Inventory, lock: Path, *, from_pin: str, at: str | None = None, dry_run: bool = False
) -> LockImport:
    """Write the lock's commits/digests into the pins that name the same sources (one atomic edit)."""
    kit = inv.pins.get(from_pin)
    if kit is None or kit.kind != "git":
        raise PinError(f"{from_pin!r} is not a git pin", hint="--from names the kit's git pin")
    if at is not None and (not _HEX40.fullmatch(at) or not at.startswith(kit.value)):
        raise PinError(
            f"--at {at} is not a full commit extending pin {from_pin} ({kit.value})",
            hint="the lock must come from the kit revision the fleet pins",
        )
    entries, facts = parse_lock(lock)
    updated: dict[str, dict[str, str]] = {}
    unchanged: list[str] = []
    unmatched: list[str] = []
    where = f"{kit.source} {lock.name} at {at or kit.value}"
    for entry in entries:
        pins = [p for p in inv.pins.values() if _matches(p, entry)]
        if not pins:
            unmatched.append(f"{entry.key}: {entry.source}@{entry.value}")
        for pin in pins:
            if _check_agrees(pin, entry, lock):
                unchanged.append(pin.name)
            else:
                field = "revision" if pin.kind == "hf" else "digest"
                updated[pin.name] = {field: entry.value, "note": f"{entry.key} of {where}"}
    if at is not None and kit.value != at:
        updated[from_pin] = {"rev": at}
    path = inv.root / FLEET_FILE
    written = False
    if updated:
        edits = [fleetedit.PinEdit(name, values) for name, values in updated.items()]
        before = path.read_text()
        after = before
        for edit in edits:
            after = fleetedit.set_pin_fields(after, edit)
        validate(fleetedit.check_edit(before, after, edits, {}), "fleet", path)
        if not dry_run:
            written = fleetedit.write(path, after)
    return LockImport(lock, from_pin, at, updated, tuple(unchanged), tuple(unmatched), tuple(facts), written)
