"""Compare a kit's `docker create` flags with the `docker run` argv sparkfleet renders.

A kit writes `--key=value` (portable_node.py); sparkfleet's argv lists write `--key value`. Both
are read into (flag, value) pairs here, so a test can ask "does ours carry every flag the kit's
launcher passes", whatever the spelling.
"""

from __future__ import annotations

# `docker run` flags that take no value (everything else sparkfleet writes is `--flag value`).
BARE = {"-d", "--read-only", "--rm", "--init", "--privileged"}


def kit_pairs(flags: list[str], user: str, node: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """The kit's `--key=value` / `--key` flags as pairs; $UID:$GID becomes `user`, and each other
    `$NAME` the node's value in `node` (the DRM card: $DRM_CARD, $DRM_GID)."""
    out = []
    for f in flags:
        key, _, value = f.partition("=")
        value = value.replace("$UID:$GID", user)
        for name, given in (node or {}).items():
            value = value.replace("$" + name, given)
        out.append((key, value))
    return out


def run_pairs(argv: list[str], image: str) -> list[tuple[str, str]]:
    """`docker|podman run ...` up to the image, as (flag, value) pairs (bare flags get "")."""
    end = argv.index(image)
    out, i = [], 2
    while i < end:
        if argv[i] in BARE:
            out.append((argv[i], ""))
            i += 1
        else:
            out.append((argv[i], argv[i + 1]))
            i += 2
    return out


def missing_flags(kit: list[tuple[str, str]], ours: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The kit's pairs ours lacks; `--gpus=all` and `--device` count once each, like a set."""
    have = set(ours)
    return [p for p in kit if p not in have]
