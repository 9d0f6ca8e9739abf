"""The loop shared by every kind: select pins, ask each source, write what changed back once."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ..fleet import edit as fleetedit
from ..fleet.inventory import FLEET_FILE, Inventory, Pin, validate
from .common import Endpoints, PinError, PinReport, PinState, pin_state
from .git import resolve_git
from .hf import resolve_hf
from .oci import resolve_oci
from .url import resolve_url


def ask_source(
    pin: Pin, endpoints: Endpoints, *, with_nix_hash: bool = True, flake_root: Path | None = None
) -> PinState:
    """What the pin's source says now (status resolved / drift / unresolved / unreachable)."""
    if pin.kind == "git":
        return resolve_git(pin, endpoints, with_nix_hash=with_nix_hash)
    if pin.kind == "oci":
        return resolve_oci(pin, endpoints, with_nix_hash=with_nix_hash, flake_root=flake_root)
    if pin.kind == "hf":
        return resolve_hf(pin, endpoints)
    if pin.kind == "url":
        return resolve_url(pin)
    raise AssertionError(f"unknown pin kind {pin.kind}")


def select(inv: Inventory, names: Iterable[str]) -> list[Pin]:
    names = list(names)
    unknown = [n for n in names if n not in inv.pins]
    if unknown:
        raise PinError(
            f"unknown pin(s): {', '.join(unknown)}", hint=f"pins are declared in {inv.root / FLEET_FILE}"
        )
    return [inv.pins[n] for n in (names or sorted(inv.pins))]


def _edits(states: Iterable[PinState]) -> list[fleetedit.PinEdit]:
    field_of = {"hf": "revision", "git": "rev", "oci": "digest", "url": "sha256"}
    edits = []
    for s in states:
        values: dict[str, str] = {}
        if s.status == "resolved" and s.current and s.current != s.recorded:
            values[field_of[s.kind]] = s.current
        if s.status == "resolved" and s.kind != "url" and s.nix_hash and s.nix_hash != s.recorded_nix_hash:
            values["nix_hash"] = s.nix_hash
        if values:
            edits.append(fleetedit.PinEdit(s.name, values))
    return edits


def _complete(pin: Pin, with_nix_hash: bool) -> bool:
    """Nothing left to resolve: a full identifier, and the Nix hash where Nix fetches it."""
    needs_nix_hash = with_nix_hash and pin.kind in ("git", "oci")
    return pin.resolved and (pin.nix_hash is not None or not needs_nix_hash)


def resolve(
    inv: Inventory,
    names: Iterable[str] = (),
    *,
    endpoints: Endpoints,
    dry_run: bool = False,
    with_nix_hash: bool = True,
) -> PinReport:
    """Fill in full identifiers (and Nix hashes) where the sources can be asked; write fleet.toml once."""
    states = [
        pin_state(p, "unchanged", detail="already resolved (`sparkfleet pins verify` re-checks it)")
        if _complete(p, with_nix_hash)
        else ask_source(p, endpoints, with_nix_hash=with_nix_hash, flake_root=inv.root)
        for p in select(inv, names)
    ]
    edits = _edits(states)
    states = [
        s
        if s.status != "resolved" or any(e.pin == s.name for e in edits)
        else PinState(**{**vars(s), "status": "unchanged"})
        for s in states
    ]
    path = inv.root / FLEET_FILE
    written = False
    if edits and not dry_run:
        before = path.read_text()
        after = before
        for edit in edits:
            after = fleetedit.set_pin_fields(after, edit)
        validate(fleetedit.check_edit(before, after, edits, {}), "fleet", path)
        written = fleetedit.write(path, after)
    return PinReport("resolve", path, tuple(states), written)


def verify(inv: Inventory, names: Iterable[str] = (), *, endpoints: Endpoints) -> PinReport:
    """Confirm every selected pin against its source; anything short of a positive match fails."""
    out = []
    for pin in select(inv, names):
        if not pin.resolved:
            out.append(
                pin_state(
                    pin, "unresolved", detail=f"recorded in part; run `sparkfleet pins resolve {pin.name}`"
                )
            )
            continue
        # git: the narHash is re-derived from the archive. oci: pullImage's hash needs the image pulled;
        # Nix itself rejects a wrong one at fetch time, so verify checks the digest only.
        state = ask_source(pin, endpoints, with_nix_hash=pin.kind == "git" and pin.nix_hash is not None)
        if state.status != "resolved":
            out.append(state)
        elif state.current != pin.value:
            out.append(
                PinState(**{**vars(state), "status": "drift", "detail": f"source now says {state.current}"})
            )
        elif pin.kind == "git" and pin.nix_hash and state.nix_hash != pin.nix_hash:
            out.append(
                PinState(
                    **{
                        **vars(state),
                        "status": "drift",
                        "detail": f"nix hash is {state.nix_hash}, recorded {pin.nix_hash}",
                    }
                )
            )
        else:
            out.append(PinState(**{**vars(state), "status": "ok"}))
    return PinReport("verify", inv.root / FLEET_FILE, tuple(out))
