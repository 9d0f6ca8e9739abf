"""The fleet inventory: TOML in, validated frozen dataclasses out.

This is the only module that knows TOML. `hosts/fleet.toml` holds hosts and pins; each lane is
`recipes/<lane>/recipe.toml` (the lane's name is its folder's name, so it is never restated).
Both files are validated with the JSON Schemas shipped in `sparkfleet/fleet/schema/`; every error
names the file, the key path inside it and what was expected, and nothing is half-loaded.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base.errors import InventoryError
from .sections import RecipeSections, recipe_sections
from .wakeaddr import EXAMPLE, broadcast_problem

if TYPE_CHECKING:
    import jsonschema

FLEET_FILE = Path("hosts/fleet.toml")
RECIPES_DIR = Path("recipes")
RECIPE_FILE = "recipe.toml"

_HEX40 = re.compile(r"[0-9a-f]{40}")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
GIB = 1024**3
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


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
    # The host's DRM card (/dev/dri/cardN): given to a lane's containers that keep KV in display memory.
    drm_card: str | None = None
    # Node-local directory for launch records and rank logs (default: beside local_hub).
    state_dir: Path | None = None
    # The NFS export holding the NAS hub cache (server:/path), mounted at nas_hub's parent.
    nas_export: str | None = None
    # "nixos" or "dgx-os" (Nix on Ubuntu): which deploy-rs profiles the host takes (modules/lib/fleet.nix).
    os: str = "dgx-os"
    # The [host_kinds] entry holding this machine's physical figures (the roofline's primitives).
    kind: str | None = None
    # How containers get the GPU: "gpus" (docker --gpus all, the NVIDIA runtime hook on DGX OS) or
    # "cdi" (--device nvidia.com/gpu=all; NixOS has only CDI, nixpkgs#340386).
    gpu_access: str = "gpus"
    # Container --ulimit values. RDMA wants memlock unlimited, but an engine whose hard limit is
    # lower refuses `memlock=-1` (and podman 4.3 adds nofile/nproc = 1048576 to any --ulimit).
    ulimits: tuple[tuple[str, int | str], ...] = (("memlock", "unlimited"), ("stack", 67108864))

    # What the host runs for the fleet as deployed units: "gateway", "registry" (hostfacts.services).
    services: tuple[str, ...] = ()

    # Wake-on-LAN (sparkfleet power on): the LAN NIC's MAC and the broadcast address to send to.
    mac: str | None = None
    wol_broadcast: str | None = None

    # The host's Prometheus node exporter, when it runs one (sparkfleet view targets lists it).
    node_exporter_port: int | None = None

    # The known-good host stack (kernel, driver, cuda, nccl, firmware): [defaults.stack] + [hosts.X.stack].
    stack: dict[str, str] = field(default_factory=dict, compare=False)

# The peers' `--ulimit memlock=-1 --ulimit stack=67108864`, unless a host says otherwise.
DEFAULT_ULIMITS = Host.ulimits

# A figure's unit as written -> its base unit (bytes/s or FLOP/s).
UNIT_SCALE = {"GB/s": 1e9, "Gb/s": 1e9 / 8, "MB/s": 1e6, "TFLOP/s": 1e12}


def state_dir_of(host: Host) -> Path:
    """Node-local records and logs: the host's state_dir, else beside its local hub. A fact of the
    host (every floor asks it: launch, images, roofline, doctor), so it lives with the host."""
    return host.state_dir or host.local_hub.parent / "sparkfleet"


@dataclass(frozen=True)
class Figure:
    """A physical figure of a kind of host, as declared: value (None = not published) and source."""

    name: str
    value: float | None  # as written, in `unit`
    unit: str
    source: str

    @property
    def base(self) -> float | None:
        """The value in bytes/s or FLOP/s."""
        return None if self.value is None else self.value * UNIT_SCALE[self.unit]


@dataclass(frozen=True)
class HostKind:
    """A kind of machine (GB10 Spark): the figures a bound is computed from."""

    name: str
    description: str
    figures: dict[str, Figure]


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
    # git pins: where hosts clone it from (a NAS mirror for hosts without internet); None: GitHub.
    url: str | None = None

    @property
    def resolved(self) -> bool:
        """Whether the value is a full, immutable identifier (derived from its form, never stated)."""
        if self.kind == "oci":
            return _DIGEST.fullmatch(self.value) is not None
        if self.kind == "url":
            return _SHA256.fullmatch(self.value) is not None
        return _HEX40.fullmatch(self.value) is not None

    @property
    def clone_url(self) -> str:
        """Where a git pin is cloned from: its `url` (a mirror), else GitHub's copy of `repo`."""
        return self.url or f"https://github.com/{self.source}"

    @property
    def ref(self) -> str:
        """`source@value`: how a pin is named to a person, a record and an engine (an OCI reference
        `image@sha256:…`, a repo at its revision), spelled the same everywhere."""
        return f"{self.source}@{self.value}"


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
    # Every other section of the recipe, typed once here (fleet.sections); readers never see the TOML.
    sections: RecipeSections = field(default_factory=RecipeSections, compare=False, repr=False)

    @property
    def replica_hosts(self) -> tuple[str, ...]:
        """Every host of every copy (`[gateway] replicas`), in replica order: the hosts that hold
        the lane's pins (staging, its units, its keys), where `hosts` is the one copy launch runs."""
        return tuple(h for hosts in replica_sets(self) for h in hosts)


def replica_sets(lane: Lane) -> list[tuple[str, ...]]:
    """The lane's host sets in replica order; a lane without `[gateway] replicas` has one.

    The inventory checked the sets (`_replica_problems`): known hosts, equal sizes, none shared,
    the first one `lane.hosts`. Replica 0 is `lane.hosts` itself, so a launch view of replica N
    (lane.replicas.replica_inventory, which moves `hosts` only) still reads every set."""
    gateway = lane.sections.gateway
    sets = gateway.replicas if gateway is not None else None
    return list(sets) if sets else [tuple(lane.hosts)]


def replica_of_host(lane: Lane, host: str) -> int | None:
    """Which copy of `lane` `host` belongs to (0: `lane.hosts`); None where it is in none."""
    return next((i for i, hosts in enumerate(replica_sets(lane)) if host in hosts), None)


def replica_lane(lane: Lane, replica: int) -> Lane:
    """`lane` run as copy `replica` (an index `replica_sets` has): on that copy's hosts, with
    `[world] ranks` carried over by position, so rank r of every copy is the host in r's place.
    Launch's replica view (lane.replicas) and a copy's host's own engram packs read the same."""
    hosts = replica_sets(lane)[replica]
    if hosts == tuple(lane.hosts):
        return lane
    by_position = dict(zip(lane.hosts, hosts, strict=True))
    world = lane.sections.world
    if world.ranks:
        world = replace(world, ranks={by_position[h]: r for h, r in world.ranks.items()})
    return replace(lane, hosts=hosts, sections=replace(lane.sections, world=world))


@dataclass(frozen=True)
class Inventory:
    """Everything the fleet knows about itself."""

    root: Path
    hosts: dict[str, Host]
    pins: dict[str, Pin]
    lanes: dict[str, Lane]
    host_kinds: dict[str, HostKind] = field(default_factory=dict)

    def host(self, name: str) -> Host:
        try:
            return self.hosts[name]
        except KeyError:
            raise InventoryError(
                f"unknown host {name!r} (known: {', '.join(sorted(self.hosts))})",
                hint=f"hosts are declared in {self.root / FLEET_FILE}",
            ) from None

    def pin_of(self, name: str, kind: str, key: str) -> Pin:
        """The pin `name`, which a recipe's `key` needs to be of `kind`; else an error at `key`
        listing the pins of that kind (a tree's git pin, engram's hf pin)."""
        pin = self.pins.get(name)
        if pin is None or pin.kind != kind:
            known = ", ".join(sorted(n for n, p in self.pins.items() if p.kind == kind)) or "none"
            article = "an" if kind in ("hf", "oci") else "a"
            raise InventoryError(
                f"{key}: {name!r} is not {article} {kind} pin", hint=f"expected one of: {known}"
            )
        return pin

    def lane(self, name: str) -> Lane:
        try:
            return self.lanes[name]
        except KeyError:
            hint = f"a lane is a folder {self.root / RECIPES_DIR}/<lane>/ with a {RECIPE_FILE}"
            demo = demo_fleet_near(self.root)
            if demo and demo.resolve() != self.root.resolve() and (demo / RECIPES_DIR / name).is_dir():
                hint = _use_demo(demo, f"{name} is a lane of the demo; its fleet")
            raise InventoryError(
                f"unknown lane {name!r} (known: {', '.join(sorted(self.lanes)) or 'none'})", hint=hint
            ) from None

    def lanes_of(self, host: str) -> list[Lane]:
        """The lanes that run on `host` as any of their copies (`Lane.replica_hosts`), in name
        order: what the host stages, its staging unit reads and `bootstrap` gives a key for."""
        return [lane for _, lane in sorted(self.lanes.items()) if host in lane.replica_hosts]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the inventory: the file, the key path inside it, and what was expected."""

    file: Path
    key: str
    message: str
    hint: str | None = None

    def __str__(self) -> str:
        return f"{self.file}: {self.key}: {self.message}"

    def error(self, more: int = 0) -> InventoryError:
        tail = f" (and {more} more; `sparkfleet inventory check` lists them all)" if more else ""
        return InventoryError(f"{self}{tail}", hint=self.hint)


@cache
def schema(name: str) -> dict[str, Any]:
    """A JSON Schema shipped with the package (`fleet` or `recipe`)."""
    text = resources.files("sparkfleet.fleet").joinpath("schema", f"{name}.schema.json").read_text()
    return json.loads(text)


@cache
def _python_regex(pattern: str) -> re.Pattern:
    """A schema pattern with ECMA-262's `$` (end of input), not Python's (also before a final newline)."""
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    return re.compile(pattern)


def _pattern(validator, pattern, instance, schema_):
    from jsonschema import ValidationError

    if validator.is_type(instance, "string") and not _python_regex(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _property_names(validator, property_names, instance, schema_):
    # Like the standard keyword, but the error points at the offending key itself.
    from jsonschema import ValidationError

    if not validator.is_type(instance, "object"):
        return
    for name in instance:
        for error in validator.descend(instance=name, schema=property_names):
            yield ValidationError(f"key {name!r}: {error.message}", path=[name])


@cache
def _validator_class() -> type:
    """Draft 2020-12 with the two keywords above, built on first use: importing jsonschema costs
    ~130 ms, which a verb that reads no inventory (`stage --source/--dest`) must not pay."""
    import jsonschema

    return jsonschema.validators.extend(
        jsonschema.Draft202012Validator, {"pattern": _pattern, "propertyNames": _property_names}
    )


def _key_path(parts: Any) -> str:
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not _PLAIN_KEY.fullmatch(str(part)):
            out += f"[{str(part)!r}]"  # a hostile key is shown quoted, control characters escaped
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def _best_branch_error(context: list) -> jsonschema.ValidationError:
    """For a oneOf/anyOf failure: the error of the branch whose discriminator (`kind`) matched."""
    branches: dict = {}
    for e in context:
        branches.setdefault(e.schema_path[0] if e.schema_path else None, []).append(e)
    matching = [errs for errs in branches.values() if not any(list(e.path)[-1:] == ["kind"] for e in errs)]
    candidates = matching[0] if matching else context
    return max(candidates, key=lambda e: len(e.absolute_path))


def _message(err: jsonschema.ValidationError) -> str:
    """The schema error in the inventory's words: an enum names its valid values plainly."""
    if err.validator == "enum":
        return f"{err.instance!r}: expected one of {', '.join(map(str, err.validator_value))}"
    if err.validator == "const":
        return f"{err.instance!r}: expected {err.validator_value!r}"
    if (
        err.validator == "pattern"
        and list(err.absolute_path)[:2] == ["launch", "env"]
        and len(err.absolute_path) == 3
    ):
        # an env value may be a secret: say what is wrong with it, never echo it
        return f"the value (not shown: env values may be secrets) does not match {err.validator_value!r}"
    if err.validator == "pattern" and isinstance(err.schema.get("description"), str):
        # a pattern alone rarely says why (a tmpfiles path's refused characters): the schema does
        return f"{err.message}: expected {err.schema['description']}"
    return err.message


def schema_problems(document: dict[str, Any], schema_name: str, path: Path) -> list[Problem]:
    """Every schema violation of `document`, each naming file, key path and expectation."""
    validator = _validator_class()(schema(schema_name))
    errors = sorted(
        validator.iter_errors(document), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path)))
    )
    problems: list[Problem] = []
    seen: set[tuple[str, str]] = set()
    for err in errors:
        # oneOf failures hide the useful message in their context; pick the branch that got furthest.
        if err.context:
            if err.validator == "oneOf" and any(
                list(e.absolute_path)[: len(err.absolute_path) + 1] == [*err.absolute_path, "kind"]
                for e in errors
                if e is not err
            ):
                continue  # the kind itself is wrong: that error says it better
            err = _best_branch_error(err.context)
        key = (_key_path(err.absolute_path), _message(err))
        if key not in seen:
            seen.add(key)
            problems.append(Problem(path, key[0], key[1], hint=f"see the schema {schema_name}.schema.json"))
    return problems


def validate(document: dict[str, Any], schema_name: str, path: Path) -> None:
    """Raise InventoryError naming file, key path and expectation for the first schema violation."""
    problems = schema_problems(document, schema_name, path)
    if problems:
        raise problems[0].error(len(problems) - 1)


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
    demo = demo_fleet_near(here)
    raise InventoryError(
        f"no {FLEET_FILE} in {here} or any parent",
        hint=_use_demo(demo, "the demo's fleet")
        if demo
        else f"run inside a sparkfleet checkout, pass --root DIR or set SPARKFLEET_ROOT (after `make demo`: "
        f"--root {DEMO_FLEET})",
    )


DEMO_FLEET = Path(".demo") / "fleet"  # where `make demo` (sparkfleet demo --workdir .demo) writes its fleet


def demo_fleet_near(start: Path | None = None) -> Path | None:
    """The fleet `make demo` wrote in `start` or a parent (the checkout it ran in), if there is one."""
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / DEMO_FLEET / FLEET_FILE).is_file():
            return candidate / DEMO_FLEET
    return None


def _use_demo(demo: Path, what: str) -> str:
    """How to point sparkfleet at the demo's fleet, in words a newcomer can paste."""
    shown = os.path.relpath(demo, Path.cwd().resolve())
    return f"{what} is {shown}: pass --root {shown}, or export SPARKFLEET_ROOT={demo}"


_HOST_REQUIRED = ("address", "ssh_user", "local_hub", "nas_hub")


def _host(name: str, defaults: dict[str, Any], own: dict[str, Any]) -> Host:
    merged = {**defaults, **own}
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
        drm_card=merged.get("drm_card"),
        state_dir=Path(merged["state_dir"]) if "state_dir" in merged else None,
        nas_export=merged.get("nas_export"),
        os=merged.get("os", "dgx-os"),
        kind=merged.get("kind"),
        gpu_access=merged.get("gpu_access", "cdi" if merged.get("os") == "nixos" else "gpus"),
        ulimits=tuple(merged["ulimits"].items()) if "ulimits" in merged else DEFAULT_ULIMITS,
        stack={**defaults.get("stack", {}), **own.get("stack", {})},
        services=tuple(sorted(merged.get("services", ()))),
        mac=own.get("mac"),  # one NIC's: never a default
        wol_broadcast=merged.get("wol_broadcast"),
        node_exporter_port=merged.get("node_exporter_port"),
    )


def _host_kind(name: str, doc: dict[str, Any]) -> HostKind:
    figures = {
        key: Figure(key, value.get("value"), value["unit"], value["source"])
        for key, value in doc.items()
        if isinstance(value, dict)
    }
    return HostKind(name, doc.get("description", ""), figures)


def _pin(name: str, doc: dict[str, Any]) -> Pin:
    kind = doc["kind"]
    if kind == "hf":
        return Pin(name, kind, doc["revision"], doc["repo"], note=doc.get("note"))
    if kind == "git":
        return Pin(
            name, kind, doc["rev"], doc["repo"], note=doc.get("note"), nix_hash=doc.get("nix_hash"),
            url=doc.get("url"),
        )
    if kind == "url":
        return Pin(name, kind, doc["sha256"], doc["url"], note=doc.get("note"), commit=doc.get("commit"))
    return Pin(  # a tag alone (no digest published yet) is unresolved: `sparkfleet pins resolve` asks
        name,
        kind,
        doc.get("digest", ""),
        doc["image"],
        tag=doc.get("tag"),
        note=doc.get("note"),
        nix_hash=doc.get("nix_hash"),
    )


def _lane_problems(
    doc: dict[str, Any], path: Path, hosts: dict[str, Host], pins: dict[str, Pin]
) -> list[Problem]:
    """Cross-file checks of a schema-valid recipe: its hosts and pins exist in fleet.toml."""
    problems = []
    for i, host in enumerate(doc["lane"]["hosts"]):
        if host not in hosts:
            problems.append(
                Problem(
                    path,
                    f"lane.hosts[{i}]",
                    f"unknown host {host!r}",
                    f"expected one of: {', '.join(sorted(hosts))}",
                )
            )
    problems += _replica_problems(doc, path, hosts)
    known = ", ".join(sorted(n for n, p in pins.items() if p.kind == "hf"))
    for i, m in enumerate(doc["models"]):
        pin = pins.get(m["pin"])
        if pin is None or pin.kind != "hf":
            problems.append(
                Problem(
                    path,
                    f"models[{i}].pin",
                    f"{m['pin']!r} is not an hf pin in {FLEET_FILE}",
                    f"expected one of: {known}",
                )
            )
    return problems


def _replica_problems(doc: dict[str, Any], path: Path, hosts: dict[str, Host]) -> list[Problem]:
    """`[gateway] replicas`: known hosts, the first set is lane.hosts, equal sizes, no shared host."""
    replicas = doc.get("gateway", {}).get("replicas")
    if replicas is None:
        return []
    problems: list[Problem] = []
    owner: dict[str, int] = {}
    lane_hosts = list(doc["lane"]["hosts"])

    def problem(key: str, message: str, hint: str) -> None:
        problems.append(Problem(path, key, message, hint))

    if list(replicas[0]) != lane_hosts:
        problem("gateway.replicas[0]", f"{replicas[0]} is not lane.hosts {lane_hosts}",
                "the first replica is the lane's own hosts, in rank order")  # fmt: skip
    for i, group in enumerate(replicas):
        if len(group) != len(lane_hosts):
            problem(f"gateway.replicas[{i}]", f"{len(group)} hosts where lane.hosts has {len(lane_hosts)}",
                    "every replica runs the same recipe, on as many hosts")  # fmt: skip
        for j, host in enumerate(group):
            if host not in hosts:
                problem(f"gateway.replicas[{i}][{j}]", f"unknown host {host!r}",
                        f"expected one of: {', '.join(sorted(hosts))}")  # fmt: skip
            elif host in owner and owner[host] != i:
                problem(f"gateway.replicas[{i}]", f"shares host {host} with gateway.replicas[{owner[host]}]",
                        "replicas run on disjoint host sets (they would share the GPU)")  # fmt: skip
            else:
                owner[host] = i
    return problems


def _lane(name: str, doc: dict[str, Any], path: Path, hosts: dict[str, Host], pins: dict[str, Pin]) -> Lane:
    models = []
    for m in doc["models"]:
        pin = pins[m["pin"]]
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
        sections=recipe_sections(doc),
    )


def wol_broadcast_problem(path: Path, host: Host, fleet: dict[str, Any]) -> Problem | None:
    """A `wol_broadcast` that is not a broadcast address, named at the key that set it."""
    if host.wol_broadcast is None:
        return None
    why = broadcast_problem(host.wol_broadcast)
    if why is None:
        return None
    own = "wol_broadcast" in fleet["hosts"][host.name]
    key = f"hosts.{host.name}.wol_broadcast" if own else "defaults.wol_broadcast"
    return Problem(path, key, why, hint=f"expected {EXAMPLE}")


@dataclass
class InventoryCheck:
    """Every problem found, and the inventory as far as it loaded (lanes with problems left out)."""

    root: Path
    problems: list[Problem]
    inventory: Inventory | None


_LANE_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
LANE_NAME = _LANE_NAME  # what a lane (and so a recipes/<lane>/ folder) may be called


def check(root: Path | None = None) -> InventoryCheck:
    """Validate the whole inventory under `root`, collecting every problem instead of stopping at one."""
    root = Path(root) if root is not None else find_root()
    fleet_path = root / FLEET_FILE
    fleet = read_toml(fleet_path)
    problems = schema_problems(fleet, "fleet", fleet_path)
    if problems:
        return InventoryCheck(root, problems, None)
    defaults = fleet.get("defaults", {})
    hosts: dict[str, Host] = {}
    for name, own in fleet["hosts"].items():
        missing = [k for k in _HOST_REQUIRED if k not in {**defaults, **own}]
        if missing:
            why = f"missing {', '.join(missing)} (set it on the host or in [defaults])"
            problems.append(Problem(fleet_path, f"hosts.{name}", why))
        else:
            hosts[name] = _host(name, defaults, own)
    pins = {name: _pin(name, doc) for name, doc in fleet.get("pins", {}).items()}
    kinds = {name: _host_kind(name, doc) for name, doc in fleet.get("host_kinds", {}).items()}
    for host in hosts.values():
        wol = wol_broadcast_problem(fleet_path, host, fleet)
        if wol:
            problems.append(wol)
        if host.kind is not None and host.kind not in kinds:
            problems.append(
                Problem(
                    fleet_path,
                    f"hosts.{host.name}.kind",
                    f"unknown host kind {host.kind!r}",
                    hint=f"expected one of: {', '.join(sorted(kinds)) or '(none declared in [host_kinds])'}",
                )
            )
    lanes = {}
    recipes = root / RECIPES_DIR
    for recipe_path in sorted(recipes.glob(f"*/{RECIPE_FILE}")) if recipes.is_dir() else []:
        name = recipe_path.parent.name
        if not _LANE_NAME.fullmatch(name):
            problems.append(
                Problem(
                    recipe_path.parent,
                    "(lane folder name)",
                    f"{name!r} is not a valid lane name",
                    hint="a lane folder is named like a host: [a-z0-9][a-z0-9._-]{0,62}",
                )
            )
            continue
        try:
            doc = read_toml(recipe_path)
        except InventoryError as exc:
            problems.append(Problem(recipe_path, "(file)", exc.message.split(": ", 1)[-1]))
            continue
        found = schema_problems(doc, "recipe", recipe_path) or _lane_problems(doc, recipe_path, hosts, pins)
        problems += found
        if not found:
            lanes[name] = _lane(name, doc, recipe_path, hosts, pins)
    return InventoryCheck(
        root, problems, Inventory(root=root, hosts=hosts, pins=pins, lanes=lanes, host_kinds=kinds)
    )


def load(root: Path | None = None) -> Inventory:
    """Load and validate the whole inventory under `root` (see `find_root`); the first problem raises."""
    result = check(root)
    if result.problems:
        raise result.problems[0].error(len(result.problems) - 1)
    assert result.inventory is not None
    return result.inventory
