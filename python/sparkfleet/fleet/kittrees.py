"""A kit's own files on each host, bound into its container ([[launch.trees]]).

Why: the EXL3 kit's container runs code that is not in its image: serve.py, conservative.yaml and
combined_worker.py come from the kit's release/runtime/serving (portable_node.py binds a copy at
/opt/ds41-serving), and the MXFP8 AOT library from release/runtime/aot (bound over flashinfer's).
The kit's launcher rsyncs release/runtime to the worker; sparkfleet takes it from the pinned
checkout of the kit's git pin on each host, at <state_dir>/kits/<pin>/<rev>/, bound read-only;
`sparkfleet stage HOST` puts it there (stage/kits.py). Launch (lane/recipe.py) and staging
(stage/targets.py) both read [[launch.trees]] here, a floor below both.
A tree that is not there (or lacks a file the recipe names) is refused before anything starts,
naming the host, the directory and the files: booting a container that cannot find serve.py
only shows up minutes later as a crash loop. Pure, but for `tree_problems`, which the node's
agent runs on its own filesystem.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from ..base.digests import full_digest
from ..base.errors import InventoryError
from ..base.relnames import inside, plain_relative

if TYPE_CHECKING:
    from .inventory import Inventory, Lane

KITS_DIR = "kits"  # under a host's state_dir


@dataclass(frozen=True)
class HostTree:
    """One directory of a pinned kit checkout, bound read-only at `target` in the container."""

    pin: str  # a git pin of hosts/fleet.toml
    repo: str
    rev: str
    path: str  # inside the checkout
    target: str  # in the container
    needs: tuple[str, ...] = ()  # files (relative to path) that must be there
    sha256: dict[str, str] = field(default_factory=dict)  # file -> the sha256 the kit pins it at
    url: str = ""  # where hosts clone the pin from (Pin.clone_url)
    # The kit's own manifest in the checkout ({"files": {name: {"sha256": ...}}}, names relative to
    # its directory): every file it lists under `path` must be there at its sha256 (kit_tree_problems)
    manifest: str = ""

    def checkout(self, state_dir: str | Path) -> Path:
        """Where the pinned checkout lives on a host: one directory per revision, never mutated."""
        return Path(state_dir) / KITS_DIR / self.pin / self.rev

    def host_dir(self, state_dir: str | Path) -> Path:
        return self.checkout(state_dir) / self.path

    def fix(self, state_dir: str | Path, host: str, lane: str) -> str:
        """The command that puts the tree there: staging the host for the lane clones the pin."""
        return (
            f"sparkfleet stage {host} --lane {lane} (clones {self.url or self.repo} at {self.rev} "
            f"into {self.checkout(state_dir)} on {host})"
        )


@dataclass(frozen=True)
class KitCheckout:
    """One pinned checkout a host holds: every tree its lanes bind from one git pin at one rev."""

    pin: str
    repo: str
    rev: str
    url: str
    trees: tuple[HostTree, ...]
    lanes: tuple[str, ...] = ()  # the lanes that bind it: staging any of them brings it

    def path(self, state_dir: str | Path) -> Path:
        return self.trees[0].checkout(state_dir)

    def fix(self, state_dir: str | Path, host: str, lane: str | None = None) -> str:
        """The command that brings it: staging the host for `lane`, else for a lane that binds it."""
        return self.trees[0].fix(state_dir, host, lane or (self.lanes[0] if self.lanes else "LANE"))

    @classmethod
    def from_dict(cls, doc: dict) -> KitCheckout:
        """The checkout from its JSON form (to_jsonable's): how doctor hands it to the node's agent."""
        trees = tuple(HostTree(**{**t, "needs": tuple(t["needs"])}) for t in doc["trees"])
        return cls(doc["pin"], doc["repo"], doc["rev"], doc["url"], trees, tuple(doc.get("lanes", ())))


@dataclass
class KitVerdict:
    """`verify`'s answer for one checkout a host needs: there, at the rev, clean and complete, or why not."""

    pin: str
    repo: str
    rev: str
    url: str
    path: str
    ok: bool
    why: str = ""  # checkout_problem's words: absent, at another commit, changed in place, lacks …
    fix: str = ""  # the command that brings it (KitCheckout.fix)

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        """The checkout and the verdict, one line: verify's and doctor's words for it."""
        said = "at the pinned rev, clean, complete" if self.ok else self.why
        return f"kit {self.pin} {self.repo}@{self.rev[:10]} at {self.path}: {said}"


def kit_checkouts(lanes: Iterable[Lane], inv: Inventory) -> list[KitCheckout]:
    """The checkouts `lanes` bind through [[launch.trees]], one per git pin (pins have one rev),
    each with every tree read from it: what staging a host for those lanes puts there."""
    by_pin: dict[str, list[HostTree]] = {}
    lanes_of: dict[str, dict[str, None]] = {}
    for lane in lanes:
        launch = lane.sections.launch
        for tree in host_trees(list(launch.trees) if launch else [], inv, str(lane.recipe_path)):
            trees = by_pin.setdefault(tree.pin, [])
            lanes_of.setdefault(tree.pin, {})[lane.name] = None
            if tree not in trees:
                trees.append(tree)
    return [
        KitCheckout(pin, t[0].repo, t[0].rev, t[0].url, tuple(t), tuple(lanes_of[pin]))
        for pin, t in by_pin.items()
    ]


def host_trees(docs: list[dict], inv: Inventory, where: str) -> tuple[HostTree, ...]:
    """[[launch.trees]] read: each names a git pin, a relative path in it and an absolute target."""
    out = []
    for i, doc in enumerate(docs):
        key = f"{where}: launch.trees[{i}]"
        pin = inv.pin_of(doc["pin"], "git", f"{key}.pin")
        rel = PurePosixPath(doc["path"])
        if rel.is_absolute() or ".." in rel.parts:
            raise InventoryError(f"{key}.path: {doc['path']!r} must stay inside the checkout")
        sums = dict(doc.get("sha256", {}))
        needs = tuple(dict.fromkeys([*doc.get("needs", ()), *sums]))  # a pinned file is needed too
        manifest = doc.get("manifest", "")
        mdir = PurePosixPath(manifest).parent
        above = mdir == rel or mdir in rel.parents
        if manifest and (mdir.is_absolute() or ".." in mdir.parts or not above):
            raise InventoryError(
                f"{key}.manifest: {manifest!r} must be a file of the checkout in or above {doc['path']!r}",
                hint="name the kit's own manifest listing this tree's files (names relative to its dir)",
            )
        if manifest and sums:
            raise InventoryError(
                f"{key}: sha256 restates what the kit's manifest {manifest!r} lists",
                hint="drop sha256: the manifest's sha256 of every file under the tree is checked",
            )
        out.append(
            HostTree(
                pin.name, pin.source, pin.value, str(rel), doc["target"], needs, sums, pin.clone_url, manifest
            )
        )
    return tuple(out)


MAX_MANIFEST_BYTES = 16 << 20  # the EXL3 kit's bundle-manifest.json is 125 kB


def manifest_sums(checkout: Path, tree: HostTree) -> tuple[dict[str, str], str | None]:
    """{file under tree.path: sha256} as the kit's own manifest lists them (never restated in a
    recipe), or why the manifest cannot be read. A manifest that lists a name leaving the checkout
    (`..`, an absolute name) is refused whole, as is one that is itself a link out of it: its
    hashes would be of files that are not the kit's, and naming them would print them."""
    where = checkout / tree.manifest
    if inside(checkout, tree.manifest) is None:
        return {}, f"{where} (the kit's manifest: a link out of the checkout)"
    try:
        with where.open("rb") as f:
            raw = f.read(MAX_MANIFEST_BYTES + 1)
        files = json.loads(raw)["files"] if len(raw) <= MAX_MANIFEST_BYTES else None
        if not isinstance(files, dict):
            raise ValueError("no files table")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return {}, f"{where} (the kit's manifest: {getattr(exc, 'strerror', None) or exc})"
    base, tree_dir = PurePosixPath(tree.manifest).parent, PurePosixPath(tree.path)
    out = {}
    for name, row in files.items():
        if not plain_relative(name):
            shown = repr(name)[:120]
            return {}, f"{where} (the kit's manifest lists {shown}, a name that leaves the checkout)"
        full = base / name
        if tree_dir in full.parents and isinstance(row, dict) and isinstance(row.get("sha256"), str):
            out[str(full.relative_to(tree_dir))] = row["sha256"]
    return out, None


def _in_checkout(checkout: Path, *parts: str) -> bool:
    rel = str(PurePosixPath(*parts))
    return rel == "." or inside(checkout, rel) is not None


def kit_tree_problems(checkout: Path, tree: HostTree) -> list[str]:
    """tree_problems of `tree` in the checkout at `checkout`: its needed files, the sha256 the
    recipe pins, and every file the kit's manifest lists under the tree at its sha256 (the kit's
    own preflight checks its runtime files against that manifest before every start). Nothing
    outside the checkout is read: a tree, or a file in it, that a link takes out is a problem."""
    if not _in_checkout(checkout, tree.path):
        return [f"{checkout / tree.path} (the directory: a link out of the checkout)"]
    pinned, needs = dict(tree.sha256), list(tree.needs)
    if tree.manifest:
        listed, why = manifest_sums(checkout, tree)
        if why:
            return [why]
        unlisted = [n for n in tree.needs if n not in listed]
        if unlisted:
            return [f"{checkout / tree.path / n} (not in the kit's manifest {tree.manifest})"
                    for n in unlisted]  # fmt: skip
        needs, pinned = list(dict.fromkeys([*needs, *listed])), listed
    out = [
        f"{checkout / tree.path / n} (a link out of the checkout, or not a plain name)"
        for n in dict.fromkeys([*needs, *pinned])
        if not _in_checkout(checkout, tree.path, n)
    ]
    if out:
        return out
    return tree_problems(checkout / tree.path, needs, pinned)


def tree_problems(directory: Path, needs: list[str], sha256: dict[str, str] | None = None) -> list[str]:
    """What of a tree is missing or wrong on this node: the directory itself, each needed file, and
    each file whose sha256 is not the one the kit pins (the EXL3 kit's AOT_SHA check, here)."""
    if not directory.is_dir():
        return [f"{directory} (the directory)"]
    out = [str(directory / n) for n in needs if not (directory / n).is_file()]
    for name, want in (sha256 or {}).items():
        path = directory / name
        if path.is_file() and (got := full_digest(path, "sha256")) != want:
            out.append(f"{path} (sha256 {got[:12]}…, the kit pins {want[:12]}…)")
    return out
