"""One test fleet: the fleet root every test writes, and the glue from netns hosts to it.

A fleet root is `hosts/fleet.toml` + `recipes/<lane>/recipe.toml`. Launch, stage, engram, bench and
nix tests each wrote their own copy of it; they now differ only in what they pass here (hosts,
`[defaults]`, pins, extra TOML). The netns glue (an ssh_config, `SPARKFLEET_SSH_CONFIG`,
`SPARKFLEET_REMOTE`, a host's address/port/key/hub fields) was copied into the test modules that
reach netns hosts over ssh; it is `netns_fields` and `use_ssh` here.

Two ways to reach a netns host, both real ssh:
- by fields: fleet.toml carries the host's address, ssh_port and ssh_key (`netns_fields`); the
  ssh_config only relaxes host-key checking for every host (`use_ssh(mp, path)`).
- by name: fleet.toml's address is the host's name and the ssh_config maps each name to its
  namespace address, port and key (`use_ssh(mp, path, hosts)`), as a user's ~/.ssh/config would.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import pytest

from sparkfleet.base.http import free_port  # noqa: F401  (the tests' one way to a free port)
from sparkfleet.demo.hubfixture import DRAFTER_REPO, WEIGHTS_REPO

try:
    from support.fleetnet import FleetNet, NetnsHost, netns_pids, pid_alive, unshape, write_ssh_config
except ImportError:  # tests/ imported as a package
    from tests.support.fleetnet import FleetNet, NetnsHost, netns_pids, pid_alive, unshape, write_ssh_config

# The demo fixture's weights and drafter (sparkfleet.demo.hubfixture), and two image pins.
DEMO_PINS: dict[str, dict[str, str]] = {
    "weights": {"kind": "hf", "repo": WEIGHTS_REPO, "revision": "main"},
    "drafter": {"kind": "hf", "repo": DRAFTER_REPO, "revision": "main"},
    "lane-image": {"kind": "oci", "image": "ghcr.io/example/lane", "digest": "sha256:" + "ab" * 32},
    "short-image": {"kind": "oci", "image": "ghcr.io/example/short", "digest": "sha256:3dbc3130"},
}

# A recipe's [[models]]: the fixture's weights (page15 left out) and the drafter.
MODELS = """
[[models]]
pin = "weights"
exclude = ["page15/*"]

[[models]]
pin = "drafter"
"""

# For hosts reached by fields: their address, port and key are in fleet.toml.
SSH_ANY_HOST = "Host *\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n"
REMOTE = f"{sys.executable} -m sparkfleet"  # the sparkfleet a netns host runs: this one


def toml_value(v: object) -> str:
    """One TOML value: strings (and paths) quoted, numbers and booleans bare, inline tables, arrays."""
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int | float):
        return str(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return json.dumps(str(v))


def _table(header: str, fields: Mapping[str, object]) -> list[str]:
    return [f"[{header}]", *(f"{k} = {toml_value(v)}" for k, v in fields.items()), ""]


def fleet_toml(
    hosts: Mapping[str, Mapping[str, object]],
    *,
    defaults: Mapping[str, object] | None = None,
    pins: Mapping[str, Mapping[str, object]] = DEMO_PINS,
    extra: str = "",
) -> str:
    """The text of hosts/fleet.toml; `extra` is raw TOML appended at the end (more pins, say)."""
    lines = ["schema_version = 1", ""]
    if defaults:
        lines += _table("defaults", defaults)
    for name, fields in hosts.items():
        lines += _table(f"hosts.{name}", fields)
    for name, fields in pins.items():
        lines += _table(f"pins.{name}", fields)
    return "\n".join(lines) + extra


def write_recipe(root: Path, lane: str, text: str) -> Path:
    path = root / "recipes" / lane / "recipe.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def write_root(root: Path, fleet: str, lanes: Mapping[str, str] | None = None) -> Path:
    """Write `root/hosts/fleet.toml` (the text `fleet`) and `root/recipes/<lane>/recipe.toml`; return root."""
    (root / "hosts").mkdir(parents=True, exist_ok=True)
    (root / "hosts" / "fleet.toml").write_text(fleet)
    for lane, text in (lanes or {}).items():
        write_recipe(root, lane, text)
    return root


def write_fleet(
    root: Path,
    hosts: Mapping[str, Mapping[str, object]],
    lanes: Mapping[str, str] | None = None,
    extra: str = "",
    *,
    defaults: Mapping[str, object] | None = None,
    pins: Mapping[str, Mapping[str, object]] = DEMO_PINS,
) -> Path:
    """A fleet root of `hosts` ({name: fields}) and `lanes` ({lane: recipe text}); return root."""
    return write_root(root, fleet_toml(hosts, defaults=defaults, pins=pins, extra=extra), lanes)


def lane_recipe(hosts: Iterable[str], models: str = MODELS, extra: str = "") -> str:
    """A recipe that stages `models` on `hosts` (no [launch]: stage, verify and engram tests)."""
    return f"[lane]\nhosts = {json.dumps(list(hosts))}\n{models}{extra}"


def netns_fields(host: NetnsHost, nas_hub: str | os.PathLike, **extra: object) -> dict[str, object]:
    """A netns host's fleet.toml fields, reached by fields: its address, port and key, its own NVMe hub
    and state dir, the shared NAS hub. `extra` adds or replaces fields; a field given None is left out."""
    fields = {
        "address": host.addr,
        "ssh_user": "root",
        "ssh_port": host.port,
        "ssh_key": str(host.key),
        "local_hub": str(host.nvme / "hub"),
        "nas_hub": str(nas_hub),
        "state_dir": str(host.root / "state"),
        **extra,
    }
    return {k: v for k, v in fields.items() if v is not None}


def use_ssh(
    mp: pytest.MonkeyPatch,
    config: Path,
    hosts: Mapping[str, NetnsHost] | Iterable[NetnsHost] | None = None,
    remote: str = REMOTE,
) -> Path:
    """Write the ssh_config at `config` and point sparkfleet at it: `SPARKFLEET_SSH_CONFIG`, and
    `SPARKFLEET_REMOTE` (the command a host runs; `{host}` is the host's name). `hosts`: one entry per
    host name (reached by name); None: hosts are reached by fields. This process is no fleet host,
    so `SPARKFLEET_HOST` is unset."""
    if hosts is None:
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(SSH_ANY_HOST)
    else:
        write_ssh_config(hosts, config)
    mp.setenv("SPARKFLEET_SSH_CONFIG", str(config))
    mp.setenv("SPARKFLEET_REMOTE", remote)
    mp.delenv("SPARKFLEET_HOST", raising=False)
    return config


class HostPool:
    """Netns hosts that outlive one test: the slow part of a fleet (a namespace and an sshd each),
    built once per module instead of once per test; a module fixture makes it and `close()`s it,
    also when a test failed.

    `fresh(names)` hands the hosts back as new: every file in a host's tree but its sshd's is gone,
    its link shaping removed, any process a test left in it killed (by PID, inside its namespace
    only), and a host whose sshd a test killed is built again under the same name. `before_add(name)`
    runs before a host is (re)built: mounts its sshd must see go there.
    """

    def __init__(self, net: FleetNet, before_add: Callable[[str], None] | None = None) -> None:
        self.net = net
        self.before_add = before_add
        self.hosts: dict[str, NetnsHost] = {}

    def _add(self, name: str) -> NetnsHost:
        if self.before_add is not None:
            self.before_add(name)
        self.hosts[name] = self.net.add_host(name)
        return self.hosts[name]

    def _reset(self, host: NetnsHost) -> NetnsHost:
        if not pid_alive(host.sshd_pid):  # a test killed it: the host comes back, a new namespace
            self.net.remove_host(host)
            return self._add(host.name)
        for pid in netns_pids(host.netns):
            if pid != host.sshd_pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        unshape(host)
        for entry in host.root.iterdir():
            if entry.name != ".sshd":
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        host.nvme.mkdir()
        return host

    def fresh(self, names: Iterable[str]) -> dict[str, NetnsHost]:
        """Hosts `names`, as new (see the class)."""
        return {n: self._reset(self.hosts[n]) if n in self.hosts else self._add(n) for n in names}

    def close(self) -> None:
        errors: list[BaseException] = []
        for h in list(self.hosts.values()):
            try:
                self.net.remove_host(h)
            except Exception as e:
                errors.append(e)
        self.hosts.clear()
        if errors:
            raise errors[0]


REPO = Path(__file__).resolve().parents[2]
# The Aiden kit publishes its production image by tag only; the real fleet leaves its digest to
# `pins resolve`. A stand-in digest lets a copy of the real fleet plan that lane offline.
STAND_IN_DIGEST = "sha256:" + "5e" * 32


def repo_fleet(root: Path, digest: str = STAND_IN_DIGEST) -> Path:
    """A copy of this repository's own fleet (hosts/fleet.toml, recipes/) under `root`, the tag-only
    production pin given `digest`: the real inventory, planned as an operator would. Return root."""
    (root / "hosts").mkdir(parents=True)
    text = (REPO / "hosts" / "fleet.toml").read_text()
    pinned = text.replace('tag = "production-1.2"\n', f'tag = "production-1.2"\ndigest = "{digest}"\n')
    (root / "hosts" / "fleet.toml").write_text(pinned)
    shutil.copytree(REPO / "recipes", root / "recipes")
    return root


def serve_demo_lane(inv) -> list[int]:
    """The demo lane staged on its hosts and launched (process runtime, no canary), as a previous
    `sparkfleet demo` leaves it serving: its ranks' PIDs, each checked alive. The caller stops it."""
    from sparkfleet.base import procs
    from sparkfleet.demo.fleet import DEMO_LANE
    from sparkfleet.launch import lane as lanes
    from sparkfleet.stage import execute
    from sparkfleet.stage.targets import requests_for_host

    for host in inv.lane(DEMO_LANE).hosts:
        assert execute.stage(requests_for_host(inv, host, DEMO_LANE)).ok
    assert lanes.launch(inv, DEMO_LANE, canary=False).ready.ok
    pids = [r.pid for r in lanes.status(inv, DEMO_LANE).ranks]
    assert len(pids) == 2 and all(procs.group_members(p) for p in pids)
    return pids


def demo_recipe(
    hosts: list[str], port: int, extra_args: str = "", ready_s: float = 30, bind="127.0.0.1"
) -> str:
    """A local lane's recipe whose engine is sparkfleet's demo OpenAI server, run as a process."""
    return f"""
[lane]
hosts = {hosts!r}

[world]
tp = {len(hosts)}

[launch]
runtime = "process"
port = {port}
served_model_name = "deepseek-v4.1-flash"
fabric = "none"
command = ["{sys.executable}", "-m", "sparkfleet.demo.openai_server",
           "--host", "{bind}", "--port", "{{port}}",
           "--served-model-name", "{{served_model_name}}", "--boot-delay", "0.6",
           "--signature", "Load weight end. type=demo, elapsed=0.42 s",
           "--signature", "RoCEnante ready: world={len(hosts)}" {extra_args}]
ready_signatures = ["RoCEnante ready: world={len(hosts)}", "The server is fired up and ready to roll!"]
receipt_roots = ["/cache/ds41-backend-attestation", "/cache/ds41-combined-ready"]
[launch.timeouts]
ready_s = {ready_s}
poll_s = 0.2
stop_s = 5
""" + MODELS.replace('exclude = ["page15/*"]', 'exclude = ["page15/*"]')
