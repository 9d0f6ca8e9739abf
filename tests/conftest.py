"""Shared fixtures. Real fleet hosts (netns + sshd), sshfs and tmpfs live in tests/support/fleetnet.py."""

import signal

import pytest

try:  # tests/ as a package (tests/__init__.py present)
    from .support.fleetnet import fleet_hosts, fleetnet, nas_host, ssh_config, sshfs, tmpfs
    from .support.purity import (
        pytest_addoption,
        pytest_collection_modifyitems,
        pytest_configure,
        pytest_runtest_protocol,
    )
    from .support.xdistgroups import make_scheduler
except ImportError:  # tests/ as a rootdir-less directory: pytest puts tests/ on sys.path
    from support.fleetnet import fleet_hosts, fleetnet, nas_host, ssh_config, sshfs, tmpfs
    from support.purity import (
        pytest_addoption,
        pytest_collection_modifyitems,
        pytest_configure,
        pytest_runtest_protocol,
    )
    from support.xdistgroups import make_scheduler

# A suite started in the background (`make test &`, nohup, a CI runner without a terminal) inherits
# SIGINT ignored, and an ignored signal stays ignored across exec: every child would ignore the
# Ctrl-C the tests press on it. A handler (unlike SIG_IGN) is reset to the default by exec.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

__all__ = [
    "fleet_hosts", "fleetnet", "nas_host", "ssh_config", "sshfs", "tmpfs",
    # `--pure` (make check): tests/support/purity.py
    "pytest_addoption", "pytest_collection_modifyitems", "pytest_configure", "pytest_runtest_protocol",
]  # fmt: skip


@pytest.hookimpl(optionalhook=True)  # a plain pytest without xdist still runs every test
def pytest_xdist_make_scheduler(config, log):
    """`make test` runs `-n N --dist loadgroup`: keep each xdist_group on one worker (xdistgroups.py)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    return make_scheduler(config, log)

