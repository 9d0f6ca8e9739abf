"""before_serve: receipt roots removed, root-owned and another user's included; a clear error otherwise."""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from sparkfleet.node.receipts import ReceiptError, clear_receipt_root, clear_receipts

OTHER_UID = 54321
NOBODY = 65534


def as_user(uid: int, fn) -> dict:
    """Run fn in a forked child that dropped to `uid` (no exec: the venv may be unreadable to it)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            try:
                fn()
                out = {"ok": True}
            except ReceiptError as e:
                out = {"ok": False, "message": e.message, "hint": e.hint}
            except BaseException as e:  # a bug, reported to the parent instead of lost in the fork
                out = {"ok": None, "message": repr(e)}
            os.write(w, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as fh:
        data = fh.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def stale_receipts(cache: Path) -> list[str]:
    """The night shift's state: yesterday's receipts, one root-owned, one another user's."""
    att = cache / "ds41-backend-attestation" / "root"
    att.mkdir(parents=True)
    (att / "worker.json").write_text('{"stale": true}')
    os.chmod(att, 0o755)
    ready = cache / "ds41-combined-ready"
    ready.mkdir()
    (ready / "rank0.json").write_text("{}")
    os.chown(ready / "rank0.json", OTHER_UID, OTHER_UID)
    os.chown(ready, OTHER_UID, OTHER_UID)
    return [str(cache / "ds41-backend-attestation"), str(ready), str(cache / "ds41-display-kv")]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create root-owned and other-user receipts")
def test_root_owned_and_other_users_receipts_removed(tmp_path):
    roots = stale_receipts(tmp_path / "cache")
    assert os.stat(roots[0]).st_uid == 0 and os.stat(roots[1]).st_uid == OTHER_UID
    done = clear_receipts(roots)
    assert [(c.existed, c.method) for c in done] == [(True, "removed"), (True, "removed"), (False, "absent")]
    assert done[1].owner in ("uid 54321",) or done[1].owner
    assert not any(os.path.lexists(r) for r in roots)
    # the kit's strict-on-exists writer now succeeds
    (Path(roots[0]) / "root").mkdir(parents=True, exist_ok=False)


def test_symlinked_root_is_unlinked_not_followed(tmp_path):
    target = tmp_path / "precious"
    target.mkdir()
    (target / "keep").write_text("x")
    link = tmp_path / "cache" / "ds41-display-kv"
    link.parent.mkdir()
    link.symlink_to(target)
    clear_receipt_root(link)
    assert not os.path.lexists(link) and (target / "keep").exists()


def test_shallow_or_relative_paths_refused(tmp_path):
    for bad in ("/", "/cache", "relative/path", str(tmp_path) + "/../x"):
        with pytest.raises(ReceiptError, match="refusing to remove"):
            clear_receipt_root(Path(bad))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to another uid")
def test_neither_owner_nor_sudo_gives_clear_error():
    base = Path(tempfile.mkdtemp(prefix="sf-receipts-"))  # pytest's tmp dirs are 0700: nobody cannot enter
    try:
        os.chmod(base, 0o755)
        roots = stale_receipts(base / "cache")
        os.chmod(base / "cache", 0o755)  # root-owned parent: the launcher user cannot unlink in it
        _assert_refused(roots)
    finally:
        shutil.rmtree(base)


def _assert_refused(roots: list[str]) -> None:
    out = as_user(NOBODY, lambda: clear_receipts(roots, sudo=("sudo-missing-here", "-n")))
    assert out["ok"] is False
    assert "ds41-backend-attestation (owner root)" in out["message"]
    assert "sudo -n" in out["message"] and "sudo" in out["hint"]
    assert os.path.exists(roots[0])  # nothing half-removed that the user did not ask for


def _expect_methods(cleanups, methods: list[str]) -> None:
    got = [c.method for c in cleanups]
    if got != methods:
        raise AssertionError(f"cleanup methods {got}, expected {methods}")


def install_helper(directory: Path) -> Path:
    """A root-owned `sparkfleet-clear-receipts` (as the Nix package or `install -o root` puts it)."""
    helper = directory / "sparkfleet-clear-receipts"
    helper.write_text(
        f"#!{sys.executable}\n"
        "from sparkfleet.node.receipts import helper_main\nraise SystemExit(helper_main())\n"
    )
    os.chmod(helper, 0o755)
    return helper


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("sudo") or not shutil.which("useradd"),
    reason="needs root, sudo and useradd (a throwaway launcher user with a NOPASSWD rule for the helper)",
)
@pytest.mark.system
def test_sudo_n_helper_removes_what_the_launcher_user_cannot():
    """The night shift's fix, done right: one exact sudoers rule for a fixed root-owned helper, no prompt."""
    user = f"sf-rcpt-{secrets.token_hex(3)}"
    sudoers = Path("/etc/sudoers.d") / user
    base = Path(tempfile.mkdtemp(prefix="sf-receipts-"))
    try:
        subprocess.run(["useradd", "-M", "-r", "-s", "/usr/sbin/nologin", user], check=True)
        uid = pwd.getpwnam(user).pw_uid
        os.chmod(base, 0o755)
        helper = install_helper(base)
        sudoers.write_text(f"{user} ALL=(root) NOPASSWD: {helper}\n")
        os.chmod(sudoers, 0o440)
        subprocess.run(["visudo", "-cf", str(sudoers)], check=True, capture_output=True)
        cache = base / "cache"
        roots = stale_receipts(cache)
        os.chown(cache, uid, uid)  # the launcher's own cache dir; root-owned leftovers inside it
        sudo = ("sudo", "-n", str(helper))
        out = as_user(
            uid,
            lambda: _expect_methods(
                clear_receipts(roots, sudo=sudo, base=str(cache)), ["sudo", "sudo", "absent"]
            ),
        )
        assert out["ok"] is True, out
        assert not any(os.path.lexists(r) for r in roots)
        # the helper refuses a base the caller does not own: the rule cannot delete system files
        victim = base / "system" / "etc-like" / "passwd"
        victim.parent.mkdir(parents=True)
        victim.write_text("root:x:0:0")
        out = as_user(
            uid,
            lambda: clear_receipts([str(victim.parent)], sudo=sudo, base=str(base / "system")),
        )
        assert out["ok"] is False and victim.exists(), out
        # control: without a working sudo the same layout is refused, untouched
        roots = stale_receipts(base / "cache2")
        os.chmod(base / "cache2", 0o755)
        _assert_refused(roots)
    finally:
        sudoers.unlink(missing_ok=True)
        subprocess.run(["userdel", user], check=False, capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def test_hint_names_a_fixed_helper_never_a_wildcard(tmp_path):
    """Issue 10.2: the old hint recommended `sudo rm` of `parent/*` (`*` matches `..` and spaces)."""
    err = None
    if os.geteuid() == 0:
        base = Path(tempfile.mkdtemp(prefix="sf-receipts-"))
        try:
            os.chmod(base, 0o755)
            roots = stale_receipts(base / "cache")
            os.chmod(base / "cache", 0o755)
            out = as_user(NOBODY, lambda: clear_receipts(roots, sudo=("sudo-missing-here", "-n")))
            err = out["hint"]
        finally:
            shutil.rmtree(base)
    else:
        pytest.skip("needs root to create a receipt the user cannot remove")
    assert "sparkfleet-clear-receipts" in err and "NOPASSWD" in err
    assert "*" not in err and " rm" not in err


def test_link_planted_inside_the_cache_is_never_followed(tmp_path):
    """Issue 10.2: a container planted `/cache/ds41-display-kv -> /usr`-like links in its own bind."""
    cache = tmp_path / "state" / "cache" / "lane"
    cache.mkdir(parents=True)
    precious = tmp_path / "precious"
    (precious / "receipts").mkdir(parents=True)
    (precious / "receipts" / "keep").write_text("x")
    (cache / "ds41-backend-attestation").symlink_to(precious, target_is_directory=True)
    root = cache / "ds41-backend-attestation" / "receipts"
    with pytest.raises(ReceiptError, match="link") as exc:
        clear_receipts([str(root)], base=str(cache))
    assert exc.value.exit_code == 5
    assert (precious / "receipts" / "keep").exists()
    # a root outside the lane's cache dir is refused before anything is looked at
    with pytest.raises(ReceiptError, match="not inside the lane's cache dir"):
        clear_receipts([str(precious / "receipts")], base=str(cache))
    assert (precious / "receipts" / "keep").exists()


def test_a_link_inside_a_receipt_root_is_removed_not_followed(tmp_path):
    cache = tmp_path / "cache"
    (cache / "ds41-combined-ready" / "sub").mkdir(parents=True)
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep").write_text("x")
    (cache / "ds41-combined-ready" / "sub" / "evil").symlink_to(precious, target_is_directory=True)
    done = clear_receipts([str(cache / "ds41-combined-ready")], base=str(cache))
    assert [c.method for c in done] == ["removed"]
    assert not (cache / "ds41-combined-ready").exists() and (precious / "keep").exists()


def test_the_node_refuses_a_cache_dir_outside_its_state_dir(tmp_path):
    """The spec reaches the node as JSON: the code that deletes checks the confinement itself."""
    victim = tmp_path / "usr" / "lib" / "keep"
    victim.parent.mkdir(parents=True)
    victim.write_text("x")
    state = tmp_path / "state"
    for cache in (str(tmp_path / "usr"), str(state), f"{state}/../usr"):
        with pytest.raises(ReceiptError, match="not inside the state dir"):
            clear_receipts([f"{cache}/lib"], base=cache, state_dir=str(state))
    assert victim.exists()
    (state / "cache" / "lane" / "r").mkdir(parents=True)
    done = clear_receipts(
        [str(state / "cache" / "lane" / "r")], base=str(state / "cache" / "lane"), state_dir=str(state)
    )
    assert [c.method for c in done] == ["removed"]
