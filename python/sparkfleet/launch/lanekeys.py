"""The controller's side of lane API keys: read the head's key, install one on every host, rotate.

The key files themselves are node-local (`apikeys`); this module only moves a key between hosts
through the launch agent, whose request travels on ssh's stdin and whose answer on its stdout, so a
key is never in an argv (ours or ssh's) and never in `sparkfleet -v`'s command lines. `call` is the
launch layer's `call_agent` (passed in, as preflight takes it: tests hand in their own agent call).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..base.errors import ExitCode, SparkfleetError
from ..facts.apikeys import new_key
from ..fleet.inventory import Inventory
from ..node.protocol import ApiKeyRequest, ApiKeyWriteRequest
from ..remote.hosts import HostUnreachable, fan_out
from ..remote.nodecall import Call, ask_host, lane_request


@dataclass(frozen=True)
class KeyInstall:
    """What installing a lane's key did on each host."""

    lane: str
    changed: tuple[str, ...]  # hosts whose key file was written
    unchanged: tuple[str, ...]  # hosts that already held that key
    created: bool  # a new key was made (rotate, or a lane that had none)


def host_key(inv: Inventory, lane: str, host: str, call: Call) -> str | None:
    """The lane's key as `host` holds it (None: it has none)."""
    return ask_host(inv, host, lane_request(ApiKeyRequest, inv, lane, host), call=call)["key"]


def lane_key(inv: Inventory, lane: str, call: Call) -> str | None:
    """The key the lane's engines take: the head's (lane.hosts[0]) key file."""
    return host_key(inv, lane, inv.lane(lane).hosts[0], call)


def install(inv: Inventory, lane: str, key: str, hosts: list[str], call: Call) -> dict[str, bool]:
    """Write `key` as the lane's key on `hosts` (all at once); host -> whether its file changed."""

    def one(host: str) -> tuple[str, bool | str]:
        try:
            ans = ask_host(inv, host, lane_request(ApiKeyWriteRequest, inv, lane, host, key=key), call=call)
            return host, bool(ans["changed"])
        except HostUnreachable as exc:
            return host, exc.message

    done = dict(fan_out(one, hosts))
    failed = {h: why for h, why in done.items() if isinstance(why, str)}
    if failed:
        raise SparkfleetError(
            f"lane {lane}: the API key could not be installed on "
            + "; ".join(f"{h}: {why}" for h, why in sorted(failed.items())),
            hint=f"bring the hosts back, then sparkfleet keys rotate {lane}",
            exit_code=ExitCode.UNREACHABLE,
        )
    return {h: bool(v) for h, v in done.items()}


def rotate(inv: Inventory, lane: str, call: Call) -> KeyInstall:
    """A new key on every host of the lane (a running lane keeps its old key until relaunched)."""
    hosts = list(inv.lane(lane).hosts)
    done = install(inv, lane, new_key(), hosts, call)
    return KeyInstall(lane, tuple(h for h in hosts if done[h]), tuple(h for h in hosts if not done[h]), True)


def ensure(inv: Inventory, lane: str, call: Call, hosts: list[str] | None = None) -> KeyInstall:
    """Every host of the lane (or just `hosts`) holds the head's key; a lane without one gets one.

    Launch runs this before any rank starts, so no lane ever serves without a key; bootstrap runs it
    for the lanes of the host it prepares.
    """
    lane_hosts = list(inv.lane(lane).hosts)
    head = lane_hosts[0]
    targets = list(hosts or lane_hosts)
    try:
        key = host_key(inv, lane, head, call)
    except HostUnreachable:
        key = None
        if head in targets:
            raise
    created = key is None
    if key is None:
        if head not in targets:
            raise SparkfleetError(
                f"lane {lane}: its head {head} holds no API key yet",
                hint=f"sparkfleet keys rotate {lane}",
            )
        targets = lane_hosts  # a new key goes to every host at once
        key = new_key()
    done = install(inv, lane, key, targets, call)
    return KeyInstall(
        lane, tuple(h for h in targets if done[h]), tuple(h for h in targets if not done[h]), created
    )


def install_for_host(inv: Inventory, host: str, call: Call) -> dict[str, str]:
    """`bootstrap HOST`: each lane on the host gets its key there; lane -> what happened (or why not)."""
    out = {}
    for lane in inv.lanes_of(host):
        name = lane.name
        try:
            done = ensure(inv, name, call, hosts=[host])
            out[name] = "created" if done.created else ("installed" if done.changed else "present")
        except SparkfleetError as exc:
            out[name] = f"not installed: {exc.message}"
    return out
