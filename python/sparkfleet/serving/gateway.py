"""One OpenAI endpoint in front of the serving lanes: SGLang's gateway, run on the head host.

The gateway is `smg` (Shepherd Model Gateway, PyPI `smg`), the maintained successor of
`sglang-router`: the same authors and Rust router, 0.3.2 being sglang-router's last release while smg
is at 1.13.0 (both as `pip index versions` lists them); the sglang-router 0.3.2 wheel
itself installs an `smg` console script. What sparkfleet relies on, each seen in the tests:
- every worker's served model is a model id on the one endpoint (`/v1/models` lists them, a request
  goes only to workers serving its `model`);
- `--policy` picks the replica; the response header `x-smg-routed-worker-id` names it;
- `--api-key` is required from clients (401 without it or with another) and is the key the workers
  (the lanes) are called with; retries and health checks take a dead replica out.

Lanes join by having a `[gateway]` table in their recipe. Lanes with the same served_model_name are
replicas of one model id (e.g. two TP2 lanes on dgx1+2 and dgx3+4 against one TP4 lane); their host
sets must be disjoint. The policy is the recipes' `[gateway] policy`, round_robin by default:
MiaAI-Lab's docs/tp8.md measured cache_aware sending every stream of a shared-prefix run to one
replica (prose at c32: 296 tok/s against 673 with round_robin), and a bench's prompts share a prefix.

Keys: one gateway key, which is also every gateway lane's key (`lanekeys`): "lanes take only the
gateway's key". Per-user keys (`serving.users`, `sparkfleet keys add USER`) are checked by nginx in
front of smg (`serving.front`), which calls smg with the gateway's key: smg itself would pass a
user's key on to the lanes. Since every user request reaches smg carrying the gateway's key, that
key must open nothing but inference there: smg's admin routes (workers, tokenizers, ...) take a
third key, the admin key, as smg's control-plane key (`--control-plane-api-keys`, which replaces
`--api-key` on those routes, measured against smg 1.13.0), and the front lets only it through to
them. All keys reach smg through a 0600 JSON file (`gateway_main`), never argv. smg listens on
loopback only; the public port is the front's.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..base import procs
from ..base.atomic import ensure_dir, write_bytes
from ..base.errors import ExitCode, SparkfleetError
from ..base.http import free_port, get_json
from ..base.paths import GATEWAY_STATE_ENV, gateway_state_dir
from ..base.selfexec import module_argv
from ..facts import apikeys
from ..fleet.inventory import Inventory, replica_sets
from ..lane.recipe import launch_recipe
from ..launch.lanekeys import Call, host_key, install
from . import front, users

POLICIES = ("round_robin", "cache_aware", "power_of_two", "random", "least_load")
DEFAULT_POLICY = "round_robin"
ROUTED_HEADER = "x-smg-routed-worker-id"
KEY_NAME = "gateway"  # the key file under the gateway's state dir (apikeys layout)
ADMIN_KEY_NAME = "gateway-admin"  # the operator's admin key, beside it (never on a lane, never a user's)
ADMIN_KEY_ID = "operator"  # its id and name among smg's control-plane keys


def state_dir_in_force() -> Path:
    """The gateway's state dir as every verb finds it: $SPARKFLEET_GATEWAY_STATE, else the default."""
    return Path(os.environ.get(GATEWAY_STATE_ENV) or gateway_state_dir())


DEFAULT_PORT = 8080
# How long a client waits for the gateway to route to a lane that serves (smg retries a worker with
# a growing pause: a lane relaunched a minute after `up` was routed to about 5 s later)
ROUTE_WAIT_S = 60.0


@dataclass(frozen=True)
class Worker:
    """One lane (or one of its `[gateway] replicas`) behind the gateway: a replica of `model`."""

    lane: str
    model: str
    url: str  # http://<head address>:<port> (the gateway adds the paths)
    hosts: tuple[str, ...]
    replica: int = 0  # index in the lane's [gateway] replicas (0: the lane's own hosts)

    @property
    def name(self) -> str:
        return self.lane if self.replica == 0 else f"{self.lane}#{self.replica}"


@dataclass(frozen=True)
class GatewayPlan:
    policy: str
    workers: tuple[Worker, ...]

    def models(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for w in self.workers:
            out.setdefault(w.model, []).append(w.name)
        return out


@dataclass(frozen=True)
class GatewayRecord:
    """What `up` started (0600 JSON beside the config; no key in it)."""

    pid: int
    start_ticks: int | None
    boot_id: str
    bind: str
    port: int
    policy: str
    workers: list[dict[str, Any]]
    log: str
    started_at: float
    router_port: int = 0  # smg on 127.0.0.1 behind the front (0: a record from before the front)


def plan(inv: Inventory) -> GatewayPlan:
    """The serving lanes (those with a [gateway] table), their model ids and the one policy."""
    workers, policies = [], {}
    for name in sorted(inv.lanes):
        lane = inv.lane(name)
        section = lane.sections.gateway
        if section is None:
            continue
        policy = section.policy if section.policy is not None else DEFAULT_POLICY
        if policy not in POLICIES:
            raise SparkfleetError(
                f"{lane.recipe_path}: gateway.policy {policy!r} is not one of {', '.join(POLICIES)}",
                hint=f"{DEFAULT_POLICY} (the default) spreads shared-prefix streams: docs/serving.md",
            )
        policies[name] = policy
        recipe = launch_recipe(inv, name)
        model = recipe.served_model_name or name
        # [gateway] replicas: the same recipe on disjoint host sets (checked by the inventory)
        for i, hosts in enumerate(replica_sets(lane)):  # `launch LANE --replica i` starts each
            head = inv.host(hosts[0])
            workers.append(Worker(name, model, f"http://{head.address}:{recipe.port}", tuple(hosts), i))
    if not workers:
        raise SparkfleetError(
            "no lane serves through the gateway", hint="add a [gateway] table to the lanes' recipes"
        )
    if len(set(policies.values())) > 1:
        raise SparkfleetError(
            "the gateway lanes ask for different policies: "
            + ", ".join(f"{lane} {p}" for lane, p in sorted(policies.items())),
            hint="one gateway has one policy: make [gateway] policy agree",
        )
    _check_replicas(workers)
    return GatewayPlan(next(iter(policies.values())), tuple(workers))


def _check_replicas(workers: list[Worker]) -> None:
    """Replicas of one model must not share a host (they would share its GPU)."""
    by_model: dict[str, list[Worker]] = {}
    for w in workers:
        by_model.setdefault(w.model, []).append(w)
    for model, group in by_model.items():
        seen: dict[str, str] = {}
        for w in group:
            for h in w.hosts:
                if h in seen:
                    raise SparkfleetError(
                        f"replicas of {model!r} share host {h}: lanes {seen[h]} and {w.name}",
                        hint="replicas run on disjoint host sets (e.g. dgx1+dgx2 and dgx3+dgx4)",
                    )
                seen[h] = w.name


def _own_key(state_dir: Path, name: str) -> str:
    key = apikeys.read_key(state_dir, name)
    if key is None:
        key = apikeys.new_key()
        apikeys.write_key(state_dir, name, key)
    return key


def gateway_key(state_dir: Path) -> str:
    """The gateway's key (made on first use), 0600 under the gateway's state dir."""
    return _own_key(state_dir, KEY_NAME)


def admin_key(state_dir: Path) -> str:
    """The operator's admin key for smg's admin API (made on first use), 0600 beside the gateway's."""
    return _own_key(state_dir, ADMIN_KEY_NAME)


@dataclass(frozen=True)
class KeyShare:
    """What installing the gateway's key on the gateway lanes did."""

    changed: dict[str, bool]  # worker -> whether its hosts' key files changed
    failed: dict[str, str]  # worker -> why its hosts did not take the key (lenient mode only)


def share_key(inv: Inventory, state_dir: Path, call: Call, *, all_or_nothing: bool = True) -> KeyShare:
    """Install the gateway's key as the key of every gateway lane (each replica's hosts).

    All or nothing (`gateway up`): if a host cannot take it, every host already changed gets its
    old key back before the error is raised, so a failed `up` leaves each lane as its clients knew
    it. Lenient (`gateway run`, a unit at boot): a lane whose host is down is reported, the others
    take the key. A lane already running with its old key must be launched again to take it.
    """
    key = gateway_key(state_dir)
    old: dict[tuple[str, str], str | None] = {}
    changed, failed = {}, {}
    try:
        for w in plan(inv).workers:
            try:
                if all_or_nothing:
                    for h in w.hosts:
                        old.setdefault((w.lane, h), host_key(inv, w.lane, h, call))
                changed[w.name] = any(install(inv, w.lane, key, list(w.hosts), call).values())
            except SparkfleetError as exc:
                if all_or_nothing:
                    raise
                failed[w.name] = exc.message
    except BaseException:
        for (lane, h), was in old.items():
            if was is not None and was != key:
                with contextlib.suppress(SparkfleetError):
                    install(inv, lane, was, [h], call)
        raise
    return KeyShare(changed, failed)


SERVING = "serving"  # worker_states' word for a lane that takes the gateway's key


def worker_states(p: GatewayPlan, key: str) -> dict[str, str]:
    """worker name -> 'serving' | 'refuses the gateway key (relaunch it)' | 'not answering'."""
    out = {}
    for w in p.workers:
        status, _ = get_json(f"{w.url}/v1/models", key=key)
        relaunch = f"sparkfleet launch {w.lane} --replace" + (f" --replica {w.replica}" if w.replica else "")
        out[w.name] = (
            SERVING if status == 200
            else f"refuses the gateway key (HTTP {status}): {relaunch}" if status in (401, 403)
            else "not answering (the gateway adds it once it is up)"
        )  # fmt: skip
    return out


@dataclass(frozen=True)
class Routing:
    """What the gateway routes to, against the lanes that serve with its key."""

    states: dict[str, str]  # worker name -> worker_states' word
    want: frozenset[str]  # the serving lanes' model ids
    want_urls: frozenset[str]  # the serving workers' URLs
    listed: frozenset[str]  # those model ids the gateway lists
    routed: frozenset[str]  # those worker URLs it routes to

    @property
    def complete(self) -> bool:
        return self.listed == self.want and self.routed == self.want_urls

    def shortfall(self) -> str:
        return (f"gateway lists {sorted(self.listed)} of {sorted(self.want)} and routes to "
                f"{len(self.routed)} of {len(self.want_urls)} serving workers")  # fmt: skip


def await_routing(
    p: GatewayPlan, states: dict[str, str], key: str, admin: str, base: str, router: str, deadline: float,
    alive: Callable[[], None],
) -> Routing:  # fmt: skip
    """Until the gateway lists every serving lane's model and routes to every serving worker (each
    copy of a replicated lane among them), or the deadline. `alive` raises when the gateway died.

    smg registers a worker on its own schedule (a retry with a growing pause): a lane that starts
    serving with the gateway's key, as `up` asks of a lane launched before it, is routed to some
    seconds later, and a request before that gets 503 "No models available"."""
    want = frozenset(w.model for w in p.workers if states[w.name] == SERVING)
    want_urls = frozenset(w.url for w in p.workers if states[w.name] == SERVING)
    while True:
        got = want & set(served_models(base, key))
        routing = Routing(
            states, want, want_urls, got, want_urls & routed_workers(router, admin) if got else frozenset()
        )
        if routing.complete or time.monotonic() > deadline:
            return routing
        alive()
        time.sleep(0.3)


def _paths(state_dir: Path) -> tuple[Path, Path, Path]:
    return state_dir / "gateway.json", state_dir / "gateway.record.json", state_dir / "gateway.log"


def load_record(state_dir: Path) -> GatewayRecord | None:
    """What `up` (or `run`) recorded, each field a reader acts on checked (`down` signals its pid)."""
    path = _paths(state_dir)[1]
    try:
        rec = GatewayRecord(**json.loads(path.read_text()))
        if not all(isinstance(getattr(rec, k), int) and not isinstance(getattr(rec, k), bool)
                   for k in ("pid", "port", "router_port")) or rec.pid <= 0:  # fmt: skip
            raise ValueError("pid, port and router_port are not numbers")
        if not (rec.start_ticks is None or type(rec.start_ticks) is int) or not isinstance(rec.boot_id, str):
            raise ValueError("start_ticks or boot_id is not what `up` writes")
        return rec
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, RecursionError) as exc:  # a directory, not JSON, not a record
        why = exc.strerror if isinstance(exc, OSError) else str(exc)[:200]
        raise SparkfleetError(f"{path}: not a gateway record ({why})", hint=f"remove {path}") from None


GATEWAY_MODULE = "sparkfleet.serving.gateway_main"
# What the gateway's process calls itself: our module until smg's launch_router runs, then the
# title smg gives it (smg/launch_router.py: `setproctitle.setproctitle("smg::router")`).
GATEWAY_TITLES = (GATEWAY_MODULE, "smg::router")


def is_running(rec: GatewayRecord) -> bool:
    """The recorded process runs, is the one `up` started (never a recycled PID), and is a gateway:
    a record that names another live process (edited, or restored from elsewhere) never makes
    `down` signal it."""
    same = procs.same_process(rec.pid, rec.start_ticks, rec.boot_id)
    return same and any(title in procs.command_line(rec.pid) for title in GATEWAY_TITLES)


def router_argv(p: GatewayPlan, key: str, admin: str, bind: str, port: int, metrics_port: int) -> list[str]:
    """smg's arguments (they travel in the 0600 config file, not an argv)."""
    return [
        "--host", bind, "--port", str(port),
        "--worker-urls", *[w.url for w in p.workers],
        "--policy", p.policy,
        "--api-key", key,
        # smg's admin and worker routes take this key instead of --api-key (id:name:role:key)
        "--control-plane-api-keys", f"{ADMIN_KEY_ID}:{ADMIN_KEY_ID}:admin:{admin}",
        # the front names the user in smg's tenant header (and replaces any header a client sent)
        "--trust-tenant-header", "--tenant-header-name", front.TENANT_HEADER,
        # metrics on loopback, on a port of our choosing (smg's default 0.0.0.0:29000 collides)
        "--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics_port),
        # a dead replica: out after 2 failed 1 s health checks; its requests are retried elsewhere
        "--health-check-interval-secs", "1", "--health-failure-threshold", "2",
        "--health-check-timeout-secs", "2",
    ]  # fmt: skip


@dataclass(frozen=True)
class _Prepared:
    plan: GatewayPlan
    key: str
    admin: str
    config: Path  # the 0600 JSON gateway_main runs from
    router_port: int


def _prepare(inv: Inventory, state_dir: Path, bind: str, port: int, metrics_port: int) -> _Prepared:
    """Everything before the process, and nothing on a lane: the plan, smg's and the front's config."""
    front.check_bind(bind)
    ensure_dir(state_dir, 0o700)
    rec = load_record(state_dir)
    if rec is not None and is_running(rec):
        raise SparkfleetError(
            f"the gateway already runs (pid {rec.pid}, port {rec.port})",
            hint="stop it first: `sparkfleet gateway down`",
            exit_code=ExitCode.REFUSED,
        )
    p = plan(inv)
    key, admin = gateway_key(state_dir), admin_key(state_dir)
    config = _paths(state_dir)[0]
    router_port = free_port()
    argv = router_argv(p, key, admin, "127.0.0.1", router_port, metrics_port or port + 1)
    fp = front.write(state_dir, key, admin, bind, port, router_port)
    front_cfg = {"argv": front.argv(fp, front.nginx_binary()), "pid": str(fp.pid),
                 "error_log": str(fp.error_log)}  # fmt: skip
    write_bytes(config, json.dumps({"argv": argv, "front": front_cfg}).encode(), mode=0o600)
    return _Prepared(p, key, admin, config, router_port)


def _record(state_dir: Path, pid: int, prep: _Prepared, bind: str, port: int, log: Path | str) -> None:
    rec = GatewayRecord(
        pid=pid,
        start_ticks=procs.start_ticks(pid),
        boot_id=procs.boot_id(),
        bind=bind,
        port=port,
        policy=prep.plan.policy,
        workers=[asdict(w) for w in prep.plan.workers],
        log=str(log),
        started_at=time.time(),
        router_port=prep.router_port,
    )
    write_bytes(_paths(state_dir)[1], json.dumps(asdict(rec), indent=1).encode(), mode=0o600)


def main_command(config: Path) -> tuple[list[str], dict[str, str]]:
    """gateway_main's argv and environment: this interpreter, finding this very sparkfleet and smg.

    `sys.executable -m` alone may not find them: nixpkgs' wrapper of a Python application puts its
    dependencies on sys.path inside the script (site.addsitedir, pkgs/development/interpreters/
    python/wrap.sh), not in the environment, so a bare interpreter started from it sees none of
    them (the deployed unit's `gateway run` would die on `import sparkfleet`). selfexec carries this
    process's search path over inside the interpreter, as for every Python child of ours."""
    return module_argv(GATEWAY_MODULE, str(config)), dict(os.environ)


def _local(bind: str) -> str:
    """Where this host reaches a listener bound to `bind`."""
    return "127.0.0.1" if bind in ("0.0.0.0", "::") else bind


def _log_line(log: Path, offset: int, keys: tuple[str, ...]) -> str:
    """The last line this run wrote to the gateway's log (keys redacted, colours dropped)."""
    try:
        with open(log, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError:
        return "(no log)"
    for key in keys:
        text = apikeys.scrub(text, key)
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", ln).strip() for ln in text.splitlines()]
    return next((ln for ln in reversed(lines) if ln), "(nothing in its log)")[-400:]


def _wait_answering(proc: subprocess.Popen, prep: _Prepared, base: str, log: Path, offset: int,
                    deadline: float, wait_s: float) -> None:  # fmt: skip
    """Until smg answers through the front: GET /health with the admin key passes nginx, then smg.

    Why not "until it lists the lanes' models": with no lane serving (the demo stops its lane) there
    is nothing to list, and `up` returned at once while the gateway was dying on its first import.
    """
    keys = (prep.key, prep.admin)
    while True:
        if proc.poll() is not None:
            raise SparkfleetError(
                f"the gateway did not start (exit {proc.returncode}): {_log_line(log, offset, keys)}",
                hint=f"its log: {log}. No lane's key was changed",
                exit_code=ExitCode.SHORTFALL,
            )
        if get_json(f"{base}/health", key=prep.admin, timeout=2)[0] == 200:
            return
        if time.monotonic() > deadline:
            raise SparkfleetError(
                f"the gateway did not answer within {wait_s:g} s: {_log_line(log, offset, keys)}",
                hint=f"its log: {log}; a longer --wait if this host is slow. No lane's key was changed",
                exit_code=ExitCode.SHORTFALL,
            )
        time.sleep(0.2)


def _report_share(done: KeyShare, on_event: Callable[[str], None]) -> None:
    for lane, did in done.changed.items():
        if did:
            on_event(f"{lane}: now holds the gateway's key")
    for lane, why in done.failed.items():
        on_event(f"{lane}: the gateway's key is not on its hosts ({why}); the gateway serves the others")


def up(
    inv: Inventory,
    state_dir: Path,
    call: Call,
    *,
    bind: str = "0.0.0.0",
    port: int = DEFAULT_PORT,
    metrics_port: int = 0,
    wait_s: float = 60.0,
    on_event: Callable[[str], None] = lambda _m: None,
) -> dict[str, Any]:
    """Start the gateway in front of the gateway lanes.

    Returns once the gateway answers, then once it lists every serving lane's model and routes to
    every serving worker (each copy of a replicated lane among them). The lanes get the gateway's
    key only after the gateway answers: a gateway that fails to start is stopped, says why (its
    log's last line) and leaves every lane's key as it was.
    """
    state_dir = Path(state_dir)
    prep = _prepare(inv, state_dir, bind, port, metrics_port)
    p, key = prep.plan, prep.key
    log = _paths(state_dir)[2]
    with open(log, "ab") as out:
        os.chmod(log, 0o600)
        offset = out.tell()
        argv, env = main_command(prep.config)
        proc = subprocess.Popen(
            argv, env=env,
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True,
        )  # fmt: skip
    _record(state_dir, proc.pid, prep, bind, port, log)
    deadline = time.monotonic() + wait_s
    base = f"http://{_local(bind)}:{port}"
    try:
        _wait_answering(proc, prep, base, log, offset, deadline, wait_s)
        on_event(f"gateway answers (pid {proc.pid}) on {bind}:{port}, policy {p.policy}")
        _report_share(share_key(inv, state_dir, call), on_event)
    except BaseException:
        down(state_dir)
        raise

    def alive() -> None:
        if proc.poll() is not None:
            raise SparkfleetError(
                f"the gateway exited ({proc.returncode}): {_log_line(log, offset, (key, prep.admin))}",
                hint=f"its log: {log}",
            )

    router = f"http://127.0.0.1:{prep.router_port}"
    routing = await_routing(p, worker_states(p, key), key, prep.admin, base, router, deadline, alive)
    if not routing.complete:
        on_event(f"{routing.shortfall()} after {wait_s:g} s; it keeps trying")
    return {**status(state_dir), "lanes": routing.states}


def serving_now(
    state_dir: Path, wait_s: float = ROUTE_WAIT_S, on_event: Callable[[str], None] = lambda _m: None
) -> dict[str, Any]:
    """The running gateway's status once it routes to every lane that serves with its key (what a
    client such as `bench --gateway` needs before its first request), waiting up to `wait_s`.

    Refused (exit 1 (shortfall)), saying each lane's state, when no lane behind it serves with its
    key, or when it routes to none of them by then; a partial routing is said and let through."""
    state_dir = Path(state_dir)
    rec = load_record(state_dir)
    if rec is None or not is_running(rec):
        raise SparkfleetError("the gateway is not running", hint="sparkfleet gateway up")
    p = GatewayPlan(rec.policy, tuple(Worker(**{**w, "hosts": tuple(w["hosts"])}) for w in rec.workers))
    key = gateway_key(state_dir)
    base = f"http://{_local(rec.bind)}:{rec.port}"
    router = f"http://127.0.0.1:{rec.router_port}" if rec.router_port else base

    def alive() -> None:
        if not is_running(rec):
            raise SparkfleetError("the gateway stopped", hint=f"sparkfleet gateway up; its log: {rec.log}")

    states = worker_states(p, key)
    if SERVING not in states.values():
        raise SparkfleetError(
            "no lane behind the gateway serves with its key: "
            + "; ".join(f"{name}: {what}" for name, what in states.items()),
            hint="a lane launched before `gateway up` takes its key when launched again",
            exit_code=ExitCode.SHORTFALL,
        )
    if not all(what == SERVING for what in states.values()):
        on_event("; ".join(f"{name}: {what}" for name, what in states.items() if what != SERVING))
    routing = await_routing(
        p, states, key, admin_key(state_dir), base, router, time.monotonic() + wait_s, alive
    )
    if not routing.routed:
        raise SparkfleetError(
            f"{routing.shortfall()} after {wait_s:g} s",
            hint="sparkfleet gateway status; a lane it does not take: `gateway down`, then `gateway up`",
            exit_code=ExitCode.SHORTFALL,
        )
    if not routing.complete:
        on_event(f"{routing.shortfall()} after {wait_s:g} s: going on with those")
    return status(state_dir)


def run(
    inv: Inventory,
    state_dir: Path,
    call: Call,
    *,
    bind: str = "0.0.0.0",
    port: int = DEFAULT_PORT,
    metrics_port: int = 0,
    on_event: Callable[[str], None] = lambda _m: None,
    on_start: Callable[[dict[str, Any]], None] = lambda _st: None,
) -> None:
    """The gateway in the foreground (the systemd unit's ExecStart): this process becomes it.

    The record names this PID (exec keeps it), so `gateway status`, `keys add|revoke` and `gateway
    down` on the host act on the unit's gateway as on one `up` started. A lane host that is down
    does not keep the gateway from starting (the unit would fail at boot otherwise). `on_start`
    gets what was found, just before the exec.
    """
    state_dir = Path(state_dir)
    prep = _prepare(inv, state_dir, bind, port, metrics_port)
    shared = share_key(inv, state_dir, call, all_or_nothing=False)
    _report_share(shared, on_event)
    states = worker_states(prep.plan, prep.key)
    for lane, what in states.items():
        on_event(f"{lane}: {what}")
    _record(state_dir, os.getpid(), prep, bind, port, "stderr (a unit: journalctl -u sparkfleet-gateway)")
    on_event(f"gateway on {bind}:{port}, policy {prep.plan.policy}")
    on_start({"pid": os.getpid(), "bind": bind, "port": port, "policy": prep.plan.policy, "lanes": states,
              "key_changed": shared.changed, "key_failed": shared.failed})  # fmt: skip
    sys.stdout.flush()
    sys.stderr.flush()
    argv, env = main_command(prep.config)
    os.execve(argv[0], argv, env)


def _front_pid(state_dir: Path, rec: GatewayRecord) -> int | None:
    """The running front's nginx master: its pid file, and a child of the recorded gateway process."""
    try:
        pid = int(front.paths(state_dir).pid.read_text().split()[0])
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ValueError, IndexError):
        return None
    ppid = int(stat.rsplit(")", 1)[1].split()[1])
    return pid if ppid == rec.pid else None


@dataclass(frozen=True)
class Reload:
    """What rewriting the front's key map did."""

    live: bool  # a running gateway's front took the new map
    refused: dict[str, str]  # users whose key file was left out of it, and why (they get 401)


def reload_users(state_dir: Path, confirm: tuple[str, bool] | None = None, wait_s: float = 10.0) -> Reload:
    """Rewrite the front's key map from the user key files; a running front reloads it (SIGHUP).

    `confirm` = (key, admitted): wait until the front passes a request with `key` (a new key) or
    answers it 401 (a revoked one), so `keys revoke` returns once the gateway refuses the key.
    Passed means anything but 401: with no lane serving, smg answers /v1/models with 503.
    """
    state_dir = Path(state_dir)
    refused = front.write_users(state_dir, gateway_key(state_dir), admin_key(state_dir))
    rec = load_record(state_dir)
    if rec is None or not is_running(rec) or not rec.router_port:
        return Reload(False, refused)
    pid = _front_pid(state_dir, rec)
    if pid is None:
        raise SparkfleetError(
            f"the gateway (pid {rec.pid}) runs without its front",
            hint="sparkfleet gateway down; sparkfleet gateway up",
        )
    old = procs.children(pid)  # the workers that hold the old key map
    os.kill(pid, signal.SIGHUP)
    if confirm is not None:
        key, admitted = confirm
        url = f"http://{_local(rec.bind)}:{rec.port}/v1/models"

        def taken() -> bool:
            code = get_json(url, key=key)[0]
            return code is not None and (code != 401) == admitted

        deadline = time.monotonic() + wait_s
        # One answer from a new worker is not enough: until an old worker takes its shutdown, it
        # still accepts connections with the old keys (a revoked key got 200 right after revoke).
        while not taken() or any(_still_accepting(p, ticks) for p, ticks in old):
            if time.monotonic() > deadline:
                raise SparkfleetError(
                    f"the gateway did not take the new keys within {wait_s:g} s",
                    hint=f"its front's log: {front.paths(state_dir).error_log}",
                )
            time.sleep(0.1)
    return Reload(True, refused)


def _still_accepting(pid: int, ticks: int) -> bool:
    """An nginx worker of the old configuration that may still accept a connection: it runs and has
    not begun its graceful shutdown, which closes its listening sockets and retitles it "worker
    process is shutting down" (nginx(8) reload: old workers stop accepting, finish, and exit)."""
    return procs.same_process(pid, ticks, procs.boot_id()) and "shutting down" not in procs.command_line(pid)


def add_user(state_dir: Path, name: str, out: Path | None = None) -> tuple[str, Reload]:
    """A new key for user NAME (written to `out` when given), taken by a running gateway at once.

    If the gateway does not take it, the key is removed again (it was never shown): a rerun starts
    clean instead of finding a key nobody holds.
    """
    state_dir = Path(state_dir)
    with users.locked(state_dir):
        key = users.add(state_dir, name, out)
        try:
            return key, reload_users(state_dir, (key, True))
        except BaseException:
            users.discard(state_dir, name, out)
            with contextlib.suppress(SparkfleetError, OSError):
                front.write_users(state_dir, gateway_key(state_dir), admin_key(state_dir))
            raise


def revoke_user(state_dir: Path, name: str) -> Reload:
    """USER's key removed; a running gateway refuses it before this returns.

    Stopped anywhere (an error, `kill -9`), the user stays listed as revoking and a rerun finishes.
    """
    state_dir = Path(state_dir)
    with users.locked(state_dir):
        key = users.begin_revoke(state_dir, name)
        done = reload_users(state_dir, (key, False) if key else None)
        users.finish_revoke(state_dir, name)
        return done


def served_models(base: str, key: str | None) -> list[str]:
    code, body = get_json(f"{base}/v1/models", key=key)
    if code != 200 or not isinstance(body, dict):
        return []
    return [m.get("id") for m in body.get("data", []) if isinstance(m, dict)]


def routed_workers(router: str, admin: str) -> set[str]:
    """The worker URLs smg routes to now: registered and healthy (`GET /workers` with the admin key).

    Why not its /v1/models alone: smg registers each worker on its own, after its own health
    check, and lists a model as soon as ONE worker of it is in. Two copies of one lane serve one
    model, so "listed" came while the second copy was still being registered, and every request
    then went to the first (10 of 10 to one copy, with nothing else to tell them apart)."""
    code, body = get_json(f"{router}/workers", key=admin)
    if code != 200 or not isinstance(body, dict):
        return set()
    workers = body.get("workers")
    if not isinstance(workers, list):
        return set()
    return {
        w["url"] for w in workers
        if isinstance(w, dict) and w.get("is_healthy") is True and isinstance(w.get("url"), str)
    }  # fmt: skip


def status(state_dir: Path) -> dict[str, Any]:
    """Running or not, and the model ids it serves (asked with the gateway's key)."""
    rec = load_record(Path(state_dir))
    if rec is None:
        return {"running": False}
    running = is_running(rec)
    out: dict[str, Any] = {"running": running, "pid": rec.pid, "port": rec.port, "policy": rec.policy,
                           "workers": rec.workers, "log": rec.log,
                           "users": [u.name for u in users.listing(Path(state_dir))],
                           "admin_key_file": str(apikeys.key_path(state_dir, ADMIN_KEY_NAME))}  # fmt: skip
    if running:
        base = f"http://{_local(rec.bind)}:{rec.port}"
        out["url"] = f"{base}/v1"
        out["models"] = sorted(set(served_models(base, gateway_key(Path(state_dir)))))
    return out


def down(state_dir: Path, timeout: float = 15.0) -> bool:
    """Stop the gateway `up` started (its recorded PID only); True if one was running."""
    rec = load_record(Path(state_dir))
    if rec is None or not is_running(rec):
        return False
    os.kill(rec.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while is_running(rec) and time.monotonic() < deadline:
        time.sleep(0.1)
    if is_running(rec):
        os.kill(rec.pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):  # reap our own child (`up` and `down` in one process)
        os.waitpid(rec.pid, os.WNOHANG)
    return True
