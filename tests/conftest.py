"""Shared fixtures. Real fleet hosts (netns + sshd), sshfs and tmpfs live in tests/support/fleetnet.py."""

import signal
from pathlib import Path

import pytest

try:  # tests/ as a package (tests/__init__.py present)
    from .support import purity
    from .support.fleetnet import fleet_hosts, fleetnet, nas_host, ssh_config, sshfs, tmpfs
    from .support.xdistgroups import make_scheduler
except ImportError:  # tests/ as a rootdir-less directory: pytest puts tests/ on sys.path
    from support import purity
    from support.fleetnet import fleet_hosts, fleetnet, nas_host, ssh_config, sshfs, tmpfs
    from support.xdistgroups import make_scheduler

TESTS = Path(__file__).resolve().parent

# A suite started in the background (`make test &`, nohup, a CI runner without a terminal) inherits
# SIGINT ignored, and an ignored signal stays ignored across exec: every child would ignore the
# Ctrl-C the tests press on it. A handler (unlike SIG_IGN) is reset to the default by exec.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

__all__ = ["fleet_hosts", "fleetnet", "nas_host", "ssh_config", "sshfs", "tmpfs"]


@pytest.hookimpl(optionalhook=True)  # a plain pytest without xdist still runs every test
def pytest_xdist_make_scheduler(config, log):
    """`make test` runs `-n N --dist loadgroup`: keep each xdist_group on one worker (xdistgroups.py)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    return make_scheduler(config, log)


def pytest_addoption(parser):
    parser.addoption(
        "--pure", action="store_true",
        help="only the tests that need no root, netns, mount, container, engine, Nix or sshd (make check); "
        "tests/support/purity.py says how they are chosen and guards them while they run",
    )  # fmt: skip


def pytest_configure(config):
    if config.getoption("pure"):
        purity.install_guard()


def pytest_collection_modifyitems(config, items):
    if config.getoption("pure"):
        purity.select_pure(config, items, TESTS)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Under --pure, the guard knows which test runs (setup, call and teardown)."""
    if not item.config.getoption("pure"):
        return (yield)
    purity.enter(item.nodeid)
    try:
        return (yield)
    finally:
        purity.leave()
