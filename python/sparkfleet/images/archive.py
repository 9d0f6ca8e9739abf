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
import subprocess
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ..errors import SparkfleetError

_SMALL = 4 * 1024 * 1024  # configs and manifest.json are a few KiB; layers are never kept


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


def inspect_build(path: Path) -> BuildImage:
    """Read the archive once and return its image ID and tags (the build's identity)."""
    kind = source_kind(path)
    small: dict[str, bytes] = {}
    try:
        with open_stream(path, kind) as stream, tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                if member.isfile() and member.name.endswith(".json") and member.size <= _SMALL:
                    fh = tar.extractfile(member)
                    if fh is not None:
                        small[member.name.lstrip("./")] = fh.read()
    except tarfile.TarError as exc:
        raise ArchiveError(f"{path}: not a readable tar stream: {exc}") from None
    try:
        manifest = json.loads(small["manifest.json"])
        entry = manifest[0]
        config = small[entry["Config"].lstrip("./")]
    except (KeyError, IndexError, ValueError, TypeError):
        raise ArchiveError(
            f"{path}: no manifest.json naming a config blob: not a docker-archive",
            hint="an OCI layout is not a docker-archive; use `docker save` or the Nix stream script",
        ) from None
    return BuildImage(
        source=str(path),
        kind=kind,
        image_id="sha256:" + hashlib.sha256(config).hexdigest(),
        repo_tags=tuple(entry.get("RepoTags") or ()),
    )


def normalize_id(image_id: str) -> str:
    """Engines disagree on the prefix (docker: sha256:<hex>, podman: <hex>): always sha256:<hex>."""
    image_id = image_id.strip()
    return image_id if image_id.startswith("sha256:") else f"sha256:{image_id}"
