"""`sparkfleet bootstrap HOST` and the doctor's prerequisite checks, over real ssh.

The host is a network-namespace fleet host whose "/" for Nix's files is a private directory
(SPARKFLEET_HOST_ROOT): <root>/nix/var/nix/profiles/default/bin holds Debian's nix-bin (as the
multi-user installer's profile would), <root>/etc/nix/nix.conf starts as the installer leaves it
but without root trusted, and the ssh session's PATH (sshd SetEnv) is <root>/usr/local/bin plus
every /usr/bin tool but Nix's — a DGX OS host's non-interactive PATH. Emulated, not real:
`systemctl` is a stub that records its arguments (no systemd in the namespace), and the sudoers
drop-in is checked by the real `visudo -c` but not read by the machine's sudo.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from launch_fleet import MODELS, write_fleet

from sparkfleet import bootstrap as bs
from sparkfleet.cli import main as cli
from sparkfleet.hosts import LocalHost

pytestmark = [pytest.mark.netns]
SECRET = "ghp_bootstrapTestSecret0123"
NIX_CONF = (
    "build-users-group = nixbld\n"
    f"access-tokens = github.com={SECRET}\n"  # next to the edited line: a diff shows it as context
    "trusted-users = @wheel # the installer's default\n"
)


@pytest.fixture
def dgx_os_host(fleetnet, tmp_path, monkeypatch):
    for tool in ("visudo", "nix-store"):
        if shutil.which(tool) is None:
            pytest.skip(f"`{tool}` not found (Debian packages sudo, nix-bin)")
    prefix = fleetnet.unique_dir("dgxos-root")
    profile = prefix / "nix/var/nix/profiles/default/bin"
    profile.mkdir(parents=True)
    for name in ("nix", "nix-store", "nix-env"):
        (profile / name).symlink_to(shutil.which(name))
    (prefix / "usr/local/bin").mkdir(parents=True)
    (prefix / "usr/local/bin/other-tool").write_text("#!/bin/sh\n")  # somebody else's: never touched
    (prefix / "etc/nix").mkdir(parents=True)
    (prefix / "etc/nix/nix.conf").write_text(NIX_CONF)
    stubs = prefix.parent / f"{prefix.name}-bin"
    stubs.mkdir()
    # every tool of /usr/bin except Nix's (root's shell rc needs many of them) and systemctl
    for tool in Path("/usr/bin").iterdir():
        if not tool.name.startswith("nix") and tool.name != "systemctl":
            (stubs / tool.name).symlink_to(tool)
    calls = stubs.parent / f"{prefix.name}-systemctl.log"
    (stubs / "systemctl").write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    (stubs / "systemctl").chmod(0o755)
    path = f"{prefix}/usr/local/bin:{stubs}:/usr/sbin"
    host = fleetnet.add_host("dgxos", env={"PATH": path})
    try:
        config = tmp_path / "ssh_config"
        config.write_text(
            "Host *\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n"
        )
        monkeypatch.setenv("SPARKFLEET_SSH_CONFIG", str(config))
        monkeypatch.setenv("SPARKFLEET_HOST_ROOT", str(prefix))
        monkeypatch.setenv("SPARKFLEET_REMOTE", f"{sys.executable} -m sparkfleet")
        fields = {"dgxos": {"address": host.addr, "ssh_user": "root", "ssh_port": host.port,
                            "ssh_key": str(host.key), "local_hub": str(host.nvme / "hub"),
                            "nas_hub": str(host.root / "nas")}}  # fmt: skip
        root = write_fleet(tmp_path / "fleet", fields, {"models": '[lane]\nhosts = ["dgxos"]\n' + MODELS})
        yield {"host": host, "prefix": prefix, "calls": calls, "root": root}
    finally:
        fleetnet.remove_host(host)
        shutil.rmtree(stubs, ignore_errors=True)


def _cli(env, *args):
    return CliRunner().invoke(cli, ["--root", str(env["root"]), *args])


def again_output(env) -> str:
    return _cli(env, "bootstrap", "dgxos", "--dry-run").output


def _snapshot(prefix: Path) -> dict[str, tuple]:
    out = {}
    for p in sorted(prefix.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(prefix))] = (
            st.st_ino,
            st.st_mtime_ns,
            st.st_mode,
            os.readlink(p) if p.is_symlink() else None,
        )
    return out


def test_bootstrap_prepares_a_dgx_os_host_and_a_rerun_changes_nothing(dgx_os_host):
    env = dgx_os_host
    prefix, host = env["prefix"], env["host"]
    # a stock host: nix-store is not on the non-interactive ssh PATH (what `nix copy` runs)
    assert host.ssh("nix-store --version").returncode != 0

    before = _snapshot(prefix)
    dry = _cli(env, "bootstrap", "dgxos", "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    plan = json.loads(dry.output)
    steps = [c["step"] for c in plan["changes"]]
    assert steps == ["nix-path"] * 3 + ["trusted-users", "nix-daemon", "sudo-path"]
    assert {p["name"]: p["ok"] for p in plan["after"]} == {
        "nix on ssh PATH": False, "trusted-users": False, "sudo secure_path": False}  # fmt: skip
    assert _snapshot(prefix) == before and not env["calls"].exists()  # a dry run changes nothing

    plain = {c["name"]: c for c in json.loads(_cli(env, "doctor", "dgxos", "--json").output)["checks"]}
    assert "sudo secure_path" not in plain and plain["deploy prereqs"]["ok"] is None  # deploy only
    assert "doctor dgxos --deploy" in plain["deploy prereqs"]["hint"]
    doctor_before = _cli(env, "doctor", "dgxos", "--deploy", "--json")
    checks = {c["name"]: c for c in json.loads(doctor_before.output)["checks"]}
    assert (
        checks["nix on ssh PATH"]["ok"] is False
        and "sparkfleet bootstrap dgxos" in checks["nix on ssh PATH"]["hint"]
    )
    assert checks["trusted-users"]["ok"] is False and checks["sudo secure_path"]["ok"] is False

    res = _cli(env, "bootstrap", "dgxos")
    assert res.exit_code == 0, res.output
    out = res.output
    # every change is shown (with its diff) before the final state lines
    assert (
        out.index("→ add root to trusted-users") < out.index("+trusted-users = @wheel root") < out.index("✓")
    )
    assert "+Defaults secure_path=" in out

    assert host.ssh("nix-store --version").returncode == 0  # `nix copy`'s nix-store --serve finds Nix now
    link = prefix / "usr/local/bin/nix-store"
    assert os.readlink(link) == str(
        prefix / "nix/var/nix/profiles/default/bin/nix-store"
    )  # the profile, not a store path
    conf = (prefix / "etc/nix/nix.conf").read_text()
    assert conf == NIX_CONF.replace("@wheel #", "@wheel root #")
    assert SECRET not in res.output + dry.output + again_output(env)  # never shown, only kept
    assert env["calls"].read_text() == "restart nix-daemon.service\n"
    drop = prefix / "etc/sudoers.d/sparkfleet-nix"
    assert drop.stat().st_mode & 0o777 == 0o440
    assert f'secure_path="{prefix}/nix/var/nix/profiles/default/bin:/usr/local/sbin' in drop.read_text()
    assert os.system(f"visudo -c -q -f {drop}") == 0
    assert (prefix / "usr/local/bin/other-tool").read_text() == "#!/bin/sh\n"
    assert not [p for p in prefix.rglob("*") if "sparkfleet-tmp" in p.name]

    after = _snapshot(prefix)
    again = _cli(env, "bootstrap", "dgxos", "--json")
    assert again.exit_code == 0 and json.loads(again.output)["changes"] == []
    assert _snapshot(prefix) == after  # idempotent: not a byte, inode or mtime moved
    assert env["calls"].read_text() == "restart nix-daemon.service\n"  # no second restart

    after_doc = _cli(env, "doctor", "dgxos", "--deploy", "--json")
    checks = {c["name"]: c for c in json.loads(after_doc.output)["checks"]}
    assert all(checks[n]["ok"] is True for n in ("nix on ssh PATH", "trusted-users", "sudo secure_path"))


def test_a_sudoers_file_that_visudo_rejects_is_never_installed(tmp_path):
    if shutil.which("visudo") is None:
        pytest.skip("visudo not found (Debian package sudo)")
    target = tmp_path / "etc/sudoers.d/sparkfleet-nix"
    target.parent.mkdir(parents=True)
    target.write_text("# the old one\n")
    bad = bs.Change("sudo-path", "broken", str(target), None, 'Defaults secure_path="/unterminated\n', "0440",
                    validate=("visudo", "-c", "-f"))  # fmt: skip
    with pytest.raises(bs.BootstrapError, match="visudo check of the new sparkfleet-nix failed"):
        bs.apply_change(LocalHost("local"), [], bad)
    assert target.read_text() == "# the old one\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["sparkfleet-nix"]  # temp removed


def test_trusted_users_edits_keep_everything_else():
    assert bs.trusted_users("trusted-users = a b\nextra-trusted-users = c\n") == ["a", "b", "c"]
    assert bs.is_trusted("x", "trusted-users = *\n") and not bs.is_trusted("x", None)
    assert bs.with_trusted_user(None, "kilork").endswith("trusted-users = root kilork\n")
    conf = "max-jobs = 4\ntrusted-users = root\nsubstituters = https://cache.nixos.org\n"
    assert bs.with_trusted_user(conf, "kilork") == conf.replace("= root\n", "= root kilork\n")


def test_a_host_without_sparkfleet_is_told_to_bootstrap_and_deploy(dgx_os_host, monkeypatch):
    """Over real ssh, before any deploy: `sparkfleet` is not on the host, and every verb says so once."""
    monkeypatch.setenv("SPARKFLEET_REMOTE", "sparkfleet")  # how a deployed host would start it
    checks = {
        c["name"]: c for c in json.loads(_cli(dgx_os_host, "doctor", "dgxos", "--json").output)["checks"]
    }
    agent = checks["agent"]
    assert agent["ok"] is False and agent["detail"] == (
        "dgxos: sparkfleet is not installed there (sparkfleet: command not found)")  # fmt: skip
    assert "sparkfleet bootstrap dgxos" in agent["hint"] and "deploy .#dgxos" in agent["hint"]
    staged = _cli(dgx_os_host, "stage", "dgxos", "--json")
    assert staged.exit_code != 0
    assert "sparkfleet is not installed there" in staged.output, staged.output
