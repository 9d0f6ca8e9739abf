"""Shared fixtures. Real fleet hosts (netns + sshd), sshfs and tmpfs live in tests/support/fleetnet.py."""

try:  # tests/ as a package (tests/__init__.py present)
    from .support.fleetnet import fleet_hosts, fleetnet, nas_host, ssh_config, sshfs, tmpfs
    from .support.xdistgroups import make_scheduler
except ImportError:  # tests/ as a rootdir-less directory: pytest puts tests/ on sys.path
    from support.fleetnet import fleet_hosts, fleetnet, nas_host, ssh_config, sshfs, tmpfs
    from support.xdistgroups import make_scheduler

__all__ = ["fleet_hosts", "fleetnet", "nas_host", "ssh_config", "sshfs", "tmpfs"]


def pytest_xdist_make_scheduler(config, log):
    """`make test` runs `-n N --dist loadgroup`: keep each xdist_group on one worker (xdistgroups.py)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    return make_scheduler(config, log)
