"""`pytest --pure` (what `make check` runs): the tests that need no root, network namespace, mount,
container, engine, Nix or sshd, chosen by what they use, and held to it while they run.

Why a selection by use and not a hand-kept list: a list goes stale the day a test starts a
container. A test is *heavy* (left to `make test`) when any of these says so:
- its folder: tests/nix, tests/engine and tests/integration exist for Nix, vLLM and netns hosts;
- its marks: `netns`, `fuse`, `nix`, `system` (what it needs), `slow` (more than a few seconds), `serial`
  (a time bound other load breaks), `xdist_group` (its module shares a fleet, an engine or this
  machine's serving ports with others: what it shares is what makes it heavy);
- its fixtures, transitively: the netns fleet, tmpfs and sshfs mounts, the Nix chroot, the engine;
- its module's names: a function or module of a support module that builds netns hosts, a
  registry, a gateway, a browser or an engine (`HEAVY_SUPPORT`).
Everything else is *pure*, and `--pure` keeps it honest while it runs: an audit hook refuses, with
the test's name in the error, any process a pure test starts from `HEAVY_PROGRAMS` (or from the
engine's venv) and any namespace or mount it makes. A test that trips it is not pure: mark it
(`slow`, `netns`, ...) or make it use a heavy fixture, and `make check` leaves it to `make test`.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import types
from pathlib import Path

import pytest

HEAVY_FOLDERS = frozenset({"nix", "engine", "integration"})
HEAVY_MARKS = frozenset({"netns", "fuse", "nix", "system", "slow", "serial", "xdist_group"})
HEAVY_FIXTURES = frozenset({
    "fleetnet", "fleet_hosts", "nas_host", "ssh_config", "tmpfs", "sshfs",  # support/fleetnet.py
    "real_nix",  # tests/nix: the Nix chroot
    "tiny_model", "vllm_cli", "engine", "spec_engine",  # tests/engine: the vLLM CPU engine
})  # fmt: skip
# Support modules whose helpers start netns hosts, sshd, a registry, nginx, chromium or an engine.
HEAVY_SUPPORT = frozenset({
    "fleetnet", "lanefleet", "stagefleet", "registryfleet", "chromium", "engines", "localgateway",
    "demolane",
})  # fmt: skip
# Programs a pure test never starts: they need root, a namespace, a mount, a container runtime,
# sshd, Nix, a browser, a registry or an engine. The ssh client is not one: asking an address that
# does not answer is how a test sees an unreachable host, and a host that answers needs sshd.
HEAVY_PROGRAMS = frozenset({
    "ip", "nsenter", "unshare", "mount", "umount", "chroot", "sudo",
    "sshd", "sshfs", "fusermount", "fusermount3",
    "podman", "docker", "runc", "skopeo", "docker-registry", "nginx",
    "nix", "nix-build", "nix-instantiate", "nix-store", "nix-env",
    "chromium", "prometheus", "promtool", "vllm", "smg",
})  # fmt: skip
ENGINE_VENV = ".venv-vllm"
TESTS = Path(__file__).resolve().parents[1]

_running: list[str] = []  # the node id of the pure test now running (one per process)


def support_module(name: str) -> str | None:
    """`fleetnet` for `support.fleetnet` or `tests.support.fleetnet`, else None."""
    parts = name.split(".")
    if len(parts) >= 2 and parts[-2] == "support":
        return parts[-1]
    return None


def uses_heavy_support(module: types.ModuleType | None) -> bool:
    """Whether the test module holds a heavy support module or anything defined in one."""
    if module is None:
        return False
    for value in vars(module).values():
        name = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
        if isinstance(name, str) and support_module(name) in HEAVY_SUPPORT:
            return True
    return False


def heavy_reason(item: pytest.Item, tests_root: Path) -> str | None:
    """Why `item` is left to `make test`, or None when it is pure."""
    try:
        rel = Path(item.path).resolve().relative_to(tests_root)
    except ValueError:  # a test outside tests/ (a sandbox's own pytest run)
        rel = Path(".")
    if rel.parts and rel.parts[0] in HEAVY_FOLDERS:
        return f"folder tests/{rel.parts[0]}"
    marks = HEAVY_MARKS.intersection(m.name for m in item.iter_markers())
    if marks:
        return f"marked {', '.join(sorted(marks))}"
    fixtures = HEAVY_FIXTURES.intersection(getattr(item, "fixturenames", ()))
    if fixtures:
        return f"uses {', '.join(sorted(fixtures))}"
    if uses_heavy_support(getattr(item, "module", None)):
        return "its module uses a heavy tests/support module"
    return None


def select_pure(config: pytest.Config, items: list[pytest.Item], tests_root: Path) -> None:
    """Keep the pure items in `items`; report the rest as deselected."""
    keep, drop = [], []
    for item in items:
        (drop if heavy_reason(item, tests_root) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep


def program_of(args: object) -> str:
    """The program a Popen/exec/spawn audit event starts, as its path."""
    if isinstance(args, (str, bytes, os.PathLike)):
        text = os.fsdecode(args)
        return text.split()[0] if text.split() else text
    if isinstance(args, (list, tuple)) and args:
        return os.fsdecode(args[0])
    return ""


def resolve(program: str, env: object) -> str | None:
    """Where `program` is on the PATH the process gets (its env's, else ours); None when nowhere."""
    if "/" in program:
        return program
    path = env.get("PATH") if isinstance(env, dict) else None
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    return shutil.which(program, path=path if isinstance(path, str) else None)


def refused(program: str, env: object = None) -> bool:
    """A real heavy program: a stand-in a test wrote under the temp folder (a fake `docker`
    recording its argv) is not one."""
    if f"/{ENGINE_VENV}/" in program:
        return True
    if Path(program).name not in HEAVY_PROGRAMS:
        return False
    where = resolve(program, env)
    if where is None:  # nothing to start: Popen fails on its own
        return False
    return not os.path.realpath(where).startswith(os.path.realpath(tempfile.gettempdir()) + os.sep)


def audit(event: str, args: tuple) -> None:
    """The guard: inside a pure test, no heavy program, no namespace, no mount."""
    if not _running:
        return
    what = None
    if event == "subprocess.Popen":
        program = os.fsdecode(args[0]) if args[0] else program_of(args[1])
        if refused(program, args[3]):
            what = f"starts {program}"
    elif event in ("os.exec", "os.posix_spawn", "os.spawn"):
        program = os.fsdecode(args[0]) if args and args[0] else ""
        if refused(program):
            what = f"starts {program}"
    elif event == "os.system":
        program = program_of(args[0])
        if refused(program):
            what = f"starts {program}"
    elif event in ("os.unshare", "os.setns"):
        what = f"calls {event}"
    if what:
        raise PermissionError(
            f"{_running[-1]} is selected as pure (make check) but {what}; mark it (netns, slow, ...) "
            "or give it a heavy fixture so that only make test runs it (tests/support/purity.py)"
        )


def install_guard() -> None:
    """Once per process: audit hooks cannot be removed, so this is for `--pure` runs only."""
    if not getattr(sys, "_sparkfleet_pure_guard", False):
        sys.addaudithook(audit)
        sys._sparkfleet_pure_guard = True  # type: ignore[attr-defined]


def enter(nodeid: str) -> None:
    _running.append(nodeid)


def leave() -> None:
    if _running:
        _running.pop()


# ---- the plugin: tests/conftest.py takes these hooks in; `-p support.purity` loads them alone ----


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--pure", action="store_true",
        help="only the tests that need no root, netns, mount, container, engine, Nix or sshd (make check); "
        "tests/support/purity.py says how they are chosen and guards them while they run",
    )  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("pure"):
        install_guard()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("pure"):
        select_pure(config, items, TESTS)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Under --pure, the guard knows which test runs (setup, call and teardown)."""
    if not item.config.getoption("pure"):
        return (yield)
    enter(item.nodeid)
    try:
        return (yield)
    finally:
        leave()
