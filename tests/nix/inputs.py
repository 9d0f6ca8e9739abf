"""The flake's inputs for the Nix tests, read from one place: a folder of git bundles.

No test reaches GitHub. `$SPARKFLEET_NIX_INPUTS` names a folder of whole-history git bundles, one
per input repository (`OWNER+REPO.bundle`); unset, it is `../shared/nix` beside the repository root
when that folder exists (CI and the project's machines have it there). A test takes an input at a
revision with `checkout("owner/repo", rev)`: the bundle is cloned once and the revision extracted
with `git archive`, which is what GitHub's tarball of that revision holds, into `.nix-inputs/`
(git-ignored, kept between runs). Without the folder, or without the bundle a test needs, that test
skips naming what is missing and where it was looked for.

nixpkgs' `lib` comes from `$NIXPKGS_LIB` when it is set (CI with the network points it at the lib of
the locked nixpkgs), else from the nix-community/nixpkgs.lib bundle at the last commit whose
`lib/.version` is the release flake.lock's nixpkgs branch names (`nixos-26.05` -> `26.05`): the lib
the release branched with.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
INPUTS_ENV = "SPARKFLEET_NIX_INPUTS"
CACHE = REPO / ".nix-inputs"
NIXPKGS_LIB_REPO = "nix-community/nixpkgs.lib"


def inputs_dir() -> Path | None:
    """The folder of bundles: $SPARKFLEET_NIX_INPUTS, else ../shared/nix beside the repository."""
    value = os.environ.get(INPUTS_ENV)
    path = Path(value) if value else REPO.parent / "shared" / "nix"
    return path if path.is_dir() else None


def where() -> str:
    value = os.environ.get(INPUTS_ENV)
    return f"${INPUTS_ENV}={value}" if value else f"{REPO.parent / 'shared' / 'nix'} (set ${INPUTS_ENV})"


def bundle(repo: str) -> Path | None:
    folder = inputs_dir()
    path = folder / f"{repo.replace('/', '+')}.bundle" if folder else None
    return path if path and path.is_file() else None


def missing(*repos: str) -> str | None:
    """Why the bundles of `repos` cannot be read (None when all are there)."""
    if inputs_dir() is None:
        return f"no Nix inputs folder at {where()}"
    gone = [r for r in repos if bundle(r) is None]
    return f"no git bundle of {', '.join(gone)} in {inputs_dir()}" if gone else None


def requires_inputs(*repos: str) -> pytest.MarkDecorator:
    reason = missing(*repos)
    return pytest.mark.skipif(reason is not None, reason=reason or "")


@contextmanager
def _locked() -> Iterator[None]:
    """One writer of .nix-inputs at a time (pytest-xdist workers share it)."""
    CACHE.mkdir(exist_ok=True)
    with (CACHE / ".lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def git(*argv: str, cwd: Path | None = None) -> str:
    proc = subprocess.run(["git", *argv], cwd=cwd, capture_output=True, text=True, check=False, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(argv)}: {proc.stderr.strip()}")
    return proc.stdout


def clone(repo: str) -> Path:
    """A bare clone of `repo`'s bundle (made once)."""
    src = bundle(repo)
    if src is None:
        raise FileNotFoundError(missing(repo))
    dest = CACHE / "git" / f"{repo.replace('/', '+')}.git"
    if (dest / "HEAD").is_file():  # made whole by the rename below, so no lock is needed to read it
        return dest
    with _locked():
        if not (dest / "HEAD").is_file():
            tmp = Path(tempfile.mkdtemp(dir=CACHE, prefix=".clone-"))
            git("clone", "--quiet", "--bare", str(src), str(tmp / "repo.git"))
            dest.parent.mkdir(exist_ok=True)
            os.replace(tmp / "repo.git", dest)
            shutil.rmtree(tmp)
    return dest


def has_commit(repo: str, rev: str) -> bool:
    return (
        subprocess.run(
            ["git", "-C", str(clone(repo)), "cat-file", "-e", f"{rev}^{{commit}}"],
            capture_output=True,
            check=False,
        ).returncode
        == 0
    )


def show(repo: str, rev: str, path: str) -> str | None:
    """One file of `repo` at `rev` (None when the revision has no such file)."""
    proc = subprocess.run(
        ["git", "-C", str(clone(repo)), "show", f"{rev}:{path}"], capture_output=True, text=True, check=False
    )
    return proc.stdout if proc.returncode == 0 else None


def rev_parse(repo: str, name: str) -> str:
    """The full commit id of `name` (a short id, `REV^`, a branch) in `repo`'s bundle."""
    return git("-C", str(clone(repo)), "rev-parse", f"{name}^{{commit}}").strip()


def archive(repo: str, rev: str, dest: Path) -> Path:
    """`repo` at `rev` as GitHub's tarball holds it (git archive), extracted into `dest`."""
    dest.mkdir(parents=True)
    git = subprocess.Popen(["git", "-C", str(clone(repo)), "archive", rev], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(dest)], stdin=git.stdout, check=True)
    if git.wait() != 0:
        raise RuntimeError(f"git archive {rev} of {repo} failed")
    return dest


def checkout(repo: str, rev: str) -> Path:
    """`repo` at `rev` (a full commit id), extracted once into .nix-inputs/src and kept."""
    dest = CACHE / "src" / repo.replace("/", "+") / rev
    if (dest / ".complete").is_file():
        return dest / "tree"
    if not has_commit(repo, rev):  # clones the bundle first: the lock below is not re-entrant
        raise LookupError(f"the {repo} bundle in {inputs_dir()} does not hold {rev}")
    with _locked():
        if not (dest / ".complete").is_file():
            shutil.rmtree(dest, ignore_errors=True)
            archive(repo, rev, dest / "tree")
            (dest / ".complete").touch()
    return dest / "tree"


def lock() -> dict:
    return json.loads((REPO / "flake.lock").read_text())


def locked(name: str) -> dict:
    """flake.lock's `locked` entry of the input node `name`."""
    return lock()["nodes"][name]["locked"]


def locked_checkout(name: str) -> Path:
    """The input node `name` of flake.lock at its locked revision."""
    entry = locked(name)
    return checkout(f"{entry['owner']}/{entry['repo']}", entry["rev"])


def nixpkgs_release() -> str:
    """The NixOS release of the nixpkgs branch flake.lock names (`nixos-26.05` -> `26.05`)."""
    ref = lock()["nodes"]["nixpkgs"]["original"].get("ref", "")
    found = re.fullmatch(r"nixos-(\d\d\.\d\d)", ref)
    if not found:
        raise LookupError(f"flake.lock's nixpkgs follows {ref or 'master'}, not a NixOS release branch")
    return found.group(1)


def _version_at(rev: str) -> str | None:
    text = show(NIXPKGS_LIB_REPO, rev, "lib/.version")
    return text.strip() if text is not None else None


@cache
def release_lib_rev(release: str) -> str:
    """The last nixpkgs.lib commit whose lib/.version is `release`: where master stopped being it
    (the `YY.MM is <name>` commit of the next release), its first parent; HEAD while master still is."""
    if _version_at("HEAD") == release:
        return rev_parse(NIXPKGS_LIB_REPO, "HEAD")
    changes = git(
        "-C", str(clone(NIXPKGS_LIB_REPO)), "log", "--format=%H", "HEAD", "--", "lib/.version"
    ).split()
    for newer, older in zip(changes, changes[1:], strict=False):
        if _version_at(older) == release and _version_at(newer) != release:
            parent = rev_parse(NIXPKGS_LIB_REPO, f"{newer}^1")
            if _version_at(parent) == release:
                return parent
    raise LookupError(f"no commit of {NIXPKGS_LIB_REPO} has lib/.version {release}")


@cache
def nixpkgs_lib() -> Path | None:
    """nixpkgs' lib folder: $NIXPKGS_LIB (the folder or a checkout holding lib/), else the bundle's
    lib of the locked release; None when neither is there (the reason: nixpkgs_lib_missing())."""
    value = os.environ.get("NIXPKGS_LIB")
    if value:
        path = Path(value)
        if (path / "lib" / "default.nix").is_file():
            path = path / "lib"
        return path if (path / "default.nix").is_file() else None
    if missing(NIXPKGS_LIB_REPO):
        return None
    return checkout(NIXPKGS_LIB_REPO, release_lib_rev(nixpkgs_release())) / "lib"


def nixpkgs_lib_missing() -> str:
    value = os.environ.get("NIXPKGS_LIB")
    if value:
        return f"NIXPKGS_LIB={value} holds no nixpkgs lib (default.nix)"
    return f"no nixpkgs lib: NIXPKGS_LIB is unset and {missing(NIXPKGS_LIB_REPO)}"
