"""`sparkfleet doctor HOST|LANE`: one line per fact a launch depends on, each with a fix hint.

Every check answers from the node itself (through the launch agent), because each of the night
shift's failures was a node-local fact: a wrong blob in the local tree, a root-owned receipt root,
a missing local directory, an env the adapters read differently. A check is ✓, ✗ or – (does not
apply here, e.g. no nvidia-smi on a test host).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from ..base.errors import ExitCode, SparkfleetError
from ..facts import apikeys
from ..facts.display import DisplayNeed
from ..facts.memory import MemoryFacts, admit, summary
from ..fleet.inventory import GIB, Host, Inventory, state_dir_of
from ..fleet.kittrees import KitVerdict
from ..images.record import built_image_id
from ..lane.manifest import build_manifest
from ..lane.recipe import LaunchRecipe, launch_recipe
from ..lane.replicas import host_inventory, instance_name, replica_inventory
from ..lane.spec import build_spec, cache_dir_of, cache_seed_of, check_env_extras, check_world, receipt_paths
from ..launch.plan import image_fix, image_mismatch, image_request, lost_digest, node_facts, probe_request
from ..node.protocol import DoctorRequest
from ..remote.hosts import HostUnreachable, LocalHost, connect
from ..remote.hoststack import STACK_KEYS, HostFingerprint, drift
from ..remote.nodecall import ask_host


@dataclass(frozen=True)
class Check:
    host: str
    name: str
    ok: bool | None  # None: not applicable here
    detail: str  # may name entries of `sizes` as {name}: the CLI formats the byte counts
    hint: str | None = None
    sizes: dict[str, int] = field(default_factory=dict)
    refuses: bool = False  # a failed check that launch refuses on (ExitCode.REFUSED), e.g. image drift

    def text(self, fmt_bytes: Callable[[int], str]) -> str:
        """The detail with its byte counts formatted by the caller (formatting belongs to the CLI)."""
        if not self.sizes:
            return self.detail
        return self.detail.format(**{k: fmt_bytes(v) for k, v in self.sizes.items()})

    @property
    def mark(self) -> str:
        return {True: "✓", False: "✗", None: "–"}[self.ok]


@dataclass
class DoctorReport:
    target: str
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok is not False for c in self.checks)

    @property
    def exit_code(self) -> int:
        """OK; UNREACHABLE when a host could not be reached; REFUSED for a check launch refuses on
        (image drift); else SHORTFALL for a failed check."""
        if self.ok:
            return ExitCode.OK
        if any(c.name == "ssh" and c.ok is False for c in self.checks):
            return ExitCode.UNREACHABLE
        if self.refused:
            return ExitCode.REFUSED
        return ExitCode.SHORTFALL

    @property
    def refused(self) -> bool:
        """A failed check is one launch would refuse on: exit ExitCode.REFUSED, not SHORTFALL."""
        return any(c.ok is False and c.refuses for c in self.checks)


def _recipes_for(inv: Inventory, target: str) -> tuple[list[str], list[LaunchRecipe]]:
    if target in inv.lanes:
        lane = inv.lane(target)
        recipe = launch_recipe(inv, target) if lane.sections.launch is not None else None
        return list(lane.hosts), [recipe] if recipe else []
    inv.host(target)  # raises a clear error for an unknown name
    recipes = [launch_recipe(inv, ln.name) for ln in inv.lanes_of(target) if ln.sections.launch is not None]
    return [target], recipes


def kit_checks(host_name: str, verdicts: list[dict]) -> list[Check]:
    """One check per kit checkout the lane binds ([[launch.trees]]), as the node's agent judged it
    with verify's own test (stage/kits.verify_kits): at the pinned rev, clean, every needed file at
    its sha256; else ✗ with why and `sparkfleet stage HOST --lane L`, which launch refuses on."""
    out = []
    for v in (KitVerdict(**d) for d in verdicts):
        out.append(Check(host_name, "kit checkout", v.ok, v.summary(), v.fix or None, refuses=not v.ok))
    return out


def _host_checks(
    inv: Inventory, host_name: str, recipes: list[LaunchRecipe], deploy: bool = False
) -> list[Check]:
    host = inv.host(host_name)
    out: list[Check] = []
    recipe = recipes[0] if recipes else None
    req = DoctorRequest(local_hub=str(host.local_hub), nas_hub=str(host.nas_hub))
    if recipe:
        req = DoctorRequest.asking(
            probe_request(inv, recipe, host),
            receipt_roots=_receipt_host_paths(inv, recipe, host_name),
            image=recipe.image.ref if recipe.image else None,
            runtime=recipe.runtime,
            lane=recipe.lane,
            state_dir=str(state_dir_of(host)),
            port=recipe.port,
        )
    built, built_error = None, None
    if recipe and recipe.runtime in ("docker", "podman") and recipe.image_build:
        try:
            built = built_image_id(recipe)
            req = dataclasses.replace(req, built_image=image_request(recipe, host, built))
        except SparkfleetError as exc:
            built_error = exc
    try:
        ans = ask_host(inv, host_name, req, timeout=600)
    except HostUnreachable as exc:
        wake = f"sparkfleet power on {host_name}" if host.mac else f"power {host_name} on (no mac to wake it)"
        return [
            Check(
                host_name, "ssh", False, f"powered off or unreachable: {exc.message}", f"{wake}; {exc.hint}"
            )
        ]
    except SparkfleetError as exc:
        return [Check(host_name, "agent", False, exc.message, exc.hint)]
    runner = connect(host)
    how = (
        "this machine (no ssh)"
        if isinstance(runner, LocalHost)
        else (f"reachable as {host.ssh_user}@{host.address}:{host.ssh_port}")
    )
    out.append(Check(host_name, "ssh", True, how))
    if host.os == "dgx-os" and deploy:  # deploy-rs onto Ubuntu + Nix: what `bootstrap` sets up
        out += _deploy_checks(runner, host)
    elif host.os == "dgx-os":  # only `deploy .#HOST` needs them: a lane served without deploy is fine
        out.append(Check(host_name, "deploy prereqs", None, "not checked: only deploy needs them (--deploy)",
                         f"sparkfleet doctor {host_name} --deploy"))  # fmt: skip

    facts = node_facts(host_name, ans)
    need = host.reserve_bytes + int((recipe.needs_gib if recipe else 0) * GIB)
    free = ans["disk"]["free"]
    out.append(
        Check(
            host_name,
            "free space",
            free >= need,
            f"{{free}} free on {ans['disk']['path']}, needs {{need}} (reserve + lane)",
            "free space on the local NVMe or lower reserve_gib",
            sizes={"free": free, "need": need},
        )
    )
    for err in facts.model_errors:
        out.append(Check(host_name, "models", False, err, "is the NAS hub mounted read-only on the node?"))
    for m in facts.models:
        staged = sum(1 for f in m.files if not f.excluded)
        excluded = len(m.files) - staged
        detail = f"{m.repo}@{m.commit[:10]}: {staged} entries staged, {excluded} excluded"
        if m.local_verified:
            out.append(Check(host_name, "staged+verified", True, detail + ", verify clean"))
        else:
            why = "; ".join(m.problems[:2]) or "not staged"
            out.append(
                Check(
                    host_name,
                    "staged+verified",
                    False,
                    f"{detail}: {why}",
                    f"sparkfleet stage {host_name} --lane {recipe.lane}"
                    if recipe
                    else f"sparkfleet stage {host_name}",
                )
            )
    if recipe:
        out += kit_checks(host_name, facts.kits)
    if recipe and recipe.receipt_roots:
        spec_roots = req.receipt_roots
        stale = [x for x in ans["receipts"] if x.get("exists")]
        removable = ans["euid"] == 0 or ans["sudo_n"] or all(x.get("removable_as_me") for x in stale)
        detail = f"{len(stale)} of {len(spec_roots)} receipt roots present" + (
            f" ({', '.join(x['path'] for x in stale)})" if stale else ""
        )
        out.append(
            Check(
                host_name,
                "receipt roots",
                removable,
                detail + ("; removable" if removable else "; NOT removable (no root, no sudo -n)"),
                None if removable else "allow passwordless `sudo rm` of the receipt roots",
            )
        )
    if recipe and recipe.runtime in ("docker", "podman") and recipe.image_build:
        out.append(built_image_check(host_name, recipe, built, built_error, ans.get("image_state") or {}))
    elif recipe and recipe.runtime in ("docker", "podman") and recipe.image:
        img = ans.get("image", {})
        if not recipe.image.resolved:
            out.append(
                Check(
                    host_name,
                    "image",
                    False,
                    f"pin {recipe.image.name} is unresolved ({recipe.image.value})",
                    "sparkfleet pins resolve",
                )
            )
        else:
            out.append(
                Check(
                    host_name,
                    "image",
                    bool(img.get("present")),
                    img.get("detail", ""),
                    f"load {recipe.image.ref} on the node",
                )
            )
    elif recipe:
        out.append(Check(host_name, "image", None, f"runtime {recipe.runtime}: no image"))
    if recipe and recipe.fabric == "roce":
        if facts.fabric:
            f = facts.fabric
            out.append(
                Check(
                    host_name,
                    "fabric",
                    True,
                    f"{f.fabric_ip}: HCAs {','.join(f.hcas)}, GID index {f.gid_index}, netdev {f.netdev}",
                )
            )
        else:
            out.append(
                Check(
                    host_name,
                    "fabric",
                    False,
                    facts.fabric_error or "not detected",
                    "set fabric_ip in hosts/fleet.toml; check the RoCE netdev",
                )
            )
    else:
        out.append(Check(host_name, "fabric", None, "lane needs no RoCE fabric" if recipe else "no lane"))
    if recipe and recipe.display and facts.display is not None:
        out.append(display_check(host_name, recipe.display, facts.display))
    if recipe and facts.cache_seed is not None:
        out.append(cache_seed_check(inv, host_name, recipe, facts.cache_seed))
    if recipe and "api_key" in ans:
        out.append(_api_key_check(host_name, recipe, ans["api_key"]))
    gpu = ans.get("gpu", {})
    if gpu.get("available"):
        busy = gpu.get("apps", [])
        ours = [r for r in ans.get("ranks", []) if r.get("running")]
        out.append(
            Check(
                host_name,
                "GPU",
                not busy or bool(ours),
                f"{len(busy)} compute apps" + (f": {busy[0]}" if busy else ""),
                "stop what holds the GPU",
            )
        )
    else:
        out.append(Check(host_name, "GPU", None, "nvidia-smi not present"))
    out.append(_stack_check(host, HostFingerprint.from_dict({**ans["fingerprint"], "host": host_name})))
    if recipe and ans.get("memory"):
        mem = MemoryFacts(**ans["memory"])
        problems = admit(host_name, recipe.memory, mem)
        out.append(Check(host_name, "memory", not problems, "; ".join(problems) or summary(mem),
                         "free memory or lower [launch.memory] of the lane"))  # fmt: skip
    if recipe:
        try:
            lane = inv.lane(recipe.lane)
            check_world(recipe.world, lane.hosts, str(lane.recipe_path))
            check_env_extras(recipe.env, str(lane.recipe_path))
            manifest = build_manifest(
                host_name,
                host.local_hub,
                host.nas_hub,
                facts.models,
                recipe.hub_mount if recipe.runtime != "process" else None,
            )
            fabrics = {host_name: facts.fabric}
            spec = build_spec(inv, recipe, host_name, manifest, fabrics)
            out.append(
                Check(
                    host_name,
                    "env",
                    True,
                    f"rank {spec.rank}/{spec.nnodes}: TP_SIZE={spec.env['TP_SIZE']} "
                    f"EP_SIZE={spec.env['EP_SIZE']} NODE_RANK={spec.env['NODE_RANK']}; "
                    f"{manifest.local} local + {manifest.nas} NAS binds",
                )
            )
        except SparkfleetError as exc:
            out.append(Check(host_name, "env", False, exc.message, exc.hint))
    return out


def _deploy_checks(runner, host: Host) -> list[Check]:
    """The host prerequisites of `deploy .#HOST` on DGX OS, each with its fix (sparkfleet.ops.bootstrap)."""
    from .bootstrap import ROOT_PREFIX_ENV, gather, prereqs

    try:
        facts = gather(runner, host.ssh_user, os.environ.get(ROOT_PREFIX_ENV, ""))
    except SparkfleetError as exc:
        return [Check(host.name, "deploy prerequisites", False, exc.message, exc.hint)]
    return [Check(host.name, p.name, p.ok, p.detail, p.fix) for p in prereqs(facts)]


def built_image_check(
    host_name: str, recipe: LaunchRecipe, built: str | None, error: SparkfleetError | None, state: dict
) -> Check:
    """The host holds the image ID of the lane's build (what `sparkfleet image load LANE` recorded)."""
    if built is None:
        fix = image_fix(recipe.lane, False)
        return Check(host_name, "image", False, error.message if error else "no build", fix, refuses=True)
    digest = (state.get("record") or {}).get("repo_digest")  # pulled from the fleet registry
    why = image_mismatch(built, state)
    if why:
        fix = image_fix(recipe.lane, lost_digest(built, state) is not None)
        return Check(host_name, "image", False, f"{why} ({recipe.image_build})", fix, refuses=True)
    came = f", pulled as {digest}" if digest else ""
    return Check(host_name, "image", True, f"{built} (build of {recipe.image_build}), as recorded{came}")


def _api_key_check(host_name: str, recipe: LaunchRecipe, facts: dict) -> Check:
    """✗ when the lane's port answers without a key (open to the LAN) or the host holds no key."""
    rotate = f"sparkfleet keys rotate {recipe.lane}"
    if facts.get("error"):
        return Check(host_name, "API key", False, facts["error"], rotate)
    port = recipe.port
    if facts.get("open_status") == 200:
        return Check(
            host_name, "API key", False,
            f"port {port} answers /v1/models WITHOUT a key: lane {recipe.lane} is open to the LAN",
            f"sparkfleet stop {recipe.lane}; {rotate}; sparkfleet launch {recipe.lane} "
            "(its command must take the key: docs/serving.md)",
        )  # fmt: skip
    keyless = facts.get("keyless_status")
    if keyless is not None and keyless not in apikeys.REFUSED:
        return Check(
            host_name, "API key", False,
            f"port {port} answers POST {apikeys.KEYLESS_PROBE} WITHOUT a key (HTTP {keyless}): lane "
            f"{recipe.lane} serves to the LAN beyond /v1",
            f'add "--middleware", "{{vllm_key_guard}}" to its command, then sparkfleet launch {recipe.lane} '
            "--replace (docs/serving.md)",
        )  # fmt: skip
    if not facts.get("present"):  # not serving here: launch (or bootstrap) installs one first
        serving = "open_status" in facts
        return Check(host_name, "API key", False if serving else None,
                     f"no key for lane {recipe.lane} on this host", rotate)  # fmt: skip
    if "open_status" not in facts:
        return Check(host_name, "API key", True, f"key present for {recipe.lane} (lane not serving here)")
    if facts.get("keyed_status") != 200:
        return Check(
            host_name, "API key", False,
            f"port {port} refuses the lane's key (HTTP {facts.get('keyed_status')}): rotated since launch?",
            f"relaunch it to serve with the current key: `sparkfleet launch {recipe.lane} --replace`",
        )  # fmt: skip
    shut = facts["open_status"]
    return Check(host_name, "API key", True, f"port {port} refuses requests without the key ({shut})")


def _stack_check(host, fp: HostFingerprint) -> Check:
    """The host's kernel/driver/CUDA/NCCL/firmware (read by the agent) against what fleet.toml declares."""
    seen = ", ".join(f"{k} {getattr(fp, k)}" for k in STACK_KEYS if getattr(fp, k) is not None)
    if not host.stack:
        return Check(host.name, "host stack", None, f"{seen or 'nothing readable'} (no stack declared)")
    drifts = drift(host.stack, fp)
    if drifts:
        detail = "; ".join(f"{d.key} {d.actual or 'unknown'} (declared {d.declared})" for d in drifts)
        hint = "restore the declared stack, or update [stack] in hosts/fleet.toml once proven"
        return Check(host.name, "host stack", False, f"DRIFT: {detail}", hint, refuses=True)
    return Check(host.name, "host stack", True, f"matches the declared stack: {seen}")


def _receipt_host_paths(inv: Inventory, recipe: LaunchRecipe, host_name: str) -> list[str]:
    cache_dir = cache_dir_of(recipe, inv.host(host_name))
    return list(receipt_paths(recipe, cache_dir, str(inv.lane(recipe.lane).recipe_path)))


def doctor(inv: Inventory, target: str, deploy: bool = False, replica: int = 0) -> DoctorReport:
    """Check a host (for every lane it serves) or every host of a lane; `deploy`: also what
    `deploy .#HOST` needs of a DGX OS host (nix on the ssh PATH, trusted-users, sudo secure_path).

    `replica`: which copy of a lane with `[gateway] replicas` (0: `lane.hosts`). A host is checked
    as the copy it belongs to (its rank and world are that copy's), so it takes no `replica`."""
    if target in inv.lanes:
        inv = replica_inventory(inv, target, replica)
    elif replica:
        inv.host(target)  # an unknown name says so first
        raise SparkfleetError(
            f"--replica {replica} names a copy of a lane; {target} is a host",
            hint=f"sparkfleet doctor {target} (a host is checked as the copy it serves)",
        )
    else:
        inv = host_inventory(inv, target)
    hosts, recipes = _recipes_for(inv, target)
    report = DoctorReport(instance_name(target, replica))
    for h in hosts:
        report.checks += _host_checks(inv, h, recipes, deploy)
    return report


def cache_seed_check(inv: Inventory, host_name: str, recipe: LaunchRecipe, seed: dict) -> Check:
    """The kit's kernel cache the lane's /cache is seeded from ([launch.cache_seed]): prepared on the
    node, not yet (launch makes it from the image), or why launch would refuse (exit 5)."""
    need = cache_seed_of(recipe, inv.host(host_name))
    asset = need.asset if need else "cache seed"
    if not seed.get("ok"):
        fix = need.fix(host_name, recipe.lane) if need else seed.get("hint")
        return Check(host_name, "kernel cache", False, f"{asset}: {seed.get('problem')}", fix, refuses=True)
    if not seed.get("prepared"):
        detail = f"{asset}: not prepared here yet; launch copies it out of the image and checks it first"
        return Check(host_name, "kernel cache", True, detail)
    detail = f"{asset}: prepared, {seed['files']} files ({{bytes}}) at {seed['tree']}; seeded every serve"
    return Check(host_name, "kernel cache", True, detail, sizes={"bytes": int(seed["bytes"])})


def display_check(host_name: str, need: DisplayNeed, display: dict) -> Check:
    """The DRM card a display-memory KV lane gives its ranks ([launch.display]), as the node has it:
    what `launch` refuses (exit 5) is shown here first, with the same fix."""
    problems = display.get("problems") or []
    if not problems:
        detail = f"{display['card']}: character device, group {display['gid']}; nvidia_drm {need.wants()}"
        return Check(host_name, "display card", True, detail)
    return Check(host_name, "display card", False, "; ".join(problems), need.fix(host_name), refuses=True)
