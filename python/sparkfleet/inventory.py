"""The fleet inventory: TOML in, validated frozen dataclasses out.

This is the only module that knows TOML. `hosts/fleet.toml` holds hosts and pins; each lane is
`recipes/<lane>/recipe.toml` (the lane's name is its folder's name, so it is never restated).
Both files are validated with the JSON Schemas shipped in `sparkfleet/schema/`; every error
names the file, the key path inside it and what was expected, and nothing is half-loaded.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from .errors import InventoryError

FLEET_FILE = Path("hosts/fleet.toml")
RECIPES_DIR = Path("recipes")
RECIPE_FILE = "recipe.toml"

_HEX40 = re.compile(r"[0-9a-f]{40}")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
GIB = 1024**3


@dataclass(frozen=True)
class Host:
    """One Spark: how to reach it and where its hub caches live."""

    name: str
    address: str
    ssh_user: str
    ssh_port: int
    local_hub: Path
    nas_hub: Path
    reserve_bytes: int
    ssh_key: Path | None = None
    # The node's RoCE fabric address: picks its GID index and is what peers dial (launch/fabric).
    fabric_ip: str | None = None
    # Node-local directory for launch records and rank logs (default: beside local_hub).
    state_dir: Path | None = None
    # The NFS export holding the NAS hub cache (server:/path), mounted at nas_hub's parent.
    nas_export: str | None = None
    # "nixos" or "dgx-os" (Nix on Ubuntu): which deploy-rs profiles the host takes (modules/lib/fleet.nix).
    os: str = "dgx-os"
    # The known-good host stack (kernel, driver, cuda, nccl, firmware): [defaults.stack] + [hosts.X.stack].
    stack: dict[str, str] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Pin:
    """A pinned source. `value` is the commit/revision/digest exactly as recorded."""

    name: str
    kind: str  # "hf" | "git" | "oci"
    value: str
    source: str  # hf/git: ORG/NAME; oci: image name
    tag: str | None = None
    note: str | None = None
    # url pins: the source commit the download was cut from (sources.manifest's second column).
    commit: str | None = None
    # Nix's fixed-output hash (SRI) of what a derivation fetches for this pin, once resolved.
    nix_hash: str | None = None

    @property
    def resolved(self) -> bool:
        """Whether the value is a full, immutable identifier (derived from its form, never stated)."""
        if self.kind == "oci":
            return _DIGEST.fullmatch(self.value) is not None
        if self.kind == "url":
            return _SHA256.fullmatch(self.value) is not None
        return _HEX40.fullmatch(self.value) is not None


@dataclass(frozen=True)
class ModelNeed:
    """One HF repo a lane needs staged, with the lane's include/exclude patterns."""

    pin: str
    repo: str
    revision: str
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()


@dataclass(frozen=True)
class Lane:
    """A serving lane: the hosts it spans (in rank order) and the models it reads."""

    name: str
    hosts: tuple[str, ...]
    models: tuple[ModelNeed, ...]
    recipe_path: Path
    description: str = ""
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class Inventory:
    """Everything the fleet knows about itself."""

    root: Path
    hosts: dict[str, Host]
    pins: dict[str, Pin]
    lanes: dict[str, Lane]

    def host(self, name: str) -> Host:
        try:
            return self.hosts[name]
        except KeyError:
            raise InventoryError(
                f"unknown host {name!r} (known: {', '.join(sorted(self.hosts))})",
                hint=f"hosts are declared in {self.root / FLEET_FILE}",
            ) from None

    def lane(self, name: str) -> Lane:
        try:
            return self.lanes[name]
        except KeyError:
            raise InventoryError(
                f"unknown lane {name!r} (known: {', '.join(sorted(self.lanes)) or 'none'})",
                hint=f"a lane is a folder {self.root / RECIPES_DIR}/<lane>/ with a {RECIPE_FILE}",
            ) from None

    def lanes_of(self, host: str) -> list[Lane]:
        """The lanes that run on `host`, in name order."""
        return [lane for _, lane in sorted(self.lanes.items()) if host in lane.hosts]


@cache
def schema(name: str) -> dict[str, Any]:
    """A JSON Schema shipped with the package (`fleet` or `recipe`)."""
    text = resources.files("sparkfleet").joinpath("schema", f"{name}.schema.json").read_text()
    return json.loads(text)


def _key_path(parts: Any) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _best_branch_error(context: list) -> jsonschema.ValidationError:
    """For a oneOf/anyOf failure: the error of the branch whose discriminator (`kind`) matched."""
    branches: dict = {}
    for e in context:
        branches.setdefault(e.schema_path[0] if e.schema_path else None, []).append(e)
    matching = [errs for errs in branches.values() if not any(list(e.path)[-1:] == ["kind"] for e in errs)]
    candidates = matching[0] if matching else context
    return max(candidates, key=lambda e: len(e.absolute_path))


def validate(document: dict[str, Any], schema_name: str, path: Path) -> None:
    """Raise InventoryError naming file, key path and expectation for the first schema violation."""
    validator = jsonschema.Draft202012Validator(schema(schema_name))
    errors = sorted(
        validator.iter_errors(document), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path)))
    )
    if not errors:
        return
    err = errors[0]
    # oneOf failures hide the useful message in their context; pick the branch that got furthest.
    if err.context:
        err = _best_branch_error(err.context)
    where = _key_path(err.absolute_path)
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    raise InventoryError(
        f"{path}: {where}: {err.message}{more}", hint=f"see the schema {schema_name}.schema.json"
    )


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise InventoryError(f"{path}: file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise InventoryError(f"{path}: not valid TOML: {exc}") from None


def find_root(start: Path | None = None) -> Path:
    """The fleet root: $SPARKFLEET_ROOT, else the nearest parent of `start` holding hosts/fleet.toml."""
    env = os.environ.get("SPARKFLEET_ROOT")
    if env:
        return Path(env)
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / FLEET_FILE).is_file():
            return candidate
    raise InventoryError(
        f"no {FLEET_FILE} in {here} or any parent",
        hint="run inside a sparkfleet checkout, pass --root, or set SPARKFLEET_ROOT",
    )


def _host(name: str, defaults: dict[str, Any], own: dict[str, Any], path: Path) -> Host:
    merged = {**defaults, **own}
    missing = [k for k in ("address", "ssh_user", "local_hub", "nas_hub") if k not in merged]
    if missing:
        raise InventoryError(
            f"{path}: hosts.{name}: missing {', '.join(missing)} (set it on the host or in [defaults])"
        )
    return Host(
        name=name,
        address=merged["address"],
        ssh_user=merged["ssh_user"],
        ssh_port=int(merged.get("ssh_port", 22)),
        local_hub=Path(merged["local_hub"]),
        nas_hub=Path(merged["nas_hub"]),
        reserve_bytes=int(float(merged.get("reserve_gib", 0)) * GIB),
        ssh_key=Path(merged["ssh_key"]) if "ssh_key" in merged else None,
        fabric_ip=merged.get("fabric_ip"),
        state_dir=Path(merged["state_dir"]) if "state_dir" in merged else None,
        nas_export=merged.get("nas_export"),
        os=merged.get("os", "dgx-os"),
        stack={**defaults.get("stack", {}), **own.get("stack", {})},
    )


def _pin(name: str, doc: dict[str, Any]) -> Pin:
    kind = doc["kind"]
    if kind == "hf":
        return Pin(name, kind, doc["revision"], doc["repo"], note=doc.get("note"))
    if kind == "git":
        return Pin(name, kind, doc["rev"], doc["repo"], note=doc.get("note"), nix_hash=doc.get("nix_hash"))
    if kind == "url":
        return Pin(name, kind, doc["sha256"], doc["url"], note=doc.get("note"), commit=doc.get("commit"))
    return Pin(
        name,
        kind,
        doc["digest"],
        doc["image"],
        tag=doc.get("tag"),
        note=doc.get("note"),
        nix_hash=doc.get("nix_hash"),
    )


def _lane(name: str, doc: dict[str, Any], path: Path, hosts: dict[str, Host], pins: dict[str, Pin]) -> Lane:
    for i, host in enumerate(doc["lane"]["hosts"]):
        if host not in hosts:
            raise InventoryError(
                f"{path}: lane.hosts[{i}]: unknown host {host!r}",
                hint=f"expected one of: {', '.join(sorted(hosts))}",
            )
    models = []
    for i, m in enumerate(doc["models"]):
        pin = pins.get(m["pin"])
        if pin is None or pin.kind != "hf":
            known = ", ".join(sorted(n for n, p in pins.items() if p.kind == "hf"))
            raise InventoryError(
                f"{path}: models[{i}].pin: {m['pin']!r} is not an hf pin in {FLEET_FILE}",
                hint=f"expected one of: {known}",
            )
        models.append(
            ModelNeed(
                pin=pin.name,
                repo=pin.source,
                revision=pin.value,
                include=tuple(m.get("include", ())),
                exclude=tuple(m.get("exclude", ())),
            )
        )
    return Lane(
        name=name,
        hosts=tuple(doc["lane"]["hosts"]),
        models=tuple(models),
        recipe_path=path,
        description=doc["lane"].get("description", ""),
        raw=doc,
    )


def load(root: Path | None = None) -> Inventory:
    """Load and validate the whole inventory under `root` (see `find_root`)."""
    root = Path(root) if root is not None else find_root()
    fleet_path = root / FLEET_FILE
    fleet = read_toml(fleet_path)
    validate(fleet, "fleet", fleet_path)
    defaults = fleet.get("defaults", {})
    hosts = {name: _host(name, defaults, own, fleet_path) for name, own in fleet["hosts"].items()}
    pins = {name: _pin(name, doc) for name, doc in fleet.get("pins", {}).items()}
    lanes = {}
    recipes = root / RECIPES_DIR
    for recipe_path in sorted(recipes.glob(f"*/{RECIPE_FILE}")) if recipes.is_dir() else []:
        name = recipe_path.parent.name
        doc = read_toml(recipe_path)
        validate(doc, "recipe", recipe_path)
        lanes[name] = _lane(name, doc, recipe_path, hosts, pins)
    return Inventory(root=root, hosts=hosts, pins=pins, lanes=lanes)
