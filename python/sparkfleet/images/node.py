"""The node side of `image load`: which image ID this host holds for a lane, and recording a new one.

Runs inside `sparkfleet agent` on the host. The record, `<state_dir>/images/<lane>.json`, names
the ID loaded last and the one before it; both stay tagged in the engine
(`sparkfleet/<lane>:current`, `sparkfleet/<lane>:previous`) so neither is pruned as dangling and a
rollback needs no rebuild. Kept free of the inventory/TOML stack: the agent must start fast.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from ..base.atomic import write_bytes
from ..base.errors import ExitCode, SparkfleetError
from .archive import normalize_id
from .requests import ImageCommitRequest, ImagePullRequest, ImageStateRequest

ENGINES = ("docker", "podman")


def record_path(state_dir: str | Path, lane: str) -> Path:
    return Path(state_dir) / "images" / f"{lane}.json"


def read_record(state_dir: str | Path, lane: str) -> dict[str, Any] | None:
    try:
        doc = json.loads(record_path(state_dir, lane).read_text())
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise SparkfleetError(f"{record_path(state_dir, lane)}: not valid JSON ({exc})") from None
    return doc if isinstance(doc, dict) else None


def _engine(name: str) -> str:
    if name not in ENGINES:
        raise SparkfleetError(f"unknown engine {name!r}", hint="docker or podman")
    path = shutil.which(name)
    if path is None:
        raise SparkfleetError(f"{name} is not installed on this host", hint=f"install {name} first")
    return path


def engine_image_id(engine: str, ref: str) -> str | None:
    """The full ID the engine gives `ref` (an ID or a tag), or None if it has no such image."""
    cp = subprocess.run(
        [_engine(engine), "image", "inspect", "--format", "{{.Id}}", ref],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return normalize_id(cp.stdout.splitlines()[0]) if cp.returncode == 0 and cp.stdout.strip() else None


def tag_of(lane: str, which: str) -> str:
    return f"sparkfleet/{lane}:{which}"


def image_state(req: ImageStateRequest) -> dict:
    """This host's record for the lane and whether the engine still holds the recorded image.

    An image that came from the fleet registry is held only while the engine still lists its
    RepoDigest too (`repo_digest_present`): launch and doctor compare that digest as they compare
    the ID, and `image load` pulls it again (a no-op for the layers) where it went missing, e.g.
    after a `docker rmi REPO@DIGEST` or a `docker load` of the same ID, which carries no digest.
    """
    from .registry import repo_digests

    rec = read_record(req.state_dir, req.lane)
    engine = req.engine
    recorded = rec.get("image_id") if rec else None
    out: dict[str, Any] = {"record": rec, "recorded": recorded, "present": False}
    if recorded:
        out["present"] = engine_image_id(engine, recorded) == recorded
        digest = rec.get("repo_digest") if rec else None
        if digest and out["present"]:
            out["repo_digest_present"] = digest in repo_digests(_engine(engine), recorded)
            out["present"] = out["repo_digest_present"]
    if req.expect:
        out["expect_present"] = engine_image_id(engine, req.expect) == req.expect
    return out


def _tag(engine: str, image_id: str, tag: str) -> None:
    cp = subprocess.run(
        [_engine(engine), "tag", image_id, tag], capture_output=True, text=True, timeout=120,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    if cp.returncode != 0:
        raise SparkfleetError(f"{engine} tag {image_id} {tag} failed: {cp.stderr.strip()}")


def image_commit(req: ImageCommitRequest) -> dict:
    """Record that this host now holds `image_id` for the lane (after `engine load`), keeping the last.

    Refuses when the engine does not hold exactly that ID (a load that produced something else).
    """
    lane, engine, image_id = req.lane, req.engine, normalize_id(req.image_id)
    found = engine_image_id(engine, image_id)
    if found != image_id:
        raise SparkfleetError(
            f"{engine} on this host does not hold {image_id} after the load",
            hint="the archive loaded is not the build; rerun `sparkfleet image load LANE`",
            exit_code=ExitCode.REFUSED,
        )
    old = read_record(req.state_dir, lane) or {}
    previous = old.get("image_id") if old.get("image_id") != image_id else old.get("previous_image_id")
    if previous and engine_image_id(engine, previous) == previous:
        _tag(engine, previous, tag_of(lane, "previous"))
    _tag(engine, image_id, tag_of(lane, "current"))
    rec = {
        "lane": lane,
        "engine": engine,
        "image_id": image_id,
        "previous_image_id": previous,
        "source": req.source,
        "loaded_at": time.time(),
        # registry@sha256:... when it came by pull: what doctor and launch compare, and what a pull
        # of the same digest finds already here (a docker load would have lost it: sparkrun#152)
        "repo_digest": req.repo_digest,
    }
    write_bytes(record_path(req.state_dir, lane), (json.dumps(rec, indent=2) + "\n").encode())
    return {"record": rec}


def image_pull(req: ImagePullRequest) -> dict:
    """Pull `repo@digest` from the fleet registry into this host's engine (nothing if already held).

    The fleet CA is where bootstrap installs it: /etc/docker/certs.d/<registry>/ca.crt for docker,
    /etc/containers/certs.d/<registry>/ca.crt for podman (each engine's documented place).
    """
    from .registry import Registry, ensure_pulled

    reg = Registry(req.registry, Path(req.cert_dir or f"/etc/containers/certs.d/{req.registry}"))
    pulled = ensure_pulled(_engine(req.engine), reg, req.repo, req.digest)
    return {"pulled": pulled, "repo_digest": reg.ref(req.repo, digest=req.digest)}
