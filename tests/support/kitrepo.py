"""A real git repository standing in for a kit (CI has no network): `git init`, files, commits.

Shared by tests/stage/test_kits.py (this machine) and tests/integration/test_stage_kits.py (netns
hosts staging over ssh): a lane's [[launch.trees]] pin gets `url` = this repository's path.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

GIT_ENV = {
    "GIT_AUTHOR_NAME": "kit", "GIT_AUTHOR_EMAIL": "kit@example.invalid",
    "GIT_COMMITTER_NAME": "kit", "GIT_COMMITTER_EMAIL": "kit@example.invalid",
    "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1",
}  # fmt: skip

SERVING = "release/runtime/serving"
FILES = {
    f"{SERVING}/serve.py": b"print('serve')\n",
    f"{SERVING}/conservative.yaml": b"max_num_seqs: 6\n",
    "README.md": b"a kit\n",
}


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


@dataclass(frozen=True)
class KitRepo:
    path: Path
    rev: str  # the commit holding FILES
    later: str  # a later commit without serve.py (the trees' needs are not there)

    @property
    def serve_sha256(self) -> str:
        return hashlib.sha256(FILES[f"{SERVING}/serve.py"]).hexdigest()


def make_kit_repo(path: Path, files: dict[str, bytes] = FILES) -> KitRepo:
    """A repository whose first commit holds `files` (FILES: the serving stand-ins); its second
    removes serve.py (which `files` must hold)."""
    path.mkdir(parents=True)
    git(path, "init", "--quiet", "--initial-branch", "main")
    for rel, data in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_bytes(data)
    git(path, "add", "-A")
    git(path, "commit", "--quiet", "-m", "kit")
    rev = git(path, "rev-parse", "HEAD")
    git(path, "rm", "--quiet", f"{SERVING}/serve.py")
    git(path, "commit", "--quiet", "-m", "drop serve.py")
    return KitRepo(path, rev, git(path, "rev-parse", "HEAD"))


def trees_toml(pin: str, sha256: str | None = None) -> str:
    """A recipe's [launch] with one [[launch.trees]] from `pin` (the serving directory)."""
    pinned = f'sha256 = {{ "serve.py" = "{sha256}" }}\n' if sha256 else ""
    return (
        '\n[launch]\nruntime = "process"\ncommand = ["true"]\n\n[[launch.trees]]\n'
        f'pin = "{pin}"\npath = "{SERVING}"\ntarget = "/opt/ds41-serving"\n'
        f'needs = ["serve.py", "conservative.yaml"]\n{pinned}'
    )


@dataclass(frozen=True)
class Link:
    """A symbolic link committed to a kit repository (git keeps links): its target text."""

    target: str


def commit_files(repo: Path, files: dict[str, bytes | Link]) -> str:
    """Write `files` (bytes, or a Link) into `repo` (made on the first call), commit, return the commit."""
    if not repo.exists():
        repo.mkdir(parents=True)
        git(repo, "init", "--quiet", "--initial-branch", "main")
    for rel, data in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink() or path.is_file():
            path.unlink()
        if isinstance(data, Link):
            path.symlink_to(data.target)
        else:
            path.write_bytes(data)
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "--allow-empty", "-m", "kit")
    return git(repo, "rev-parse", "HEAD")


def pinned_checkout(root: Path, pin: str, repo: Path, rev: str, state_dir: Path) -> Path:
    """The pin's checkout as `sparkfleet stage` leaves it on a host (a real clone of `repo`, detached
    at `rev`, under `state_dir`), with hosts/fleet.toml at `root` pinning `pin` to `rev`."""
    fleet = root / "hosts" / "fleet.toml"
    text = fleet.read_text()
    head = text.index(f"[pins.{pin}]")
    start = text.index('rev = "', head) + len('rev = "')
    fleet.write_text(text[:start] + rev + text[text.index('"', start) :])
    checkout = state_dir / "kits" / pin / rev
    checkout.parent.mkdir(parents=True, exist_ok=True)
    git(checkout.parent, "clone", "--quiet", "--no-checkout", str(repo), rev)
    git(checkout, "checkout", "--quiet", "--detach", rev)
    return checkout
