"""`sparkfleet bootstrap HOST`: make a DGX OS host (Ubuntu + multi-user Nix) deployable by deploy-rs.

Each prerequisite below stops `deploy .#dgxN` on a stock host, and each comes from deploy-rs's
and Nix's own behaviour:

* nix-path: `nix copy --to ssh://host` runs `nix-store --serve` in a *non-interactive* ssh
  session, whose PATH never sources /etc/profile.d/nix.sh (NixOS/nix#7508, deploy-rs#290). Fix:
  links in /usr/local/bin (on sshd's default PATH and on sudo's secure_path) to the default
  profile's bin/ — the profile path, not a store path, so a Nix upgrade is followed.
* trusted-users: the deploy user must be trusted by the daemon to import unsigned paths
  (deploy-rs#293). Fix: add it to `trusted-users` in /etc/nix/nix.conf, then restart nix-daemon.
* nix-daemon trusts the user: nix.conf saying so is not enough — the daemon reads it when it
  starts, so a restart that failed leaves a daemon that does not. Checked against the live
  daemon: the user connects to its socket (`nix store ping`, which newer Nix answers with
  `Trusted: 0/1` — then that verdict is taken), and the running daemon must have started after
  nix.conf's last change (its age from /proc against the file's). Fix: restart nix-daemon.
* sudo-path: deploy-rs's activate-rs calls `nix-env` by name under sudo, and Ubuntu's
  secure_path lacks the Nix profile. Fix: /etc/sudoers.d/sparkfleet-nix setting secure_path,
  checked with `visudo -c` before it is moved into place.
* nix-features: stock multi-user Nix has the `nix` command and flakes off, and the node builds
  its own profile (deploy-rs remoteBuild runs `nix build` on it over ssh). Fix: add
  `nix-command flakes` to `experimental-features` in /etc/nix/nix.conf (the client reads it).

Facts → plan → action: `gather` reads the host over ssh (argv lists only, never a pasted
string), `plan` is pure, `apply` makes each change after showing it, writing files temp + sync
+ rename on the host. A rerun finds nothing to do. `root_prefix` puts every host path under a
directory (tests run against network-namespace hosts whose /etc must not be touched).
"""

from __future__ import annotations

import base64
import dataclasses
import difflib
import platform
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ..base.errors import ExitCode, SparkfleetError
from ..remote.hosts import HostRunner, RunResult, check_reachable

PROFILE_BIN = "/nix/var/nix/profiles/default/bin"
LINK_DIR = "/usr/local/bin"
NIX_CONF = "/etc/nix/nix.conf"
DAEMON_SOCKET = "/nix/var/nix/daemon-socket/socket"
DAEMON_UNIT = "nix-daemon.service"
SUDOERS_DROPIN = "/etc/sudoers.d/sparkfleet-nix"  # no "." in the name: sudo skips such files
# Ubuntu's default secure_path with the Nix default profile in front.
UBUNTU_SECURE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/snap/bin"
ROOT_PREFIX_ENV = "SPARKFLEET_HOST_ROOT"  # tests: where the host's / is


class BootstrapError(SparkfleetError):
    """A host could not be read or changed."""


@dataclass(frozen=True)
class HostFacts:
    """What bootstrap and doctor need to know about a host, read over ssh."""

    host: str
    user: str
    prefix: str
    is_root: bool
    sudo_ok: bool
    nix_on_path: bool
    nix_on_path_detail: str
    profile_bins: tuple[str, ...]
    links: dict[str, str]  # name in /usr/local/bin -> link target ("" for a regular file)
    nix_conf: str | None
    sudoers: str | None
    machine: str
    daemon: DaemonFacts | None = None


@dataclass(frozen=True)
class DaemonFacts:
    """The live nix-daemon as the user sees it through its socket, and how old it is."""

    answered: bool  # `nix store ping` through the daemon's socket succeeded
    detail: str  # its last output line, or why it failed
    trusted: bool | None  # the daemon's own verdict, where the Nix version reports one
    age_s: float | None  # how long the running daemon has run (None: none running, or unknown)
    conf_age_s: float | None  # how long ago nix.conf last changed


@dataclass(frozen=True)
class Change:
    """One change to a host, shown before it is made."""

    step: str  # nix-path | trusted-users | nix-features | nix-daemon | sudo-path
    summary: str
    path: str | None = None
    before: str | None = None
    after: str | None = None
    mode: str | None = None
    link_target: str | None = None
    command: tuple[str, ...] = ()
    validate: tuple[str, ...] = ()

    def diff(self) -> str:
        """The change as a unified diff, secrets (nix.conf access-tokens, ...) redacted."""
        if self.after is None:
            return ""
        return "".join(
            difflib.unified_diff(
                redact(self.before or "").splitlines(keepends=True),
                redact(self.after).splitlines(keepends=True),
                fromfile=f"{self.path} (now)" if self.before is not None else "/dev/null",
                tofile=f"{self.path} (after)",
            )
        )

    def shown(self) -> dict[str, object]:
        """What a report may carry: the real file contents never leave the host unredacted."""
        out = dataclasses.asdict(self)
        out["before"] = None if self.before is None else redact(self.before)
        out["after"] = None if self.after is None else redact(self.after)
        return out


_SECRET_KEY = re.compile(r"token|secret|password|passwd|credential|netrc", re.IGNORECASE)


def redact(text: str) -> str:
    """`key = value` lines whose key looks secret keep their key and lose their value."""
    out = []
    for line in text.splitlines(keepends=True):
        key, eq, _ = line.partition("=")
        if eq and _SECRET_KEY.search(key) and not key.lstrip().startswith("#"):
            line = f"{key}= <redacted>" + ("\n" if line.endswith("\n") else "")
        out.append(line)
    return "".join(out)


@dataclass(frozen=True)
class Prereq:
    """One prerequisite's state: ok, what was found, and the fix."""

    name: str
    ok: bool | None
    detail: str
    fix: str | None = None


@dataclass
class BootstrapReport:
    host: str
    dry_run: bool
    changes: list[Change] = field(default_factory=list)
    applied: list[str] = field(default_factory=list)
    after: list[Prereq] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(p.ok is not False for p in self.after)


def host_path(prefix: str, path: str) -> str:
    return posixpath.join(prefix, path.lstrip("/")) if prefix else path


def _run(runner: HostRunner, argv: list[str], input: str | None = None) -> RunResult:
    return check_reachable(runner.run(argv, input=input, timeout=120))


# One ssh round trip for every fact (each costs a login shell on the host). The script is a
# constant; paths arrive as positional arguments, quoted by SshHost, never pasted into it.
_GATHER = r"""
section() { printf '\n@@sparkfleet %s\n' "$1"; }
section uid; id -u
section sudo
if [ "$(id -u)" = 0 ]; then echo root; elif sudo -n true 2>/dev/null; then echo yes; else echo no; fi
section nix-store; nix-store --version 2>&1; echo "exit=$?"
section profile; ls -1 "$1" 2>/dev/null
section links; find "$2" -mindepth 1 -maxdepth 1 -printf '%f\t%l\n' 2>/dev/null
section conf; if [ -r "$3" ]; then base64 -w0 < "$3"; echo; echo present; fi
section sudoers
if [ "$(id -u)" = 0 ]; then s=""; else s="sudo -n"; fi
if $s test -e "$4"; then $s base64 -w0 "$4"; echo; echo present; fi
section machine; uname -m
section ping
if [ -x "$1/nix" ]; then
  "$1/nix" --extra-experimental-features nix-command store ping --store "unix://$5" 2>&1; echo "exit=$?"
else echo "no $1/nix"; echo "exit=127"; fi
section daemon
pid=$($s systemctl show -p MainPID --value nix-daemon.service 2>/dev/null)
if [ -n "$pid" ] && [ "$pid" != 0 ] && [ -r "/proc/$pid/stat" ]; then
  echo "uptime=$(cut -d' ' -f1 /proc/uptime)"
  echo "start=$(sed 's/.*) //' "/proc/$pid/stat" | cut -d' ' -f20)"
  echo "ticks=$(getconf CLK_TCK)"
fi
if [ -e "$3" ]; then echo "now=$(date +%s.%N)"; echo "conf=$(date -r "$3" +%s.%N)"; fi
"""


def _sections(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("@@sparkfleet "):
            current = line.split(" ", 1)[1]
            out[current] = []
        elif current is not None and line:
            out[current].append(line)
    return out


def _file(lines: list[str]) -> str | None:
    """A file's bytes from the gather's base64 section (None: not there)."""
    if not lines or lines[-1] != "present":
        return None
    return base64.b64decode(lines[0]).decode() if len(lines) > 1 else ""


def gather(runner: HostRunner, user: str, prefix: str = "") -> HostFacts:
    """Read every fact the plan needs (one ssh command; nothing is changed)."""
    paths = [host_path(prefix, p) for p in (PROFILE_BIN, LINK_DIR, NIX_CONF, SUDOERS_DROPIN, DAEMON_SOCKET)]
    res = _run(runner, ["sh", "-c", _GATHER, "sh", *paths])
    s = _sections(res.stdout)
    if "machine" not in s:
        raise BootstrapError(f"{runner.name}: could not read the host: {res.stderr.strip()[-300:]}")
    serve = s.get("nix-store", [])
    nix_ok = bool(serve) and serve[-1] == "exit=0"
    links = {}
    for line in s.get("links", []):
        name, _, target = line.partition("\t")
        links[name] = target
    sudo = (s.get("sudo") or ["no"])[0]
    return HostFacts(
        host=runner.name,
        user=user,
        prefix=prefix,
        is_root=sudo == "root",
        sudo_ok=sudo in ("root", "yes"),
        nix_on_path=nix_ok,
        nix_on_path_detail=(serve[0] if nix_ok else (serve[:-1] or ["not found"])[-1])
        if serve
        else "not found",
        profile_bins=tuple(sorted(s.get("profile", []))),
        links=links,
        nix_conf=_file(s.get("conf", [])),
        sudoers=_file(s.get("sudoers", [])),
        machine=(s.get("machine") or ["unknown"])[0],
        daemon=_daemon_facts(s.get("ping", []), s.get("daemon", [])),
    )


def _daemon_facts(ping: list[str], daemon: list[str]) -> DaemonFacts:
    answered = bool(ping) and ping[-1] == "exit=0"
    lines = [line for line in ping[:-1] if line.strip()]
    trusted = None
    for line in lines:  # Nix >= 2.15: "Trusted: 1"
        key, _, value = line.partition(":")
        if key.strip().lower() == "trusted" and value.strip() in ("0", "1"):
            trusted = value.strip() == "1"
    kv = dict(line.partition("=")[::2] for line in daemon)
    try:
        age = float(kv["uptime"]) - int(kv["start"]) / int(kv["ticks"])
    except (KeyError, ValueError, ZeroDivisionError):
        age = None
    try:
        conf_age = float(kv["now"]) - float(kv["conf"])
    except (KeyError, ValueError):
        conf_age = None
    return DaemonFacts(answered, (lines or ["no answer"])[-1][-200:], trusted, age, conf_age)


def daemon_trusts(f: HostFacts) -> tuple[bool, str]:
    """Whether the running nix-daemon trusts the user — the daemon, not just its config file."""
    d = f.daemon
    if d is None or not d.answered:
        return False, f"nix-daemon did not answer {f.user} on its socket: {d.detail if d else 'not asked'}"
    if d.trusted is not None:
        return d.trusted, f"nix-daemon says {f.user} is {'' if d.trusted else 'NOT '}trusted"
    if not is_trusted(f.user, f.nix_conf):
        return False, f"nix-daemon runs with a {NIX_CONF} that does not trust {f.user}"
    if d.age_s is not None and d.conf_age_s is not None and d.age_s > d.conf_age_s:
        return False, (
            f"nix-daemon has run {d.age_s:.0f} s, but {NIX_CONF} changed {d.conf_age_s:.0f} s ago: "
            "it has not read the trusted-users that name " + f.user
        )
    if d.age_s is None:
        return True, f"no nix-daemon running; the next connection starts one that reads {NIX_CONF}"
    return True, f"nix-daemon answers, started after {NIX_CONF} last changed"


# ---- pure: what is missing and what would fix it -----------------------------------------------


def setting_words(conf: str | None, key: str, default: tuple[str, ...] = ()) -> list[str]:
    """A list setting's effective words in a nix.conf: the last `key = ...` line wins (else
    `default`, Nix's own), and every `extra-key = ...` line adds."""
    base, extra = list(default), []
    for raw in (conf or "").splitlines():
        name, eq, value = raw.split("#", 1)[0].partition("=")
        if eq and name.strip() == key:
            base = value.split()
        elif eq and name.strip() == f"extra-{key}":
            extra += value.split()
    return base + extra


def with_words(conf: str | None, key: str, words: list[str], new_line: list[str], why: str) -> str:
    """nix.conf with `words` added to its last `key` line (its comment kept), or, without one, a
    `key = new_line` line after the comment `why`; nothing else moves."""
    text = conf or ""
    lines = text.splitlines(keepends=True)
    for i in range(len(lines) - 1, -1, -1):
        name, eq, value = lines[i].split("#", 1)[0].partition("=")
        if eq and name.strip() == key:
            comment = lines[i][len(lines[i].split("#", 1)[0]) :].rstrip("\n")
            tail = f" {comment}" if comment else ""
            lines[i] = f"{key} = {' '.join([*value.split(), *words])}{tail}\n"
            return "".join(lines)
    if text and not text.endswith("\n"):
        text += "\n"
    return text + f"# {why}; added by sparkfleet bootstrap\n{key} = {' '.join(new_line)}\n"


def trusted_users(conf: str | None) -> list[str]:
    """The effective trusted-users of a nix.conf (Nix's default: root)."""
    return setting_words(conf, "trusted-users", ("root",))


def is_trusted(user: str, conf: str | None) -> bool:
    users = trusted_users(conf)
    return user in users or "*" in users


def with_trusted_user(conf: str | None, user: str) -> str:
    """nix.conf with `user` added to its last trusted-users line (or a new line); nothing else moves."""
    why = f"deploy-rs copies unsigned paths as {user} (deploy-rs#293)"
    return with_words(conf, "trusted-users", [user], ["root", user], why)


NIX_FEATURES = ("nix-command", "flakes")


def experimental_features(conf: str | None) -> list[str]:
    """The effective experimental-features of a nix.conf."""
    return setting_words(conf, "experimental-features")


def with_features(conf: str | None, features: tuple[str, ...] = NIX_FEATURES) -> str:
    """nix.conf with `features` added to its last experimental-features line (or a new line)."""
    missing = [f for f in features if f not in experimental_features(conf)]
    if not missing:
        return conf or ""
    why = "deploy-rs builds profiles here with `nix build` (remoteBuild)"
    return with_words(conf, "experimental-features", missing, missing, why)


def sudoers_text(prefix: str = "") -> str:
    return (
        "# Written by `sparkfleet bootstrap`: deploy-rs's activate-rs runs `nix-env` by name under sudo,\n"
        "# and Ubuntu's secure_path does not include the Nix default profile.\n"
        f'Defaults secure_path="{host_path(prefix, PROFILE_BIN)}:{UBUNTU_SECURE_PATH}"\n'
    )


def prereqs(f: HostFacts) -> list[Prereq]:
    """Every prerequisite with what was found and the fix (doctor prints these)."""
    fix = f"sparkfleet bootstrap {f.host}"
    trusted = is_trusted(f.user, f.nix_conf)
    live_ok, live_detail = daemon_trusts(f)
    features = experimental_features(f.nix_conf)
    features_ok = all(x in features for x in NIX_FEATURES)
    sudo_path = f.sudoers == sudoers_text(f.prefix)
    if sudo_path:
        sudo_detail = "sets secure_path with the Nix profile"
    else:
        sudo_detail = "missing or different" if f.sudo_ok else "unreadable (no sudo -n)"
    out = [
        Prereq(
            "nix on ssh PATH",
            f.nix_on_path,
            f"non-interactive ssh: nix-store: {f.nix_on_path_detail}",
            None if f.nix_on_path else f"{fix} (links {LINK_DIR}/nix* to {PROFILE_BIN})",
        ),
        Prereq(
            "trusted-users",
            trusted,
            f"{f.user} {'is' if trusted else 'is NOT'} in trusted-users "
            f"({' '.join(trusted_users(f.nix_conf))}) of {NIX_CONF}",
            None if trusted else f"{fix} (adds {f.user}, restarts nix-daemon)",
        ),
        Prereq(
            "nix-daemon trusts user",
            live_ok,
            live_detail,
            None if live_ok else f"{fix} (restarts nix-daemon)",
        ),
        Prereq(
            "nix flakes",
            features_ok,
            f"experimental-features of {NIX_CONF}: {' '.join(features) or '(none)'}",
            None if features_ok else f"{fix} (adds {' '.join(NIX_FEATURES)})",
        ),
        Prereq(
            "sudo secure_path",
            sudo_path,
            f"{SUDOERS_DROPIN} {sudo_detail}",
            None if sudo_path else f"{fix} (writes it, checked by visudo -c)",
        ),
    ]
    here = platform.machine()
    if f.machine != "unknown" and here != f.machine:
        out.append(
            Prereq(
                "build platform",
                None,
                f"operator {here}, host {f.machine}: the profile is built on the host "
                "(deploy-rs remoteBuild = true) unless this machine has a builder for it",
            )
        )
    return out


def plan(f: HostFacts) -> list[Change]:
    """The changes that make every prerequisite hold (empty when they already do)."""
    changes: list[Change] = []
    profile, link_dir = host_path(f.prefix, PROFILE_BIN), host_path(f.prefix, LINK_DIR)
    if not f.nix_on_path:
        if not f.profile_bins:
            raise BootstrapError(
                f"{f.host}: no Nix in {profile}",
                hint="install multi-user Nix first (https://nixos.org/download, daemon install)",
            )
        for name in f.profile_bins:
            target = posixpath.join(profile, name)
            if f.links.get(name) == target:
                continue
            if name in f.links and f.links[name] == "":
                raise BootstrapError(
                    f"{f.host}: {link_dir}/{name} is a regular file, not ours to replace",
                    hint=f"move it away, or put {profile} on the ssh PATH yourself",
                )
            link = posixpath.join(link_dir, name)
            changes.append(Change("nix-path", f"link {link} -> {target}", path=link, link_target=target))
    restart = Change(
        "nix-daemon", "restart nix-daemon so it reads the new trusted-users",
        command=("systemctl", "restart", DAEMON_UNIT),
    )  # fmt: skip
    conf_path = host_path(f.prefix, NIX_CONF)
    conf = f.nix_conf
    if not is_trusted(f.user, f.nix_conf):
        conf = with_trusted_user(f.nix_conf, f.user)
        summary = f"add {f.user} to trusted-users in {conf_path}"
        changes.append(Change("trusted-users", summary, conf_path, f.nix_conf, conf, "0644"))
    if with_features(conf) != (conf or ""):
        summary = f"enable {' '.join(NIX_FEATURES)} in experimental-features of {conf_path}"
        changes.append(Change("nix-features", summary, conf_path, conf, with_features(conf), "0644"))
    if not is_trusted(f.user, f.nix_conf):
        changes.append(restart)
    elif not daemon_trusts(f)[0]:
        # nix.conf already says so (a bootstrap that stopped before the restart wrote it) but the live
        # daemon does not
        why = daemon_trusts(f)[1]
        changes.append(dataclasses.replace(restart, summary=f"restart nix-daemon: {why}"))
    want = sudoers_text(f.prefix)
    if f.sudoers != want:
        path = host_path(f.prefix, SUDOERS_DROPIN)
        summary = f"sudo secure_path with {profile} in {path}"
        check = ("visudo", "-c", "-f")
        changes.append(Change("sudo-path", summary, path, f.sudoers, want, "0440", validate=check))
    return changes


# ---- action ---------------------------------------------------------------------------------------


# Constant scripts (arguments positional). The temp beside the target gets a unique name made
# by mktemp (open O_CREAT|O_EXCL: a link planted under any name is never followed, and a fixed
# name cannot be planted in advance), is written through dd's O_NOFOLLOW, validated, synced and
# renamed over the final name — which is refused if it is itself a link (a rename would replace
# the link, but a planted link there means somebody else is at work: say so, change nothing).
# Temp names start with "." and carry TEMP_TAG: sudo skips them in sudoers.d.
TEMP_TAG = ".sparkfleet-tmp."
_WRITE = r"""
set -e
final=$1; mode=$2; shift 2
dir=$(dirname "$final")
mkdir -p "$dir"
if [ -L "$final" ]; then echo "refusing: $final is a symbolic link, not a file of ours" >&2; exit 3; fi
tmp=$(mktemp "$dir/.$(basename "$final").sparkfleet-tmp.XXXXXXXXXX")
trap 'rm -f "$tmp"' EXIT
dd of="$tmp" oflag=nofollow conv=notrunc status=none
chmod "$mode" "$tmp"
if [ $# -gt 0 ]; then "$@" "$tmp" 1>&2; fi
sync "$tmp"
mv -fT "$tmp" "$final"
trap - EXIT
sync "$dir"
"""
_LINK = r"""
set -e
final=$1; target=$2
dir=$(dirname "$final")
mkdir -p "$dir"
tmp=$(mktemp -u "$dir/.$(basename "$final").sparkfleet-tmp.XXXXXXXXXX")
ln -sn "$target" "$tmp"
mv -fT "$tmp" "$final"
"""


def _must(runner: HostRunner, argv: list[str], what: str, input: str | None = None) -> None:
    res = _run(runner, argv, input=input)
    if not res.ok:
        err = " / ".join(res.stderr.strip().splitlines()[-2:]) or f"exit {res.returncode}"
        raise BootstrapError(f"{runner.name}: {what} failed: {err}")


def apply_change(runner: HostRunner, sudo: list[str], change: Change) -> None:
    """Make one change with one ssh command."""
    if change.link_target is not None:
        assert change.path is not None
        argv = [*sudo, "sh", "-c", _LINK, "sh", change.path, change.link_target]
        _must(runner, argv, f"link {change.path}")
    elif change.after is not None:
        assert change.path is not None
        name = posixpath.basename(change.path)
        what = f"{change.validate[0]} check of the new {name}" if change.validate else f"write {change.path}"
        argv = [*sudo, "sh", "-c", _WRITE, "sh", change.path, change.mode or "0644", *change.validate]
        _must(runner, argv, what, input=change.after)
    elif change.command:
        _must(runner, [*sudo, *change.command], change.summary)


# Where each engine looks for a registry's CA (docker: certs.d per host:port, no daemon restart;
# podman/skopeo: /etc/containers/certs.d, containers-certs.d(5)).
CA_DIRS = ("/etc/docker/certs.d", "/etc/containers/certs.d")


def trust_changes(runner: HostRunner, registry: str, ca_pem: str, prefix: str = "") -> list[Change]:
    """Install the fleet CA for `registry` (host:port) where docker and podman look for it."""
    out = []
    for base in CA_DIRS:
        path = host_path(prefix, f"{base}/{registry}/ca.crt")
        res = _run(runner, ["sh", "-c", 'cat "$1" 2>/dev/null || true', "sh", path])
        before = res.stdout or None
        if before != ca_pem:
            out.append(Change("fleet-ca", f"trust the fleet CA for {registry} in {base}", path=path,
                              before=before, after=ca_pem, mode="0644"))  # fmt: skip
    return out


def bootstrap(
    runner: HostRunner,
    user: str,
    *,
    prefix: str = "",
    dry_run: bool = False,
    on_change: Callable[[Change], None] = lambda _c: None,
    extra: list[Change] | None = None,
) -> BootstrapReport:
    """Plan, show and make each change, then read the host again and report every prerequisite.

    `extra`: changes the caller planned beside the host's own (the fleet CA: `trust_changes`)."""
    facts = gather(runner, user, prefix)
    changes = plan(facts) + list(extra or [])
    report = BootstrapReport(runner.name, dry_run, changes)
    if changes and not dry_run and not facts.sudo_ok:
        raise BootstrapError(
            f"{runner.name}: {len(changes)} change(s) need root, and `sudo -n` does not work for {user}",
            hint="allow passwordless sudo for the deploy user, or run the "
            "'Preparing a DGX OS host' steps of docs/nix.md by hand",
            exit_code=ExitCode.REFUSED,
        )
    sudo = [] if facts.is_root else ["sudo", "-n"]
    for change in changes:
        on_change(change)
        if dry_run:
            continue
        apply_change(runner, sudo, change)
        report.applied.append(change.summary)
    report.after = prereqs(gather(runner, user, prefix) if report.applied else facts)
    return report
