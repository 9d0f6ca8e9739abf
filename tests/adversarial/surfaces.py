"""Every surface where sparkfleet takes outside input, derived from the code wherever the code can say.

The adversarial suite must have a hostile case for each (test_surface_coverage.py), SECURITY.md's
table lists them (figures.py --write), and a surface is named by one id (conftest.py's forms):

* `cli:VERB [SUB]` for each command the real click tree has (its positional arguments), and
  `cli:VERB [SUB] --option` for each option that takes a value (a path, a number, a name); the
  root group's are `cli:--root`. Walked from `sparkfleet.cli.main`, lazy verbs included. A flag
  (`--json`, `--fresh`) carries no value of its own, and a verb without arguments takes its input
  through its options and files: a case may name either (`required=False`), none is asked for.
* `agent:ACTION` for each key of `sparkfleet.node.agent.ACTIONS`: one JSON request on stdin.
* `http:SERVER METHOD PATH`: `gateway` is what the public port answers: the nginx front passes
  every path to smg (`location /` in `serving.front.conf_text`), so each route smg has is one
  (`SMG_ROUTES`, checked against the installed smg by test_surface_coverage.py), and each path the
  front names itself. `demo-lane` is the demo's OpenAI server, read from its `do_GET`/`do_POST`;
  any other HTTP handler class in the package is found the same way and named by its module (a
  path it answers under a prefix, `path.startswith("/lanes/")`, is one surface: `/lanes/*`). `registry` is the
  fleet registry `registry serve` runs: Debian's docker-registry is not sparkfleet's code, but
  whether its routes take a write is (its two configs: the pull listener read-only, the push
  listener behind the login), as the front decides for smg's; so its routes are listed
  (`REGISTRY_ROUTES`, distribution's API, checked against the running registry by
  test_hostile_registry.py). `vllm-lane` is what sparkfleet's key guard decides on a vLLM lane
  (lane/keyguard/: the paths it leaves open, and `* /*`, every other path); vLLM's and
  SGLang's own routes are not sparkfleet's code (SECURITY.md says what was checked on them).
* `file:WHAT` for each file sparkfleet reads that someone else wrote (`FILES`). The code has no
  single list of these, so it is kept here, with the functions that read each file; every function
  in the package that reads a file is either one of those readers or in `NOT_OUTSIDE` with the
  reason, and the test checks that against the package's source (`file_readers`). One file is one
  id, whichever field or reader a case attacks (a recipe's [bench.quality] table is
  `file:recipe.toml`, a retired rank record's stop note `file:launch record`). A file the
  repository's own tests read and run (a kit checkout under $SPARKFLEET_KIT_DIR) is listed too,
  its reader named in tests/ (`tests.…`), checked against that test's source the same way.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import click

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "python" / "sparkfleet"


@dataclass(frozen=True)
class Surface:
    id: str
    kind: str  # cli | agent | http | file
    what: str  # one line: what the surface is, for SECURITY.md
    group: str  # the SECURITY.md row it is listed under (a verb and its options share one)
    command: tuple[str, ...] = ()  # cli: the command path under `sparkfleet`
    param: click.Parameter | None = field(default=None, compare=False)  # cli options: the option
    required: bool = True  # a surface that must have a case (a flag may, need not)


# ---- cli ------------------------------------------------------------------------------------------


def _clitree():
    """tests/cli/clitree.py, the one walker of the real click tree (imported by path: it is not a
    package, and figures.py runs this module outside pytest)."""
    if "clitree" in sys.modules:
        return sys.modules["clitree"]
    spec = importlib.util.spec_from_file_location("clitree", REPO / "tests" / "cli" / "clitree.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["clitree"] = module
    spec.loader.exec_module(module)
    return module


def option_name(p: click.Option) -> str:
    """The name an id uses: the first long name (`--timeout`), else the first (`-n`)."""
    longs = [o for o in p.opts if o.startswith("--")]
    return (longs or list(p.opts))[0]


def takes_value(p: click.Parameter) -> bool:
    return isinstance(p, click.Option) and not p.is_flag and not p.count


def cli_surfaces() -> list[Surface]:
    from sparkfleet.cli import main

    out = []
    for path, cmd in _clitree().walk(main):
        verb = " ".join(path)
        group = f"cli:{verb}" if verb else "cli:sparkfleet"
        args = [p.name or "" for p in cmd.params if isinstance(p, click.Argument)]
        if not isinstance(cmd, click.Group):  # a verb without arguments: its options and files are
            what = " ".join(a.upper() for a in args)  # its surfaces, but a case may name the verb
            out.append(Surface(f"cli:{verb}", "cli", what, group, path, required=bool(args)))
        for p in cmd.params:
            if isinstance(p, click.Option) and option_name(p) not in ("--help", "--version"):
                name = option_name(p)
                sid = f"cli:{verb} {name}" if verb else f"cli:{name}"
                out.append(Surface(sid, "cli", name, group, path, p, required=takes_value(p)))
    return out


# ---- agent ----------------------------------------------------------------------------------------


def agent_surfaces() -> list[Surface]:
    from sparkfleet.node.agent import ACTIONS

    def what(action: str) -> str:  # the docstring's first paragraph, on one line
        doc = (ACTIONS[action].__doc__ or action).strip().split("\n\n", 1)[0]
        return " ".join(doc.split())

    return [Surface(f"agent:{a}", "agent", what(a), f"agent:{a}") for a in sorted(ACTIONS)]


# ---- http -----------------------------------------------------------------------------------------

# smg's routes (the gateway behind the nginx front), as its router registers them
# (lightseekorg/smg model_gateway/src/server.rs, `build_app`), for the smg the venv installs.
# test_surface_coverage.py checks them against that smg: each answers its method with something
# other than 404 (smg's fallback) or 405, the other methods of each path answer 405 unless listed,
# and every path smg's own security-posture warning names is here.
SMG_ROUTES: tuple[tuple[str, str], ...] = (
    # inference and its state (smg: "protected routes", the serving API key)
    ("POST", "/v1/chat/completions"), ("POST", "/v1/completions"), ("POST", "/generate"),
    ("POST", "/v1/embeddings"), ("POST", "/rerank"), ("POST", "/v1/rerank"), ("POST", "/v1/messages"),
    ("POST", "/v1/classify"), ("POST", "/v1/interactions"), ("POST", "/v1/tokenize"),
    ("POST", "/v1/detokenize"), ("POST", "/v1/audio/transcriptions"),
    ("POST", "/v1/responses"), ("GET", "/v1/responses/{response_id}"),
    ("DELETE", "/v1/responses/{response_id}"), ("POST", "/v1/responses/{response_id}/cancel"),
    ("GET", "/v1/responses/{response_id}/input_items"),
    ("POST", "/v1/conversations"), ("GET", "/v1/conversations/{conversation_id}"),
    ("POST", "/v1/conversations/{conversation_id}"), ("DELETE", "/v1/conversations/{conversation_id}"),
    ("GET", "/v1/conversations/{conversation_id}/items"),
    ("POST", "/v1/conversations/{conversation_id}/items"),
    ("GET", "/v1/conversations/{conversation_id}/items/{item_id}"),
    ("DELETE", "/v1/conversations/{conversation_id}/items/{item_id}"),
    ("GET", "/v1/realtime"), ("POST", "/v1/realtime/calls"), ("POST", "/v1/realtime/sessions"),
    ("POST", "/v1/realtime/client_secrets"), ("POST", "/v1/realtime/transcription_sessions"),
    # public (smg asks no key)
    ("GET", "/liveness"), ("GET", "/readiness"), ("GET", "/health"), ("GET", "/health_generate"),
    ("GET", "/engine_metrics"), ("GET", "/loads"), ("GET", "/v1/models"), ("GET", "/get_model_info"),
    ("GET", "/get_server_info"),
    # admin (smg: the control plane)
    ("POST", "/flush_cache"), ("POST", "/start_profile"), ("POST", "/stop_profile"),
    ("POST", "/heap_profile"), ("GET", "/get_loads"), ("POST", "/parse/function_call"),
    ("POST", "/parse/reasoning"), ("POST", "/wasm"), ("GET", "/wasm"), ("DELETE", "/wasm/{module_uuid}"),
    ("POST", "/v1/tokenizers"), ("GET", "/v1/tokenizers"), ("GET", "/v1/tokenizers/{tokenizer_id}"),
    ("DELETE", "/v1/tokenizers/{tokenizer_id}"), ("GET", "/v1/tokenizers/{tokenizer_id}/status"),
    ("POST", "/workers"), ("GET", "/workers"), ("GET", "/workers/{worker_id}"),
    ("PUT", "/workers/{worker_id}"), ("PATCH", "/workers/{worker_id}"), ("DELETE", "/workers/{worker_id}"),
)  # fmt: skip
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def front_locations() -> list[tuple[str, str]]:
    """(modifier, path) of each `location` in the nginx front's config, as `gateway up` writes it."""
    from sparkfleet.serving import front

    given = {"p": front.paths(Path("/state")), "bind": "127.0.0.1", "port": 8080, "router_port": 18080}
    params = inspect.signature(front.conf_text).parameters
    text = front.conf_text(**{k: v for k, v in given.items() if k in params})
    return re.findall(r"^\s*location\s+(?:(=|~\*?|\^~)\s+)?(\S+)\s*\{", text, re.M)


def gateway_routes() -> list[tuple[str, str]]:
    """What the gateway's public port answers: smg's routes (behind the front's locations) and any
    path the front answers itself (an exact location no smg route has)."""
    routes = list(SMG_ROUTES)
    for modifier, path in front_locations():
        if modifier in ("", "^~") and any(p.startswith(path) for _, p in SMG_ROUTES):
            continue  # a prefix in front of smg's routes: they are listed
        if not any(p == path for _, p in routes):
            routes.append(("*", path))
    return routes


def _handler_routes(source: Path) -> dict[str, list[tuple[str, str]]]:
    """{handler class: [(METHOD, path)]}: the path constants each do_METHOD compares `path` with."""
    out: dict[str, list[tuple[str, str]]] = {}
    for cls in ast.walk(ast.parse(source.read_text())):
        if not isinstance(cls, ast.ClassDef):
            continue
        routes = out.setdefault(cls.name, [])
        for fn in cls.body:
            if not (isinstance(fn, ast.FunctionDef) and fn.name.startswith("do_")):
                continue
            for node in ast.walk(fn):
                prefix = _startswith_path(node)
                if prefix and (fn.name[3:], prefix + "*") not in routes:
                    routes.append((fn.name[3:], prefix + "*"))
                if not (
                    isinstance(node, ast.Compare)
                    and isinstance(node.left, ast.Name)
                    and node.left.id == "path"
                ):
                    continue
                for c in (c for comp in node.comparators for c in ast.walk(comp)):
                    route = (fn.name[3:], c.value) if isinstance(c, ast.Constant) else None
                    if (
                        route
                        and isinstance(route[1], str)
                        and route[1].startswith("/")
                        and route not in routes
                    ):
                        routes.append(route)
    return out


def _startswith_path(node: ast.AST) -> str | None:
    """`path.startswith("/x/")`: the prefix a handler answers every path under."""
    if not (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "startswith"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "path"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
        and node.args[0].value.startswith("/")
    ):
        return None
    return node.args[0].value


# The fleet registry's routes (distribution 2.8, Debian's docker-registry: registry/api/v2
# descriptors.go, its router), in distribution's own terms: <repo> a repository name, <tag> a
# manifest's tag or digest, <digest> a blob's, <uuid> an upload's. HEAD is GET's.
REGISTRY_ROUTES: tuple[tuple[str, str], ...] = (
    ("GET", "/v2/"), ("GET", "/v2/_catalog"), ("GET", "/v2/<repo>/tags/list"),
    ("GET", "/v2/<repo>/manifests/<tag>"), ("PUT", "/v2/<repo>/manifests/<tag>"),
    ("DELETE", "/v2/<repo>/manifests/<tag>"),
    ("GET", "/v2/<repo>/blobs/<digest>"), ("DELETE", "/v2/<repo>/blobs/<digest>"),
    ("POST", "/v2/<repo>/blobs/uploads/"), ("GET", "/v2/<repo>/blobs/uploads/<uuid>"),
    ("PATCH", "/v2/<repo>/blobs/uploads/<uuid>"), ("PUT", "/v2/<repo>/blobs/uploads/<uuid>"),
    ("DELETE", "/v2/<repo>/blobs/uploads/<uuid>"),
)  # fmt: skip

def key_guard():
    """sparkfleet_keyguard, the middleware a vLLM lane runs (imported by path: it is the engine's
    module, on the rank's PYTHONPATH, not a module of the package)."""
    source = PACKAGE / "lane" / "keyguard" / "sparkfleet_keyguard.py"
    spec = importlib.util.spec_from_file_location("sparkfleet_keyguard", source)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def vllm_lane_routes() -> list[tuple[str, str]]:
    """What a vLLM lane answers, as far as sparkfleet decides it: the paths its key guard leaves
    open, and every other path (`* /*`, the guard's: vLLM's own routes are not sparkfleet's code)."""
    return [*(("GET", p) for p in key_guard().OPEN), ("*", "/*")]


# The package's HTTP servers by module; a server in another module is named by its module.
HTTP_SERVERS = {"sparkfleet.demo.openai_server": "demo-lane", "sparkfleet.view.server": "view"}


def http_servers() -> dict[str, list[tuple[str, str]]]:
    """{server: routes} for the gateway, the registry and every HTTP handler class in the package."""
    servers: dict[str, list[tuple[str, str]]] = {
        "gateway": gateway_routes(),
        "registry": list(REGISTRY_ROUTES),
        "vllm-lane": vllm_lane_routes(),
    }
    for source in sorted(PACKAGE.rglob("*.py")):
        text = source.read_text()
        if "BaseHTTPRequestHandler" not in text:
            continue
        module = "sparkfleet." + ".".join(source.relative_to(PACKAGE).with_suffix("").parts)
        name = HTTP_SERVERS.get(module, module)
        for routes in _handler_routes(source).values():
            for r in routes:
                if r not in servers.setdefault(name, []):
                    servers[name].append(r)
    return servers


def http_surfaces() -> list[Surface]:
    out = []
    for server, routes in http_servers().items():
        for method, path in routes:
            sid = f"http:{server} {method} {path}"
            out.append(Surface(sid, "http", f"{method} {path}", sid))
    return out


# ---- files ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileSurface:
    what: str  # the id's WHAT
    writer: str  # who writes it (the threat model's column)
    readers: tuple[str, ...]  # "module:qualname" of every function that reads it


FILES: tuple[FileSurface, ...] = (
    FileSurface("hosts/fleet.toml", "inventory authors (git)", (
        "sparkfleet.fleet.inventory:read_toml", "sparkfleet.launch.generations:record_launch",
        "sparkfleet.pins.resolve_verify:resolve", "sparkfleet.pins.manifest:import_manifest",
        "sparkfleet.pins.lock:import_lock",
    )),
    FileSurface("recipe.toml", "inventory authors (git)", (
        "sparkfleet.fleet.inventory:read_toml", "sparkfleet.bench.target:for_lane",
        "sparkfleet.launch.generations:record_launch",
    )),
    FileSurface("generation record", "anyone with write access to the fleet checkout", (
        "sparkfleet.launch.generations:scan",
    )),
    FileSurface("release record", "anyone with write access to the fleet checkout", (
        "sparkfleet.launch.release:load_release",
    )),
    FileSurface("bench report", "bench runs, copies, hand edits", (
        "sparkfleet.bench.report.records:load_document", "sparkfleet.view.lanefiles:_read_json",
        "sparkfleet.view.server:Handler._report",
    )),
    FileSurface("quality tool output", "the quality harness the bench runs", (
        "sparkfleet.bench.quality:run_quality",
    )),
    FileSurface("measurements", "`measure` on a node, copies, hand edits", (
        "sparkfleet.roofline.machine:read_measurements_doc",
    )),
    FileSurface("checkpoint config.json", "the NAS (model publishers)", (
        "sparkfleet.roofline.model:snapshot_files", "sparkfleet.engram.source:Snapshot.engram_config",
        "sparkfleet.engram.source:Snapshot.weight_map",
    )),
    FileSurface("safetensors header", "the NAS (model publishers)", (
        "sparkfleet.facts.safetensors_header:read_header",
    )),
    FileSurface("hub tree", "the NAS: downloads, other users, a broken sync", (
        "sparkfleet.facts.hubcache:read_regular", "sparkfleet.stage.copy:open_source",
        "sparkfleet.stage.copy:place_verified", "sparkfleet.engram.pack:write_pack",
        "sparkfleet.engram.sparse:write_copy",
        "sparkfleet.base.digests:sample_digest", "sparkfleet.base.digests:full_digest",
        "sparkfleet.stage.verify:verify_plan", "sparkfleet.stage.execute:_write_metadata",
    )),
    FileSurface("engram pack", "the node's pack directory (receipts, journals, packs)", (
        "sparkfleet.engram.receipt:read", "sparkfleet.engram.sparse:read_json",
        "sparkfleet.engram.sparse:_finish", "sparkfleet.engram.sparse:copy_problem",
        "sparkfleet.engram.pack:file_problem", "sparkfleet.engram.pack:_sha256",
    )),
    FileSurface("stage lock", "the local hub's other users", ("sparkfleet.base.lock:open_lock_file",)),
    FileSurface("launch lock", "anyone with write access to the fleet checkout", (
        "sparkfleet.base.lock:open_lock_file",
    )),
    FileSurface("staged record", "the local hub's other users (its .locks/ directory)", (
        "sparkfleet.stage.staged:read", "sparkfleet.stage.staged:write",
    )),
    FileSurface("lane cache dir", "the serving containers (root inside, /cache read-write)", (
        "sparkfleet.node.receipts:_open_parent", "sparkfleet.node.receipts:helper_main",
    )),
    FileSurface("launch record", "the node's state dir (the launcher user)", (
        "sparkfleet.node.records:_load_docs", "sparkfleet.node.runtimes:ProcessRuntime.orphan",
        "sparkfleet.node.runtimes:ProcessRuntime.state", "sparkfleet.node.watchdog:_load",
        "sparkfleet.node.watchdog:read_memstop",
    )),
    FileSurface("rank log", "the lane's engine (everything it prints)", (
        "sparkfleet.node.records:tail_bytes", "sparkfleet.node.runtimes:ProcessRuntime.read_log",
        "sparkfleet.node.node_checks:_rank_env",
    )),
    FileSurface("image archive", "a Nix build result or a `docker save` tar", (
        "sparkfleet.images.archive:source_kind", "sparkfleet.images.archive:open_stream",
        "sparkfleet.images.archive:inspect_build", "sparkfleet.images.registry:push",
    )),
    FileSurface("image push record", "the operator's and the nodes' state dirs", (
        "sparkfleet.images.record:read_push_record", "sparkfleet.images.record:read_operator_record",
        "sparkfleet.images.node:read_record",
    )),
    FileSurface("fleet CA", "the registry's CA directory (the operator's state dir)", (
        "sparkfleet.images.registry:read_ca_cert",
    )),
    FileSurface("registry push-auth.json", "`registry init` on the head host, copied where pushes run", (
        "sparkfleet.images.registry_auth:_read", "sparkfleet.images.registry_auth:ensure_login",
    )),
    FileSurface("registry config", "`registry init` (config.yml, push.yml), hand edits", (
        "sparkfleet.images.registry_host:listeners",
    )),
    FileSurface("kit recipe-lock.json", "the kit's authors (its lock file)", (
        "sparkfleet.pins.lock:parse_lock", "sparkfleet.pins.lock:import_lock",
        "sparkfleet.fleet.cacheseed:read_lock",
    )),
    FileSurface("pins manifest", "a model's publishers (a manifest the operator imports)", (
        "sparkfleet.pins.manifest:import_manifest",
    )),
    FileSurface("flake.lock", "the repository's authors (git)", ("sparkfleet.pins.oci:locked_tool_argv",)),
    FileSurface("kit kernel-cache.tar", "the kit's image (its kernel cache, as the lock pins it)", (
        "sparkfleet.fleet.cacheseed:seed", "sparkfleet.node.seedprep:extract",
        "sparkfleet.node.seedprep:tree_files",
        "sparkfleet.node.seedprep:read_manifest", "sparkfleet.node.seedprep:copy_out",
    )),
    FileSurface("kit cache_roots source", "the kit's source (the file that names its cache roots)", (
        "sparkfleet.fleet.cacheseed:cache_roots",
    )),
    FileSurface("kit bundle-manifest.json", "the kit checkout on a node", (
        "sparkfleet.fleet.kittrees:manifest_sums",
    )),
    FileSurface("kit sources (SPARKFLEET_KIT_DIR)", "whoever writes the kit checkouts tests run as root", (
        "tests.launch.test_kit_checkout:_verified_kit",
    )),
    FileSurface("lane API key", "the node's state dir", ("sparkfleet.facts.apikeys:read_key",)),
    FileSurface("gateway users/USER.key", "the gateway's state dir", (
        "sparkfleet.serving.users:_check_file", "sparkfleet.serving.users:_held_key",
    )),
    FileSurface("gateway state", "the gateway's state dir (record, config, pid, smg's and nginx's logs)", (
        "sparkfleet.serving.gateway:load_record", "sparkfleet.serving.gateway:_front_pid",
        "sparkfleet.serving.gateway:_log_line", "sparkfleet.serving.gateway_main:main",
        "sparkfleet.serving.gateway_main:_first_emergency",
    )),
    FileSurface("gateway access log", "the gateway's nginx front (each request line is a client's)", (
        "sparkfleet.view.gatewaylog:AccessCounts.update",
    )),
    FileSurface("watch state", "`sparkfleet watch` (recipes/<lane>/watch.json), the checkout's writers", (
        "sparkfleet.ops.watchstate:read",
    )),
    FileSurface("incident summary", "`sparkfleet watch`'s incident bundles (summary.json), copies", (
        "sparkfleet.view.lanefiles:_read_json", "sparkfleet.view.server:Handler._incident",
    )),
    FileSurface("peer hub blob (stage --fanout, local peers)", "a peer host's local hub (its writers)", (
        "sparkfleet.stage.copy:open_source", "sparkfleet.stage.copy:place_verified",
    )),
    FileSurface("peer-serve leftovers", "a killed `stage --serve-peers` (its private directory)", (
        "sparkfleet.stage.peerserve:sweep_leftovers", "sparkfleet.stage.peerserve:serve",
    )),
    FileSurface("NCCL logs", "NCCL inside the lane's image (the fabric canary)", (
        "sparkfleet.node.canary_worker:_read_nccl_logs",
    )),
)  # fmt: skip

# Functions that read a file nobody else writes, and why.
NOT_OUTSIDE: dict[str, str] = {
    "sparkfleet.base.atomic:write_bytes": "compares the final file with the bytes it is about to write",
    "sparkfleet.base.atomic:_fsync_open": "opens a directory to fsync it",
    "sparkfleet.launch.release:_create_exclusive": "opens a directory to fsync it",
    "sparkfleet.images.registry:make_ca": "reads back what openssl just wrote in make_ca's own temp dir",
    "sparkfleet.fleet.inventory:schema": "the package's own JSON Schema",
    "sparkfleet.fleet.schemadoc:load_schema": "the package's own JSON Schema",
    "sparkfleet.bench.prompts:sentences": "the package's own corpus",
    "sparkfleet.demo.vllm_engine:start_engine": "the demo engine's own log, for its error message",
    "sparkfleet.roofline.measure:_read_files": "reads back the files `measure` just wrote (O_NOFOLLOW)",
    "sparkfleet.base.procs:boot_id": "the kernel (/proc)",
    "sparkfleet.base.procs:_stat_fields": "the kernel (/proc)",
    "sparkfleet.base.procs:command_line": "the kernel (/proc)",
    "sparkfleet.facts.memory:read_meminfo": "the kernel (/proc/meminfo, cgroup files)",
    "sparkfleet.facts.fabric:_read": "the kernel (sysfs)",
    "sparkfleet.facts.display:read_display": "the kernel (nvidia_drm's module parameters)",
    "sparkfleet.lane.bootcache:fs_type": "the kernel (/proc/mounts)",
    "sparkfleet.node.node_checks:_read": "the kernel (/proc, the incident bundle's dmesg and meminfo)",
    "sparkfleet.view.metricsdoc:main": "the repository's own docs page (a maintainer tool writing its table)",
    "sparkfleet.cli.clidoc:main": "the repository's own docs page (a maintainer tool writing it)",
    "sparkfleet.view.targets:write_prometheus_dir": "the package's own alert rules (view/rules)",
    "sparkfleet.pins.hf:_hf_json": "an HTTP answer, not a file (SECURITY.md: answers sparkfleet reads)",
    "sparkfleet.pins.oci:_bearer_token": "an HTTP answer, not a file (SECURITY.md: answers sparkfleet reads)",
}


def file_surfaces() -> list[Surface]:
    return [Surface(f"file:{f.what}", "file", f"written by {f.writer}", f"file:{f.what}") for f in FILES]


_WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC"}


def _reads(call: ast.Call) -> bool:
    """Does this call open or read a file for reading?"""
    fn = call.func
    name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
    base = fn.value.id if isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name) else ""
    if name in ("read_text", "read_bytes"):
        return True
    if name == "load" and base in ("json", "tomllib"):
        return True
    if name != "open":
        return False
    if base == "os":
        flags = call.args[1] if len(call.args) > 1 else None
        names = {n.attr for n in ast.walk(flags) if isinstance(n, ast.Attribute)} if flags else set()
        return not names & _WRITE_FLAGS
    mode_arg = [k.value for k in call.keywords if k.arg == "mode"]
    mode_pos = 1 if base in ("", "io", "tarfile", "gzip") else 0  # open(path, mode) / path.open(mode)
    mode = call.args[mode_pos] if len(call.args) > mode_pos else (mode_arg[0] if mode_arg else None)
    if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
        return not set(mode.value) & set("wax+")
    return True  # no mode (read) or one computed at run time: counted as a read


def file_readers() -> set[str]:
    """ "module:qualname" of every function in the package that opens or reads a file."""
    out: set[str] = set()
    for source in sorted(PACKAGE.rglob("*.py")):
        module = "sparkfleet." + ".".join(source.relative_to(PACKAGE).with_suffix("").parts)
        out.update(
            f"{module}:{'.'.join(qual) or '<module>'}"
            for qual in _reading_scopes(ast.parse(source.read_text()))
        )
    return out


def test_module_readers() -> set[str]:
    """ "tests.module:qualname" of every function reading a file in the test modules FILES names."""
    out: set[str] = set()
    for module in sorted({r.split(":")[0] for f in FILES for r in f.readers if r.startswith("tests.")}):
        source = REPO.joinpath(*module.split(".")).with_suffix(".py")
        out.update(f"{module}:{'.'.join(q)}" for q in _reading_scopes(ast.parse(source.read_text())))
    return out


def _reading_scopes(node: ast.AST, qual: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """The qualified name of every function (or class) that directly holds a call reading a file."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield from _reading_scopes(child, (*qual, child.name))
            continue
        if isinstance(child, ast.Call) and _reads(child):
            yield qual
        yield from _reading_scopes(child, qual)


# ---- all ------------------------------------------------------------------------------------------


def all_surfaces() -> list[Surface]:
    return [*cli_surfaces(), *agent_surfaces(), *http_surfaces(), *file_surfaces()]


def ids() -> list[str]:
    """Every surface that must have a case."""
    return [s.id for s in all_surfaces() if s.required]


def known_ids() -> set[str]:
    """Every id a case may name (flags too)."""
    return {s.id for s in all_surfaces()}


if __name__ == "__main__":  # the list, one id a line
    print("\n".join(ids()))
