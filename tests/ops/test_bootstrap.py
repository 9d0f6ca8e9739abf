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

import contextlib
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparkfleet.cli import main as cli
from sparkfleet.ops import bootstrap as bs
from sparkfleet.remote.hosts import LocalHost
from support.lanefleet import MODELS, netns_fields, use_ssh, write_fleet

pytestmark = [pytest.mark.netns]
SECRET = "ghp_bootstrapTestSecret0123"
NIX_CONF = (
    "build-users-group = nixbld\n"
    f"access-tokens = github.com={SECRET}\n"  # next to the edited line: a diff shows it as context
    "trusted-users = @wheel # the installer's default\n"
)


# `systemctl` as far as bootstrap uses it, around a real nix-daemon that reads <root>/etc/nix:
# `show -p MainPID` prints its PID, `restart` kills it (by that PID) and starts a new one, unless
# <state>/fail-restart exists (then it fails once, like a unit that would not come back).
SYSTEMCTL = """#!/bin/sh
pidfile={state}/pid
if [ "$1" = show ]; then
  if [ -s $pidfile ] && kill -0 "$(cat $pidfile)" 2>/dev/null; then cat $pidfile; else echo 0; fi
  exit 0
fi
[ -n "$QUIET" ] || echo "$@" >> {calls}
if [ -e {state}/fail-restart ]; then
  rm -f {state}/fail-restart; echo "Job for nix-daemon.service failed." >&2; exit 1
fi
if [ -s $pidfile ]; then kill "$(cat $pidfile)" 2>/dev/null; sleep 0.3; fi
mkdir -p "$(dirname {sock})"; rm -f {sock}
NIX_CONF_DIR={prefix}/etc/nix NIX_DAEMON_SOCKET_PATH={sock} NIX_STATE_DIR={state}/nix-state \\
  setsid {daemon} </dev/null >>{state}/daemon.log 2>&1 &
echo $! > $pidfile
for i in $(seq 100); do [ -S {sock} ] && exit 0; sleep 0.1; done
exit 1
"""


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
    state = stubs.parent / f"{prefix.name}-daemon"
    state.mkdir()
    sock = prefix / bs.DAEMON_SOCKET.lstrip("/")
    (stubs / "systemctl").write_text(
        SYSTEMCTL.format(
            calls=calls, state=state, prefix=prefix, sock=sock, daemon=shutil.which("nix-daemon")
        )
        # (its store state lives in <state>, not under <root>: the test compares <root> byte for byte)
    )
    (stubs / "systemctl").chmod(0o755)
    # the stock host's daemon is running before bootstrap (it read the installer's nix.conf)
    started = subprocess.run([str(stubs / "systemctl"), "restart", bs.DAEMON_UNIT], env={"QUIET": "1"})
    assert started.returncode == 0, (state / "daemon.log").read_text()
    path = f"{prefix}/usr/local/bin:{stubs}:/usr/sbin"
    host = fleetnet.add_host("dgxos", env={"PATH": path})
    try:
        use_ssh(monkeypatch, tmp_path / "ssh_config")
        monkeypatch.setenv("SPARKFLEET_HOST_ROOT", str(prefix))
        fields = {"dgxos": netns_fields(host, host.root / "nas", state_dir=None)}
        root = write_fleet(tmp_path / "fleet", fields, {"models": '[lane]\nhosts = ["dgxos"]\n' + MODELS})
        yield {"host": host, "prefix": prefix, "calls": calls, "root": root, "state": state}
    finally:
        fleetnet.remove_host(host)
        pid = (state / "pid").read_text().strip() if (state / "pid").exists() else ""
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGTERM)  # the daemon this fixture's stub started
        shutil.rmtree(stubs, ignore_errors=True)
        shutil.rmtree(state, ignore_errors=True)


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
    assert steps == ["nix-path"] * 3 + ["trusted-users", "nix-features", "nix-daemon", "sudo-path"]
    assert {p["name"]: p["ok"] for p in plan["after"]} == {
        "nix on ssh PATH": False, "trusted-users": False, "nix-daemon trusts user": False,
        "nix flakes": False, "sudo secure_path": False}  # fmt: skip
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
    # trusted-users gains root; stock Nix's missing `nix` command and flakes are enabled (the
    # node builds its own profile with `nix build`: deploy-rs remoteBuild)
    assert conf.startswith(NIX_CONF.replace("@wheel #", "@wheel root #"))
    assert conf.endswith("\nexperimental-features = nix-command flakes\n")
    assert bs.experimental_features(conf) == ["nix-command", "flakes"]
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
    names = ("nix on ssh PATH", "trusted-users", "nix-daemon trusts user", "nix flakes", "sudo secure_path")
    assert all(checks[n]["ok"] is True for n in names), checks


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


def test_experimental_features_edits_keep_everything_else():
    both = "experimental-features = a\nextra-experimental-features = b\n"
    assert bs.experimental_features(both) == ["a", "b"]
    conf = "max-jobs = 4\nexperimental-features = ca-derivations # mine\nsubstituters = x\n"
    assert bs.with_features(conf) == (
        "max-jobs = 4\nexperimental-features = ca-derivations nix-command flakes # mine\nsubstituters = x\n"
    )
    assert bs.with_features(bs.with_features(conf)) == bs.with_features(conf)  # a rerun adds nothing
    assert bs.with_features(None).endswith("experimental-features = nix-command flakes\n")


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


def _sudoers_change(target: Path) -> bs.Change:
    return bs.Change("sudo-path", "sudoers", str(target), None, bs.sudoers_text(), "0440",
                     validate=("visudo", "-c", "-f"))  # fmt: skip


@pytest.mark.parametrize("planted", ["link-to-file", "link-to-missing", "link-to-dir"])
def test_a_link_planted_at_the_old_fixed_temp_name_is_never_followed(tmp_path, planted):
    """Issue 20 item 16: a link at `.sparkfleet-nix.sparkfleet-tmp` got the sudoers text and chmod 0440,
    then itself became /etc/sudoers.d/sparkfleet-nix, while bootstrap reported ✓."""
    if shutil.which("visudo") is None:
        pytest.skip("visudo not found (Debian package sudo)")
    target = tmp_path / "etc/sudoers.d/sparkfleet-nix"
    target.parent.mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_text("the victim's own bytes\n")
    victim.chmod(0o600)
    (tmp_path / "victim-dir").mkdir()
    to = {
        "link-to-file": victim,
        "link-to-missing": tmp_path / "nothing",
        "link-to-dir": tmp_path / "victim-dir",
    }
    old_temp = target.parent / ".sparkfleet-nix.sparkfleet-tmp"
    old_temp.symlink_to(to[planted])
    bs.apply_change(LocalHost("local"), [], _sudoers_change(target))
    assert victim.read_text() == "the victim's own bytes\n" and victim.stat().st_mode & 0o777 == 0o600
    assert not (tmp_path / "nothing").exists() and not list((tmp_path / "victim-dir").iterdir())
    assert not target.is_symlink() and target.read_text() == bs.sudoers_text()
    assert target.stat().st_mode & 0o777 == 0o440
    assert os.readlink(old_temp) == str(to[planted])  # left alone: not ours
    # no temp of ours is left behind
    assert sorted(p.name for p in target.parent.iterdir()) == [old_temp.name, "sparkfleet-nix"]


def test_a_final_path_that_is_a_link_is_refused(tmp_path):
    target = tmp_path / "etc/nix/nix.conf"
    target.parent.mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_text("x = 1\n")
    target.symlink_to(victim)
    change = bs.Change("trusted-users", "conf", str(target), None, "trusted-users = root u\n", "0644")
    with pytest.raises(bs.BootstrapError, match="is a symbolic link"):
        bs.apply_change(LocalHost("local"), [], change)
    assert victim.read_text() == "x = 1\n" and os.readlink(target) == str(victim)
    assert sorted(p.name for p in target.parent.iterdir()) == ["nix.conf"]


def test_a_link_planted_at_the_old_fixed_temp_name_of_a_nix_link_is_not_followed(tmp_path):
    link = tmp_path / "usr/local/bin/nix-store"
    link.parent.mkdir(parents=True)
    (tmp_path / "victim-dir").mkdir()
    old_temp = link.parent / ".nix-store.sparkfleet-tmp"
    old_temp.symlink_to(tmp_path / "victim-dir")
    change = bs.Change(
        "nix-path", "link", str(link), link_target="/nix/var/nix/profiles/default/bin/nix-store"
    )
    bs.apply_change(LocalHost("local"), [], change)
    assert os.readlink(link) == "/nix/var/nix/profiles/default/bin/nix-store"
    assert not list((tmp_path / "victim-dir").iterdir())
    assert sorted(p.name for p in link.parent.iterdir()) == [old_temp.name, "nix-store"]


def test_a_failed_daemon_restart_is_not_reported_done_on_the_rerun(dgx_os_host):
    """Issue 20 item 16: the restart failed, nix.conf already named the user, and a rerun said ✓
    with the daemon never reloaded. The live daemon is its own check now."""
    env = dgx_os_host
    (env["state"] / "fail-restart").touch()
    first = _cli(env, "bootstrap", "dgxos")
    assert first.exit_code != 0 and "nix-daemon.service failed" in first.output, first.output
    assert "root" in bs.trusted_users((env["prefix"] / "etc/nix/nix.conf").read_text())

    dry = _cli(env, "bootstrap", "dgxos", "--dry-run", "--json")
    plan = json.loads(dry.output)
    after = {p["name"]: p for p in plan["after"]}
    assert after["trusted-users"]["ok"] is True  # the file says so ...
    assert after["nix-daemon trusts user"]["ok"] is False  # ... the running daemon does not
    assert "has not read the trusted-users" in after["nix-daemon trusts user"]["detail"]
    # the restart again (the first run stopped at it, before the sudoers drop-in), no conf edit
    assert [c["step"] for c in plan["changes"]] == ["nix-daemon", "sudo-path"]
    deploy = _cli(env, "doctor", "dgxos", "--deploy", "--json")  # a deploy prerequisite
    doctor = {c["name"]: c for c in json.loads(deploy.output)["checks"]}
    assert doctor["nix-daemon trusts user"]["ok"] is False
    assert "sparkfleet bootstrap dgxos" in doctor["nix-daemon trusts user"]["hint"]

    again = _cli(env, "bootstrap", "dgxos", "--json")
    assert again.exit_code == 0, again.output
    done = json.loads(again.output)
    assert [c["step"] for c in done["changes"]] == ["nix-daemon", "sudo-path"]
    assert {p["name"]: p["ok"] for p in done["after"]}["nix-daemon trusts user"] is True
    assert env["calls"].read_text() == "restart nix-daemon.service\n" * 2
    assert json.loads(_cli(env, "bootstrap", "dgxos", "--json").output)["changes"] == []
