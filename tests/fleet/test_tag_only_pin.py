"""An oci pin whose publisher gives only a tag (the Aiden production image): unresolved, never padded."""

from __future__ import annotations

import tomllib
from pathlib import Path

from sparkfleet.fleet import edit as fleetedit
from sparkfleet.fleet import inventory

ROOT = Path(__file__).resolve().parents[2]


def test_tag_only_pin_is_unresolved_and_resolve_writes_its_digest():
    inv = inventory.load(ROOT)
    pin = inv.pins["aiden-production"]
    assert (pin.kind, pin.source, pin.tag, pin.value, pin.resolved) == (
        "oci", "aidendle94/sparkrun-sglang-dsv41-gb10", "production-1.2", "", False
    )  # fmt: skip
    digest = "sha256:" + "ab" * 32
    text = fleetedit.set_pin_fields((ROOT / "hosts" / "fleet.toml").read_text(),
                                    fleetedit.PinEdit("aiden-production", {"digest": digest}))  # fmt: skip
    assert tomllib.loads(text)["pins"]["aiden-production"]["digest"] == digest
