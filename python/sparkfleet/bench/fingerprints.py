"""Host fingerprints for a bench report: {host: HostFingerprint.to_dict()} for every lane host.

The collector itself (`sparkfleet.hoststack.collect_fingerprint`, over ssh) is passed in, so the
bench never looks hosts up again and tests can hand in their own. A host that cannot be
fingerprinted is recorded with its error instead of stopping the bench; `report compare` treats
such an entry as unknown, never as "the same". A fingerprint with no fact at all (every tool
missing, or the host unreachable: the collector reads a failed command as "no tool") is such an
entry too — two unreachable hosts must not compare as two identical stacks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def fingerprint_hosts(hosts: Sequence[str], collect_one: Callable[[str], Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for host in hosts:
        try:
            fp = collect_one(host)
            facts = fp.to_dict() if hasattr(fp, "to_dict") else dict(fp)
        except Exception as exc:  # noqa: BLE001 - any failure on one host is recorded, the run goes on
            out[host] = {"host": host, "error": f"{type(exc).__name__}: {exc}"}
            continue
        if all(v is None for k, v in facts.items() if k != "host"):
            facts = {**facts, "error": "no stack fact could be read (host unreachable, or no tools)"}
        out[host] = facts
    return out
