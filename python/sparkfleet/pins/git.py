"""git pins: a commit prefix or ref resolved with ls-remote (or a bare clone), narHash of `git archive`."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..fleet.inventory import Pin
from .common import (
    HEX,
    HTTP_TIMEOUT_S,
    Endpoints,
    PinError,
    PinState,
    Unreachable,
    nix_hash_path,
    pin_state,
    run_tool,
)


def git_url(endpoints: Endpoints, repo: str) -> str:
    return f"{endpoints.git_base.rstrip('/')}/{repo}"


def _ls_remote(url: str) -> dict[str, str]:
    refs: dict[str, str] = {}
    for line in run_tool(["git", "ls-remote", "--", url], timeout=HTTP_TIMEOUT_S * 4).splitlines():
        sha, _, ref = line.partition("\t")
        refs[ref] = sha
    return refs


def _git_archive_nar_hash(clone: Path, commit: str) -> str:
    """narHash of the tree GitHub serves as a tarball for `commit` (a git archive, prefix stripped)."""
    with tempfile.TemporaryDirectory(prefix="sparkfleet-nar-") as tmp:
        tree = Path(tmp) / "src"
        tree.mkdir()
        archive = subprocess.Popen(
            ["git", "-C", str(clone), "archive", "--format=tar", commit], stdout=subprocess.PIPE
        )
        assert archive.stdout is not None
        untar = subprocess.run(
            ["tar", "-x", "-C", str(tree)], stdin=archive.stdout, capture_output=True, check=False
        )
        archive.stdout.close()
        if archive.wait() != 0 or untar.returncode != 0:
            raise Unreachable(
                f"git archive {commit[:12]} could not be unpacked: {untar.stderr.decode()[-200:]}"
            )
        return nix_hash_path(tree)


def _git_commit(url: str, value: str, clone: Callable[[], Path]) -> tuple[str, str]:
    """(full commit, how it was found) for a full commit, a commit prefix or a ref name."""
    refs = _ls_remote(url)
    for ref in (value, f"refs/heads/{value}", f"refs/tags/{value}^{{}}", f"refs/tags/{value}"):
        if ref in refs:
            return refs[ref], f"ref {ref}"
    if not HEX.fullmatch(value):
        raise PinError(f"{url} has no ref {value!r}")
    heads = {sha for sha in refs.values() if sha.startswith(value)}
    if len(heads) == 1:
        return heads.pop(), "a ref head"
    repo = clone()
    proc = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{value}^{{commit}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise PinError(f"no commit {value!r} in {url} (unknown, or a prefix shared by several commits)")
    return proc.stdout.strip(), "the repository history"


def resolve_git(pin: Pin, endpoints: Endpoints, *, with_nix_hash: bool = True) -> PinState:
    url = git_url(endpoints, pin.source)
    with tempfile.TemporaryDirectory(prefix="sparkfleet-git-") as tmp:
        bare = Path(tmp) / "repo.git"

        def clone() -> Path:
            if not bare.exists():
                run_tool(["git", "clone", "--bare", "--quiet", "--no-tags", "--", url, str(bare)])
            return bare

        try:
            commit, how = _git_commit(url, pin.value, clone)
        except Unreachable as exc:
            return pin_state(pin, "unreachable", detail=exc.message)
        except PinError as exc:
            return pin_state(pin, "drift", detail=exc.message)
        if HEX.fullmatch(pin.value) and not commit.startswith(pin.value):
            return pin_state(pin, "drift", current=commit, detail=f"{url} resolves {pin.value!r} to {commit}")
        nix_hash = None
        if with_nix_hash:
            try:
                nix_hash = _git_archive_nar_hash(clone(), commit)
            except Unreachable as exc:
                return pin_state(pin, "unreachable", current=commit, detail=f"nix hash: {exc.message}")
        return pin_state(pin, "resolved", current=commit, nix_hash=nix_hash, detail=f"{url} ({how})")
