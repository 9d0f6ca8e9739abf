"""Import a runtime/sources.manifest: each url row becomes a `kind = "url"` pin in fleet.toml."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ..fleet import edit as fleetedit
from ..fleet.inventory import FLEET_FILE, Inventory, validate
from .common import HEX, PinError


@dataclass(frozen=True)
class ManifestRow:
    """One line of a runtime/sources.manifest: component, source commit, sha256 of the download, url."""

    component: str
    commit: str
    sha256: str
    url: str
    line: int

    @property
    def local(self) -> bool:
        """`local <path> <sha256> -`: a file kept in the repo itself, covered by the repo's git pin."""
        return self.component == "local"


@dataclass(frozen=True)
class ImportReport:
    manifest: Path
    from_pin: str
    added: tuple[str, ...]
    updated: tuple[str, ...]
    unchanged: tuple[str, ...]
    stale: tuple[str, ...]  # pins from this manifest that it no longer lists (left in place)
    local_files: tuple[ManifestRow, ...] = field(default=())
    written: bool = False


def parse_manifest(text: str, path: Path) -> list[ManifestRow]:
    """Rows of a sources.manifest: whitespace columns, `#` comments, `local <path> <sha256> -` rows."""
    rows = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        cols = line.split()
        if len(cols) != 4:
            raise PinError(
                f"{path}:{number}: expected 4 columns (component commit sha256 url), got {len(cols)}",
                hint="sources.manifest rows are `component source-commit sha256-of-download url`",
            )
        component, commit, sha, url = cols
        if not re.fullmatch(r"[0-9a-f]{64}|-", sha):
            raise PinError(f"{path}:{number}: {component}: sha256 column is not 64 hex digits: {sha!r}")
        if component != "local" and not re.match(r"^(https?|file)://", url):
            raise PinError(f"{path}:{number}: {component}: url column is not a URL: {url!r}")
        rows.append(ManifestRow(component, commit, sha, url, number))
    return rows


def component_pin_name(prefix: str, component: str) -> str:
    slug = re.sub(r"[^a-z0-9._-]+", "-", component.lower()).strip("-.") or "component"
    return f"{prefix}{slug}"[:63]


def import_manifest(
    inv: Inventory, manifest: Path, *, from_pin: str, prefix: str | None = None, dry_run: bool = False
) -> ImportReport:
    """Turn each url row into a `kind = "url"` pin (a fixed-output fetch for Nix); edit only what changed."""
    if from_pin not in inv.pins or inv.pins[from_pin].kind != "git":
        raise PinError(
            f"{from_pin!r} is not a git pin", hint="--from names the repo pin whose manifest this is"
        )
    try:
        rows = parse_manifest(manifest.read_text(), manifest)
    except FileNotFoundError:
        raise PinError(f"{manifest}: no such file") from None
    except UnicodeDecodeError as exc:  # a tarball or a binary named by mistake
        raise PinError(f"{manifest}: not a text file (byte {exc.start} is not UTF-8)") from None
    prefix = f"{from_pin}-src-" if prefix is None else prefix
    fleet_path = inv.root / FLEET_FILE
    before = fleet_path.read_text()
    raw_pins = tomllib.loads(before).get("pins", {})
    added: dict[str, dict[str, str]] = {}
    edits: list[fleetedit.PinEdit] = []
    unchanged, seen = [], set()
    for row in (r for r in rows if not r.local):
        name = component_pin_name(prefix, row.component)
        if name in seen:
            raise PinError(f"{manifest}:{row.line}: component {row.component!r} appears twice")
        seen.add(name)
        fields = {"kind": "url", "component": row.component, "url": row.url, "sha256": row.sha256}
        if HEX.fullmatch(row.commit) and 4 <= len(row.commit) <= 40:
            fields["commit"] = row.commit
        fields["manifest"] = from_pin
        existing = raw_pins.get(name)
        if existing is None:
            added[name] = fields
        elif existing.get("kind") != "url" or existing.get("manifest") != from_pin:
            raise PinError(
                f"pin {name} exists and is not from {from_pin}'s manifest", hint="pass another --prefix"
            )
        else:
            changed = {k: v for k, v in fields.items() if existing.get(k) != v}
            if changed:
                edits.append(fleetedit.PinEdit(name, changed))
            else:
                unchanged.append(name)
    stale = sorted(
        n
        for n, d in raw_pins.items()
        if d.get("kind") == "url" and d.get("manifest") == from_pin and n not in seen
    )
    after = before
    for edit in edits:
        after = fleetedit.set_pin_fields(after, edit)
    after = fleetedit.append_pins(after, f"runtime sources from {from_pin}'s runtime/sources.manifest", added)
    written = False
    if after != before:
        validate(fleetedit.check_edit(before, after, edits, added), "fleet", fleet_path)
        if not dry_run:
            written = fleetedit.write(fleet_path, after)
    return ImportReport(
        manifest=manifest,
        from_pin=from_pin,
        added=tuple(added),
        updated=tuple(e.pin for e in edits),
        unchanged=tuple(unchanged),
        stale=tuple(stale),
        local_files=tuple(r for r in rows if r.local),
        written=written,
    )
