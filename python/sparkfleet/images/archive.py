"""The image ID of a docker-archive, read from the archive itself (or a Nix stream script's output).

A docker-archive (`docker save`, nixpkgs' streamLayeredImage) is a tar with `manifest.json`
naming the config blob; the image ID engines report is `sha256:` + the sha256 of that config's
bytes. Reading it from the archive gives "the build's ID" without asking any engine. The stream
is read once, front to back (tar stream mode): only small JSON members are kept in memory.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import subprocess
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ..base.errors import SparkfleetError

_SMALL = 4 * 1024 * 1024  # configs and manifest.json are a few KiB; layers are never kept
# All JSON members kept together: an archive of many near-cap JSON members must not fill memory.
_SMALL_TOTAL = 16 * 1024 * 1024


class ArchiveError(SparkfleetError):
    """The image source is not a docker-archive or a stream script that prints one."""


@dataclass(frozen=True)
class BuildImage:
    """What the operator built: where it is, how it is read, and the ID an engine will give it."""

    source: str
    kind: str  # "stream" (an executable that prints the archive, like ./result) | "archive" (a tar)
    image_id: str  # sha256:<hex of the config blob>
    repo_tags: tuple[str, ...]


def source_kind(path: Path) -> str:
    """ "archive" for a tar file, "stream" for an executable script that prints one."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(512)
    except FileNotFoundError:
        raise ArchiveError(
            f"{path}: no such file",
            hint="build it first (`nix build .#mia-tp4-image` makes ./result), or pass --image PATH",
        ) from None
    except IsADirectoryError:
        raise ArchiveError(f"{path}: is a directory, not an image archive or stream script") from None
    if len(head) >= 262 and head[257:262] == b"ustar":
        return "archive"
    if head.startswith(b"#!") and os.access(path, os.X_OK):
        return "stream"
    raise ArchiveError(
        f"{path}: neither a docker-archive tar nor an executable stream script",
        hint="pass the `nix build` result (a stream script) or a `docker save` tar",
    )


@contextmanager
def open_stream(path: Path, kind: str) -> Iterator[IO[bytes]]:
    """The archive's bytes: the file itself, or the stdout of the stream script (checked on exit)."""
    if kind == "archive":
        with open(path, "rb") as fh:
            yield fh
        return
    proc = subprocess.Popen(
        [str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    assert proc.stdout is not None
    try:
        yield proc.stdout
    finally:
        proc.stdout.close()
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        if proc.stderr:
            proc.stderr.close()
        rc = proc.wait()
        # The script's own failure is the cause of whatever the reader saw (an empty or cut tar).
        # -13: SIGPIPE when the reader stopped early on purpose.
        if rc not in (0, -13):
            raise ArchiveError(  # noqa: B012
                f"{path} exited {rc}: {err.strip()[-300:]}",
                hint="is the Nix store path it streams from still there? rebuild with `nix build`",
            )


def member_name(name: str) -> str:
    """A member's name inside the archive ("./a/b.json" -> "a/b.json"); refuses one that leaves it.

    `str.lstrip("./")` read `../../cfg.json` as `cfg.json`; an absolute name or a `..` component
    is refused instead, as `docker load` itself would.
    """
    norm = posixpath.normpath(name) if name else ""
    if not name or name.startswith("/") or norm == ".." or norm.startswith("../") or "\0" in name:
        raise ArchiveError(f"archive member {name!r:.200}: a path outside the archive")
    return norm


def _keep_small(path: Path, tar: tarfile.TarFile) -> dict[str, bytes]:
    """Every small JSON member's bytes by its normalised name (each and all together capped)."""
    small: dict[str, bytes] = {}
    total = 0
    for member in tar:
        name = member_name(member.name)
        if not (member.isfile() and name.endswith(".json") and member.size <= _SMALL):
            continue
        if name in small:
            raise ArchiveError(f"{path}: archive member {name} appears twice: which one is meant?")
        total += member.size
        if total > _SMALL_TOTAL:
            raise ArchiveError(
                f"{path}: archive member {name}: the JSON members add up to more than "
                f"{_SMALL_TOTAL >> 20} MiB (a docker-archive's are a few KiB)"
            )
        fh = tar.extractfile(member)
        if fh is not None:
            small[name] = fh.read()
    return small


def _json(path: Path, name: str, data: bytes) -> Any:
    try:
        return json.loads(data)
    except RecursionError:
        raise ArchiveError(f"{path}: archive member {name}: JSON nested too deeply") from None
    except ValueError as exc:
        raise ArchiveError(f"{path}: archive member {name}: not valid JSON ({exc})") from None


def _manifest_entry(path: Path, small: dict[str, bytes]) -> tuple[str, tuple[str, ...]]:
    """The first image of manifest.json: its config member's name and its tags, type-checked."""
    if "manifest.json" not in small:
        raise ArchiveError(
            f"{path}: no manifest.json naming a config blob: not a docker-archive",
            hint="an OCI layout is not a docker-archive; use `docker save` or the Nix stream script",
        )
    manifest = _json(path, "manifest.json", small["manifest.json"])
    where = f"{path}: archive member manifest.json"
    if not isinstance(manifest, list) or not manifest or not isinstance(manifest[0], dict):
        raise ArchiveError(f"{where}: expected a list of image objects, got {manifest!r:.80}")
    entry = manifest[0]
    config = entry.get("Config")
    if not isinstance(config, str) or not config:
        raise ArchiveError(f"{where}: [0].Config: expected a member name, got {config!r:.80}")
    tags = entry.get("RepoTags")
    if tags is None:
        tags = []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise ArchiveError(f"{where}: [0].RepoTags: expected a list of strings, got {tags!r:.80}")
    return member_name(config), tuple(tags)


def inspect_build(path: Path) -> BuildImage:
    """Read the archive once and return its image ID and tags (the build's identity)."""
    kind = source_kind(path)
    try:
        with open_stream(path, kind) as stream, tarfile.open(fileobj=stream, mode="r|") as tar:
            small = _keep_small(path, tar)
    except tarfile.TarError as exc:
        raise ArchiveError(f"{path}: not a readable tar stream: {exc}") from None
    config_name, tags = _manifest_entry(path, small)
    config = small.get(config_name)
    if config is None:
        raise ArchiveError(
            f"{path}: manifest.json names config {config_name}, which is not a JSON member of the archive"
        )
    return BuildImage(
        source=str(path),
        kind=kind,
        image_id="sha256:" + hashlib.sha256(config).hexdigest(),
        repo_tags=tags,
    )


def normalize_id(image_id: str) -> str:
    """Engines disagree on the prefix (docker: sha256:<hex>, podman: <hex>): always sha256:<hex>."""
    image_id = image_id.strip()
    return image_id if image_id.startswith("sha256:") else f"sha256:{image_id}"
