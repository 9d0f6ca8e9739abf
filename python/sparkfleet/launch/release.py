"""`release cut LANE NAME`: a promoted generation frozen under a name.

A cut takes a generation that `promote` marked good and freezes it as
`recipes/<lane>/releases/<NAME>.json`. The file holds the image digest, the pins, the recipe's hash
and text, the fingerprints and the promotion's passing reports. The same digest is tagged `NAME` in
the registry. The record is created exclusively (a link that fails if the name exists) and is
read-only, so a release is never overwritten. Cutting a generation that was never promoted is
refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import Any

from ..base.atomic import ensure_dir, temp_name
from ..base.errors import ExitCode, SparkfleetError
from ..fleet.inventory import RECIPES_DIR
from ..images.push import repo_of
from ..images.record import PUSH_KEYS, read_push_record, registry_trust_dir
from ..images.registry import Registry, check_digest, tag, verify_tag
from ..images.registry_host import split_address
from .generation_check import GENERATION_ID
from .generations import load_strict

RELEASES = "releases"
NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")


def releases_dir(root: Path, lane: str) -> Path:
    return root / RECIPES_DIR / lane / RELEASES


def load_release(root: Path, lane: str, name: str) -> dict[str, Any]:
    """Release NAME's record, every field a use of it reads checked (refused, naming the file)."""
    if not NAME.fullmatch(name):
        raise SparkfleetError(f"release name {name[:80]!r} is not a name", hint="e.g. r39 (a-z, 0-9, . _ -)")
    path = releases_dir(root, lane) / f"{name}.json"
    try:
        rel = json.loads(path.read_text())
    except FileNotFoundError:
        raise SparkfleetError(f"lane {lane} has no release {name!r}",
                              hint=f"`sparkfleet release cut {lane} {name} --registry HOST:PORT` "
                                   "(or with $SPARKFLEET_REGISTRY set)") from None  # fmt: skip
    except (OSError, ValueError, RecursionError) as exc:
        rel = exc
    why = release_problem(rel, lane, name)
    if why:
        raise SparkfleetError(f"{path}: not a release record sparkfleet cut: {why}",
                              hint="releases are read-only and committed: `git diff` or `git log` the file",
                              exit_code=ExitCode.REFUSED)  # fmt: skip
    return rel


def release_problem(rel: Any, lane: str, name: str) -> str | None:
    """What is wrong with a release record of `lane` named `name`, or None."""
    if isinstance(rel, BaseException):
        return f"unreadable ({type(rel).__name__})"
    if not isinstance(rel, dict):
        return f"a JSON {type(rel).__name__}, not an object"
    if rel.get("name") != name or rel.get("lane") != lane:
        return f"it names release {str(rel.get('name'))[:40]!r} of lane {str(rel.get('lane'))[:40]!r}"
    if not isinstance(rel.get("generation"), str) or not GENERATION_ID.fullmatch(rel["generation"]):
        return "generation is not a generation id"
    for key in ("recipe_text", "recipe_sha256", "fleet_text"):
        if not isinstance(rel.get(key), str):
            return f"{key} is not text"
    if hashlib.sha256(rel["recipe_text"].encode()).hexdigest() != rel["recipe_sha256"]:
        return "recipe_sha256 does not match recipe_text"
    img = rel.get("image")
    if not isinstance(img, dict) or not all(isinstance(img.get(k), str) for k in PUSH_KEYS):
        return f"image is not an object of text {', '.join(PUSH_KEYS)}"
    try:
        split_address(img["registry"], "image.registry")
        check_digest(img["digest"])
        check_digest(img["image_id"])
    except SparkfleetError as exc:
        return exc.message
    if img["repo"] != repo_of(lane):
        return f"image.repo {img['repo'][:80]!r} is not {repo_of(lane)}"
    return None


def verified_release(root: Path, lane: str, name: str) -> dict[str, Any]:
    """Release NAME, checked against the registry on every use: its tag still names the recorded
    digest, and that manifest's config is the recorded image ID, where the hosts pull.

    Why on every use: a record in git can be edited, and a tag can be moved by whoever holds the
    push login; a launch or rollback runs exactly what the cut froze, or refuses saying which part
    disagrees.
    """
    rel = load_release(root, lane, name)
    img = rel["image"]
    reg = Registry(img["registry"], registry_trust_dir())
    try:
        verify_tag(reg, img["repo"], name, img["digest"], img["image_id"])
    except SparkfleetError as exc:
        raise SparkfleetError(
            f"release {name} of {lane} could not be verified: {exc.message}", hint=exc.hint,
            exit_code=ExitCode.REFUSED,
        ) from None  # fmt: skip
    return rel


def _generation(root: Path, lane: str, generation: str | None) -> dict[str, Any]:
    """The generation to freeze; a record that is not a valid generation refuses, naming it (a
    release acts on what it reads, as promote and rollback do)."""
    gens = load_strict(root, lane)
    if generation:
        gen = next((g for g in gens if g["id"] == generation), None)
        if gen is None:
            raise SparkfleetError(
                f"lane {lane} has no generation {generation}", hint=f"sparkfleet history {lane}"
            )
    else:
        good = [g for g in gens if g.get("good")]
        gen = good[-1] if good else (gens[-1] if gens else None)
        if gen is None:
            raise SparkfleetError(f"lane {lane} has no generation", hint=f"sparkfleet launch {lane}",
                                  exit_code=ExitCode.REFUSED)  # fmt: skip
    if not gen.get("good"):
        raise SparkfleetError(
            f"generation {gen['id']} of {lane} was never promoted: only a promoted generation is cut",
            hint=f"sparkfleet bench {lane}, then sparkfleet promote {lane}",
            exit_code=ExitCode.REFUSED,
        )
    return gen


def _create_exclusive(path: Path, data: bytes) -> None:
    """Write a file that must not exist yet: temp + fsync + link (fails on an existing name)."""
    ensure_dir(path.parent)
    tmp = temp_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise SparkfleetError(f"release {path.stem} already exists ({path})",
                              hint="a release is never overwritten: cut a new NAME",
                              exit_code=ExitCode.REFUSED) from None  # fmt: skip
    finally:
        os.unlink(tmp)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def cut(root: Path, lane: str, name: str, reg: Registry, generation: str | None = None) -> dict[str, Any]:
    """Freeze the lane's promoted generation (newest good one, or `generation`) as release NAME."""
    if not NAME.fullmatch(name):
        raise SparkfleetError(f"release name {name!r} is not a name", hint="e.g. r39 (a-z, 0-9, . _ -)")
    path = releases_dir(root, lane) / f"{name}.json"
    if path.exists():
        raise SparkfleetError(f"release {name} of {lane} already exists ({path})",
                              hint="a release is never overwritten: cut a new NAME",
                              exit_code=ExitCode.REFUSED)  # fmt: skip
    gen = _generation(root, lane, generation)
    pushed = read_push_record(lane)
    if pushed is None:
        raise SparkfleetError(
            f"lane {lane}: no image pushed to the registry",
            hint=f"`sparkfleet image push {lane} --registry HOST:PORT` (or with $SPARKFLEET_REGISTRY set)",
        )
    ran = {i for i in (gen.get("image_ids") or {}).values() if i}
    if ran and pushed["image_id"] not in ran:
        raise SparkfleetError(
            f"the pushed image {pushed['image_id']} is not the one generation {gen['id']} ran "
            f"({', '.join(sorted(ran))})",
            hint=f"push the build that generation ran: "
            f"`sparkfleet image push {lane} --image RESULT --registry HOST:PORT`",
            exit_code=ExitCode.REFUSED,
        )
    promotion = gen.get("promotion") or {}
    release = {
        "name": name,
        "lane": lane,
        "cut_at": time.time(),
        "generation": gen["id"],
        "image": {k: pushed[k] for k in PUSH_KEYS},
        "pins": gen.get("pins"),
        "recipe_sha256": gen.get("recipe_sha256"),
        "recipe_text": gen.get("recipe_text"),
        "fleet_text": gen.get("fleet_text"),
        "fingerprints": gen.get("fingerprints"),
        "reports": {
            "bench": promotion.get("bench_report"),
            "gate": promotion.get("gate"),
            "smoke": promotion.get("smoke"),
        },  # fmt: skip
    }
    tag(reg, pushed["repo"], pushed["digest"], name)  # refuses to move an existing tag
    _create_exclusive(path, json.dumps(release, indent=1, sort_keys=True).encode())
    return release
