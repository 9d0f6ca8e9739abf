"""Shared fixtures. Real fleet hosts (netns + sshd), sshfs and tmpfs live in tests/support/fleetnet.py."""

try:  # tests/ as a package (tests/__init__.py present)
    from .support.fleetnet import fleet_hosts, fleetnet, nas_host, ssh_config, sshfs, tmpfs
except ImportError:  # tests/ as a rootdir-less directory: pytest puts tests/ on sys.path
    from support.fleetnet import fleet_hosts, fleetnet, nas_host, ssh_config, sshfs, tmpfs

__all__ = ["fleet_hosts", "fleetnet", "nas_host", "ssh_config", "sshfs", "tmpfs"]
