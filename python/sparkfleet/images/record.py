"""The operator's image records: where they live, and which build a lane last loaded.

Launch's plan (built image ID, a dry run's image note), doctor and `image load`/`push`/`release`
all read these records, without the loading machinery that talks to hosts.
Records live in the operator's state directory (never the fleet root: under `nix run` that is a
read-only store path) and are written atomically by their writers.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Protocol

from ..base.errors import ExitCode, SparkfleetError
from ..base.paths import operator_state_dir

CONTAINER_ENGINES = ("docker", "podman")


class LaneImage(Protocol):
    """What images/ knows of a lane: its name, the engine that runs its image and the flake package
    the image is built from. A launch recipe is one (it has these three fields); images/ never
    reads a recipe itself, so the data flows down: launch/ and the CLI hand these facts over.
    """

    @property
    def lane(self) -> str: ...

    @property
    def runtime(self) -> str: ...

    @property
    def image_build(self) -> str | None: ...


TRUST_ENV = "SPARKFLEET_REGISTRY_CERTS"


def registry_trust_dir() -> Path:
    """Where the operator's side finds the fleet CA: $SPARKFLEET_REGISTRY_CERTS, else the
    `registry/ca/` that `registry init` made (its `ca.key` beside `ca.crt` is left out of every
    TLS handshake: images/registry.ca_only)."""
    return Path(os.environ.get(TRUST_ENV) or operator_state_dir() / "registry" / "ca")


def operator_record_path(lane: str) -> Path:
    return operator_state_dir() / "images" / f"{lane}.json"


def push_record_path(lane: str) -> Path:
    """`image push`'s record: which registry digest carries which built image ID."""
    return operator_state_dir() / "registry" / f"{lane}.json"


PUSH_KEYS = ("registry", "repo", "digest", "image_id")
_SHA256 = re.compile(r"sha256:[0-9a-f]{64}")


def read_push_record(lane: str) -> dict[str, Any] | None:
    """`image push`'s record of the lane, every field its readers use checked (refused, naming it)."""
    path = push_record_path(lane)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (ValueError, RecursionError) as exc:
        raise SparkfleetError(f"{path}: not JSON ({type(exc).__name__})", hint="push again") from None
    if not isinstance(doc, dict) or not all(isinstance(doc.get(k), str) for k in PUSH_KEYS):
        why = f"not a push record ({', '.join(PUSH_KEYS)} as text)"
        raise SparkfleetError(f"{path}: {why}", hint="push again")
    for key in ("digest", "image_id"):
        if not _SHA256.fullmatch(doc[key]):
            raise SparkfleetError(f"{path}: {key} is not a sha256 digest", hint="push again")
    return doc


def read_operator_record(lane: str) -> dict[str, Any] | None:
    path = operator_record_path(lane)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (ValueError, RecursionError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise SparkfleetError(
            f"{path}: not valid JSON ({why})", hint="remove it and rerun image load"
        ) from None
    if not isinstance(doc, dict):
        return None
    # every part a reader takes apart is type-checked here, once, naming the key
    for key in ("build", "previous_build", "hosts"):
        if doc.get(key) is not None and not isinstance(doc[key], dict):
            raise SparkfleetError(
                f"{path}: {key}: expected an object, got {type(doc[key]).__name__}",
                hint="remove it and rerun image load",
            )
    image_id = (doc.get("build") or {}).get("image_id")
    if image_id is not None and not isinstance(image_id, str):
        raise SparkfleetError(
            f"{path}: build.image_id: expected a string", hint="remove it and rerun image load"
        )
    return doc


def built_image_id(recipe: LaneImage) -> str:
    """The ID of the lane's last loaded build; refuses when the lane's image was never loaded."""
    rec = read_operator_record(recipe.lane)
    image_id = ((rec or {}).get("build") or {}).get("image_id")
    if not image_id:
        raise SparkfleetError(
            f"lane {recipe.lane}: no build of {recipe.image_build} has been loaded "
            f"(no {operator_record_path(recipe.lane)})",
            hint=f"nix build .#{recipe.image_build} && sparkfleet image load {recipe.lane}",
            exit_code=ExitCode.REFUSED,
        )
    return image_id


def host_span(names: list[str]) -> str:
    """`dgx1..dgx4` for consecutive numbered names with one prefix, else the names comma-separated."""
    parts = [re.fullmatch(r"(.*?)(\d+)", n) for n in names]
    if len(names) > 2 and all(parts):
        prefixes = {m.group(1) for m in parts if m}
        nums = [int(m.group(2)) for m in parts if m]
        if len(prefixes) == 1 and nums == list(range(nums[0], nums[0] + len(nums))):
            return f"{names[0]}..{names[-1]}"
    return ", ".join(names)


def planned_image(recipe: LaneImage, hosts: list[str]) -> tuple[str, str]:
    """For a dry run (no host contacted): the image reference a rank would run and what the
    operator's record says about it: `mia-tp4-image (not loaded on dgx1..dgx4)` before any
    `image load`, else the build's ID and the hosts the record does not show holding it."""
    rec = read_operator_record(recipe.lane) or {}
    built = (rec.get("build") or {}).get("image_id")
    held = rec.get("hosts") or {}
    missing = [h for h in hosts if not built or (held.get(h) or {}).get("image_id") != built]
    if not built:
        return (
            f"<{recipe.image_build}: not loaded>",
            f"{recipe.image_build} (not loaded on {host_span(hosts)})",
        )
    where = f"; not loaded on {host_span(missing)}" if missing else f"; loaded on {host_span(hosts)}"
    return (
        built,
        f"{recipe.image_build} {built} (last `sparkfleet image load`{where}, per the operator record)",
    )
