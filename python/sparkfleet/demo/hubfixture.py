"""Builds NAS-like Hugging Face hub caches with every hard case the night-shift log met.

Used by the tests, the demo and the benchmarks, so all three exercise the same layout:
  - two repos (weights + drafter), two revisions of the weights, `refs/main` with no newline;
  - safetensors shards with an index, nested folders, two shards of the same size but different bytes;
  - LFS blobs named by sha256, small files named by git blob sha1;
  - the hub-level shared store (`blobs/<2hex>/<xet>` + marker + `.refs` manifests), reached through
    repo blobs, one of them by an *absolute* link, one chain three hops deep;
  - the optional `page15/` pack as real files inside `snapshots/<rev>/` (excluded by the lane);
  - `trees/<commit>.json` listing every file, `.no_exist/` markers, `.locks/` and a `*.incomplete`;
  - an identical blob in both repos' own blob stores (reusable locally by hardlink after verification).
The shared store names are NOT sha256 of the content — like real Xet hashes — so a stager that
checks them as sha256 fails here.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import struct
from dataclasses import dataclass, field
from pathlib import Path

from ..facts.hubcache import SHARED_STORE_LAYOUT, SHARED_STORE_MARKER, repo_folder
from .synthmodel import SynthSpec, filled, tensors_file_bytes

WEIGHTS_REPO = "demo-org/DeepSeek-V4.1-Flash-EXL3-3bpw"
# The embedding the drafter shares with the weights: the same blob in both repos' own stores.
EMBED_FILE = "model-embed.safetensors"
DRAFTER_REPO = "demo-org/DeepSeek-V4.1-Flash-DSpark-EXL3-3bpw"


def _noise(rng: random.Random, n: int) -> bytes:
    """`n` reproducible pseudo-random bytes (randbytes alone overflows past ~256 MiB)."""
    chunk = 16 * 1024 * 1024
    return b"".join(rng.randbytes(min(chunk, n - i)) for i in range(0, n, chunk))


def _commit(label: str) -> str:
    return hashlib.sha1(label.encode()).hexdigest()


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(f"blob {len(data)}\0".encode() + data, usedforsecurity=False).hexdigest()


def fake_xet_hash(data: bytes) -> str:
    """Stands in for a Xet file hash: 64 hex, deliberately not the sha256 of the content."""
    return hashlib.blake2b(data, digest_size=32, person=b"fake-xet").hexdigest()


def safetensors_bytes(tensors: dict[str, bytes]) -> bytes:
    """A valid safetensors file of 1-D U8 tensors (8-byte header length, JSON header, data)."""
    header, offset = {}, 0
    for name, data in tensors.items():
        header[name] = {"dtype": "U8", "shape": [len(data)], "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    return struct.pack("<Q", len(head)) + head + b"".join(tensors.values())


@dataclass
class RepoTruth:
    """What the fixture put in one repo, for assertions."""

    repo: str
    commits: dict[str, str]  # label → commit
    files: dict[str, dict[str, bytes]] = field(default_factory=dict)  # commit → path → content
    optional: dict[str, list[str]] = field(default_factory=dict)  # commit → paths of the optional pack


@dataclass
class HubFixture:
    root: Path
    repos: dict[str, RepoTruth]

    @property
    def weights(self) -> RepoTruth:
        return self.repos[WEIGHTS_REPO]

    @property
    def drafter(self) -> RepoTruth:
        return self.repos[DRAFTER_REPO]


class _Writer:
    """Writes one repo the way huggingface_hub lays it out."""

    def __init__(self, hub: Path, repo: str, absolute_links: bool = True) -> None:
        self.hub = hub
        self.absolute_links = absolute_links
        self.repo = repo
        self.dir = hub / repo_folder(repo)
        for sub in ("blobs", "refs", "snapshots", "trees"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)

    def blob(self, data: bytes, lfs: bool, store: str | None = None) -> tuple[str, dict]:
        """Write a blob; `store` = "shared" | "shared-abs" | "deep" routes it via the shared store."""
        etag = hashlib.sha256(data).hexdigest() if lfs else git_blob_sha1(data)
        path = self.dir / "blobs" / etag
        info = {"size": len(data), "blob_id": git_blob_sha1(etag.encode())}
        if lfs:
            info.update(lfs_sha256=etag, lfs_size=len(data))
        if path.exists() or path.is_symlink():
            return etag, info
        if store is None:
            path.write_bytes(data)
            return etag, info
        xet = fake_xet_hash(data)
        info["xet_hash"] = xet
        store_path = self.hub / "blobs" / xet[:2] / xet
        store_path.parent.mkdir(parents=True, exist_ok=True)
        if not store_path.exists():
            store_path.write_bytes(data)
        if store == "deep":
            # A third hop: the repo blob links to an alias in the same blob store, which links to the store.
            alias = self.dir / "blobs" / f"dedup-{xet[:12]}"
            alias.symlink_to(os.path.relpath(store_path, alias.parent))
            path.symlink_to(alias.name)
            store = "linked"
        if store != "linked":
            abs_link = store == "shared-abs" and self.absolute_links
            path.symlink_to(str(store_path) if abs_link else os.path.relpath(store_path, path.parent))
        manifest = store_path.with_name(xet + ".refs")
        with manifest.open("a") as fh:
            fh.write(f"{path.relative_to(self.hub).as_posix()}\n")
        return etag, info

    def snapshot(self, commit: str, files: dict[str, tuple[bytes, bool, str | None]], real: set[str]) -> dict:
        """Snapshot entries: links to blobs, except `real` paths written as plain files."""
        listing = {}
        base = self.dir / "snapshots" / commit
        for path, (data, lfs, store) in files.items():
            target = base / path
            target.parent.mkdir(parents=True, exist_ok=True)
            if path in real:
                target.write_bytes(data)
                info = {"size": len(data), "blob_id": git_blob_sha1(data)}
            else:
                etag, info = self.blob(data, lfs, store)
                target.symlink_to(os.path.relpath(self.dir / "blobs" / etag, target.parent))
            listing[path] = info
        (self.dir / "trees" / f"{commit}.json").write_text(
            json.dumps({"format_version": 1, "files": dict(sorted(listing.items()))}, indent=1)
        )
        return listing

    def ref(self, name: str, commit: str) -> None:
        path = self.dir / "refs" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(commit)  # no trailing newline, as huggingface_hub writes it


def write_repo(hub: Path, repo: str, commit: str, files: dict[str, bytes]) -> Path:
    """One repo at one commit, laid out as huggingface_hub does (blobs, a snapshot, refs/main).

    Every file is a blob behind a snapshot link; `.safetensors` blobs are named by sha256 (LFS),
    the rest by git blob sha1. Returns the snapshot folder.
    """
    writer = _Writer(Path(hub).resolve(), repo)
    writer.snapshot(commit, {p: (d, p.endswith(".safetensors"), None) for p, d in files.items()}, real=set())
    writer.ref("main", commit)
    return writer.dir / "snapshots" / commit


def build_nas_hub(
    root: Path, shard_bytes: int = 256 * 1024, shards: int = 4, seed: int = 7, absolute_links: bool = True
) -> HubFixture:
    """Build the fixture hub under `root` (created). `shard_bytes` scales the weights.

    `absolute_links=False` for a hub that will be read through another mount path (sshfs), where an
    absolute link written on the server would point outside the mount.
    """
    rng = random.Random(seed)
    hub = Path(root).resolve()
    hub.mkdir(parents=True, exist_ok=True)
    (hub / "blobs").mkdir(exist_ok=True)
    (hub / "blobs" / SHARED_STORE_MARKER).write_text(SHARED_STORE_LAYOUT)

    weights = _Writer(hub, WEIGHTS_REPO, absolute_links)
    truth = RepoTruth(WEIGHTS_REPO, {"old": _commit("weights-old"), "main": _commit("weights-main")})
    # The weights are a DeepSeek-shaped synthetic MoE (demo/synthmodel.py): one layer a shard, so
    # every shard has the same size while contents differ (the "wrong shard bound by size" trap),
    # and the roofline reads a real config.json and real tensor names from what the demo staged.
    spec = SynthSpec.for_layer_bytes(shard_bytes, layers=shards)
    noise = lambda n: _noise(rng, n)  # noqa: E731
    embed = tensors_file_bytes(filled(spec.top_tensors(), noise))  # identical bytes in both repos
    shard_data = [tensors_file_bytes(filled(spec.layer_tensors(i), noise)) for i in range(shards)]
    shard_names = [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]
    weight_map = {t: shard_names[i] for i in range(shards) for t in spec.layer_tensors(i)}
    weight_map.update({t: EMBED_FILE for t in spec.top_tensors()})
    index = {"metadata": {"total_size": sum(map(len, shard_data)) + len(embed)}, "weight_map": weight_map}
    config = json.dumps({**spec.config(), "quant": "fp8-demo"}, indent=1).encode()
    routes = ["shared", "shared-abs", "deep", None]
    main_files: dict[str, tuple[bytes, bool, str | None]] = {
        "config.json": (config, False, None),
        "model.safetensors.index.json": (json.dumps(index).encode(), False, None),
        "tokenizer/tokenizer_config.json": (b'{"model_max_length": 1048576}', False, None),
        "tokenizer/nested/special_tokens.json": (b'{"bos": "<s>"}', False, None),
        EMBED_FILE: (embed, True, None),
    }
    for i, data in enumerate(shard_data):
        main_files[f"model-{i + 1:05d}-of-{shards:05d}.safetensors"] = (data, True, routes[i % len(routes)])
    page15 = {
        f"page15/engram-page-{j:02d}.bin": (_noise(rng, shard_bytes // 4), False, None) for j in range(3)
    }
    main_files.update(page15)
    weights.snapshot(truth.commits["main"], main_files, real=set(page15))
    old_files = {
        "config.json": (b'{"architectures": ["old"]}', False, None),
        "model-00001-of-00001.safetensors": (shard_data[0], True, "shared"),
    }
    weights.snapshot(truth.commits["old"], old_files, real=set())
    weights.ref("main", truth.commits["main"])
    weights.ref("v0", truth.commits["old"])
    no_exist = weights.dir / ".no_exist" / truth.commits["main"] / "generation_config.json"
    no_exist.parent.mkdir(parents=True)
    no_exist.touch()
    (hub / ".locks" / repo_folder(WEIGHTS_REPO)).mkdir(parents=True)
    (hub / ".locks" / repo_folder(WEIGHTS_REPO) / "deadbeef.lock").touch()
    (weights.dir / "blobs" / "0123abcd.9f8e7d6c.incomplete").write_bytes(_noise(rng, 1000))
    truth.files = {
        truth.commits["main"]: {p: d for p, (d, _, _) in main_files.items()},
        truth.commits["old"]: {p: d for p, (d, _, _) in old_files.items()},
    }
    truth.optional = {truth.commits["main"]: sorted(page15)}

    drafter = _Writer(hub, DRAFTER_REPO, absolute_links)
    dtruth = RepoTruth(DRAFTER_REPO, {"main": _commit("drafter-main")})
    dfiles: dict[str, tuple[bytes, bool, str | None]] = {
        "config.json": (b'{"architectures": ["DSparkDrafter"]}', False, None),
        "model.safetensors": (
            safetensors_bytes({"draft.w": _noise(rng, shard_bytes // 2)}),
            True,
            "shared",
        ),
        EMBED_FILE: (embed, True, None),
    }
    drafter.snapshot(dtruth.commits["main"], dfiles, real=set())
    drafter.ref("main", dtruth.commits["main"])
    dtruth.files = {dtruth.commits["main"]: {p: d for p, (d, _, _) in dfiles.items()}}
    return HubFixture(hub, {WEIGHTS_REPO: truth, DRAFTER_REPO: dtruth})


# ---- engram tables (sparkfleet engram pack) ------------------------------------------------

ENGRAM_REPO = "demo-org/DeepSeek-V4.1-Flash-Engram"
ENGRAM_TENSOR = "layers.{layer}.engram.embed.{part}"


@dataclass
class EngramTruth:
    """What build_engram_repo wrote: per layer the weight and scale bytes, for assertions."""

    repo: str
    commit: str
    weight_width: int
    scale_width: int
    tables: dict[int, dict[str, bytes]]  # layer -> {"weight": bytes, "scale": bytes}

    def rows(self, layer: int) -> int:
        return len(self.tables[layer]["weight"]) // self.weight_width

    def packed_rows(self, layer: int, lo: int = 0, hi: int | None = None) -> bytes:
        """Rows [lo, hi) as a pack holds them: each row's weight bytes, then its scale bytes."""
        w, s = self.tables[layer]["weight"], self.tables[layer]["scale"]
        ww, sw = self.weight_width, self.scale_width
        hi = self.rows(layer) if hi is None else hi
        return b"".join(w[i * ww : (i + 1) * ww] + s[i * sw : (i + 1) * sw] for i in range(lo, hi))


def checkpoint_engram_config(
    rows: dict[int, int], head_dim: int = 256, n_heads: int = 8, max_ngram_size: int = 4
) -> dict:
    """A `text_config` engram block with DeepSeek-V4.1-Flash's key names (its config.json declares
    engram_layer_ids = [1, 14], engram_num_embeddings = [384006168, 384016682], engram_n_heads = 8,
    engram_head_dim = 256, engram_max_ngram_size = 4); `rows` pairs layers with row counts in order."""
    layers = sorted(rows)
    return {
        "engram_layer_ids": layers,
        "engram_num_embeddings": [rows[layer] for layer in layers],
        "engram_n_heads": n_heads,
        "engram_head_dim": head_dim,
        "engram_max_ngram_size": max_ngram_size,
    }


def build_engram_repo(
    hub: Path,
    rows: dict[int, int] | None = None,
    weight_width: int = 256,
    scale_width: int = 8,
    seed: int = 11,
    with_index: bool = True,
    repo: str = ENGRAM_REPO,
    label: str = "engram-main",
    text_config: dict | None = None,
) -> EngramTruth:
    """A checkpoint-like repo whose engram tables sit in several shards, behind other tensors.

    Layer L's tables are `layers.L.engram.embed.weight` (F8_E4M3 [R, weight_width]) and `.scale`
    (F8_E8M0 [R, scale_width]) — the names third-party TP4 packers read from DeepSeek-V4.1-Flash —
    each in a shard after a filler tensor (so data offsets are never 0), one shard reached through
    the shared store. `with_index=False` leaves out model.safetensors.index.json. `text_config`
    goes into config.json as DeepSeek-V4.1-Flash writes it (`engram_layer_ids`, ...; see
    `checkpoint_engram_config`).
    """
    rng = random.Random(seed)
    hub = Path(hub).resolve()
    (hub / "blobs").mkdir(parents=True, exist_ok=True)
    marker = hub / "blobs" / SHARED_STORE_MARKER
    if not marker.exists():
        marker.write_text(SHARED_STORE_LAYOUT)
    rows = rows or {1: 1001, 14: 1003}
    writer = _Writer(hub, repo)
    truth = EngramTruth(repo, _commit(f"{repo}:{label}"), weight_width, scale_width, {})
    shards: list[dict[str, tuple[str, list[int], bytes]]] = []
    for layer, count in sorted(rows.items()):
        weight, scale = _noise(rng, count * weight_width), _noise(rng, count * scale_width)
        truth.tables[layer] = {"weight": weight, "scale": scale}
        shards.append(
            {
                f"layers.{layer}.attn.wq": ("BF16", [8, 4], _noise(rng, 64)),
                ENGRAM_TENSOR.format(layer=layer, part="weight"): ("F8_E4M3", [count, weight_width], weight),
                ENGRAM_TENSOR.format(layer=layer, part="scale"): ("F8_E8M0", [count, scale_width], scale),
            }
        )
    shards.append({"embed.weight": ("F32", [16, 4], _noise(rng, 256))})
    names = [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    files: dict[str, tuple[bytes, bool, str | None]] = {
        "config.json": (
            json.dumps(
                {
                    "architectures": ["DeepseekV4ForCausalLM"],
                    **({"text_config": text_config} if text_config else {}),
                }
            ).encode(),
            False,
            None,
        ),
    }
    for i, (name, tensors) in enumerate(zip(names, shards, strict=True)):
        files[name] = (tensors_file_bytes(tensors), True, "shared" if i == 0 else None)
    if with_index:
        weight_map = {t: name for name, tensors in zip(names, shards, strict=True) for t in tensors}
        index = {"metadata": {"total_size": sum(len(files[n][0]) for n in names)}, "weight_map": weight_map}
        files["model.safetensors.index.json"] = (json.dumps(index).encode(), False, None)
    writer.snapshot(truth.commit, files, real=set())
    writer.ref("main", truth.commit)
    return truth
