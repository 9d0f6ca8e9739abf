"""The inventory paths that become systemd-tmpfiles rules, handed to the real systemd-tmpfiles.

NixOS writes `systemd.tmpfiles.settings` as one quoted line per entry and systemd-tmpfiles runs
it as root at boot. A path that tmpfiles splits or expands becomes another rule: a local_hub of
`/etc 0777 kilork users -` (a rule string split on spaces) made `/etc` the user's with mode 0777,
and `/%h` (a specifier) makes root's home the user's. The inventory schema (tmpfilesPath, read by
Python and Nix) refuses such a path naming its key; the module builds the rules from fields.
The rules the modules emit are applied here with `systemd-tmpfiles --create --root` to a scratch
root whose /etc/passwd knows the user.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sparkfleet.fleet import inventory

from .conftest import REPO, NixEvalError, requires_nix, requires_nixpkgs_lib
from .test_modules import evaluate

pytestmark = [pytest.mark.nix, requires_nix, requires_nixpkgs_lib]

requires_tmpfiles = pytest.mark.skipif(
    shutil.which("systemd-tmpfiles") is None or os.geteuid() != 0,
    reason="needs systemd-tmpfiles, run as root (it chowns)",
)
UID, GID = 4242, 100  # kilork, users: in the scratch root only


def fleet(tmp_path: Path, local_hub: str | None = None) -> Path:
    root = tmp_path / "fleet"
    shutil.copytree(REPO / "hosts", root / "hosts", ignore=shutil.ignore_patterns("dgx*"))
    shutil.copytree(REPO / "recipes", root / "recipes", ignore=shutil.ignore_patterns("reports"))
    path = root / "hosts" / "fleet.toml"
    text = path.read_text().replace("[defaults]\n", '[defaults]\nnas_export = "nas.lan:/hub"\n', 1)
    if local_hub is not None:
        lines = text.split("\n")
        text = "\n".join(
            f"local_hub = {json.dumps(local_hub)}" if ln.startswith("local_hub =") else ln for ln in lines
        )
    path.write_text(text)
    return root


def scratch_root(tmp_path: Path) -> Path:
    """A root with kilork (group users) in its passwd, /etc at 0755 and root's home at 0700."""
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "root").mkdir(mode=0o700)
    (root / "etc" / "passwd").write_text(
        f"root:x:0:0::/root:/bin/sh\nkilork:x:{UID}:{GID}::/home/kilork:/bin/sh\n"
    )
    (root / "etc" / "group").write_text(f"root:x:0:\nusers:x:{GID}:\n")
    return root


def apply(lines: list[str], root: Path) -> subprocess.CompletedProcess[str]:
    conf = root.parent / "10-sparkfleet.conf"
    conf.write_text("".join(f"{line}\n" for line in lines))
    return subprocess.run(
        ["systemd-tmpfiles", "--create", f"--root={root}", str(conf)],
        capture_output=True,
        text=True,
        check=False,
    )


def owner_mode(path: Path) -> tuple[int, int, str]:
    st = path.stat()
    return st.st_uid, st.st_gid, oct(st.st_mode & 0o7777)


@requires_tmpfiles
def test_the_modules_rules_create_the_hub_roots_and_nothing_else(tmp_path: Path) -> None:
    cfg = evaluate(fleet(tmp_path), "dgx1", host_module=str(REPO / "hosts" / "dgx1"))
    assert cfg["tmpfiles"], "no tmpfiles rules"
    root = scratch_root(tmp_path)
    proc = apply(cfg["tmpfiles"], root)
    assert proc.returncode == 0, proc.stderr
    facts = inventory.load(tmp_path / "fleet")
    hub = root / str(facts.host("dgx1").local_hub).lstrip("/")
    assert owner_mode(hub) == (UID, GID, "0o755")
    assert owner_mode(root / "etc") == (0, 0, "0o755") and owner_mode(root / "root") == (0, 0, "0o700")


@requires_tmpfiles
@pytest.mark.parametrize(
    ("local_hub", "victim"),
    [("/etc 0777 kilork users -", "etc"), ("/%h", "root")],
    ids=["spaces-make-a-rule", "specifier-expands-to-roots-home"],
)
def test_a_hostile_local_hub_never_becomes_a_rule(tmp_path: Path, local_hub: str, victim: str) -> None:
    """The module refuses the path naming its key; had it emitted rules, the failure shows what
    systemd-tmpfiles made of them."""
    try:
        cfg = evaluate(fleet(tmp_path, local_hub), "dgx1", host_module=str(REPO / "hosts" / "dgx1"))
    except NixEvalError as exc:
        assert "hosts/fleet.toml: defaults.local_hub" in str(exc), str(exc)[-2000:]
        assert "is no path systemd-tmpfiles can read as one" in str(exc)
    else:
        root = scratch_root(tmp_path)
        before = owner_mode(root / victim)
        apply(cfg["tmpfiles"], root)
        pytest.fail(
            f"local_hub {local_hub!r} became the rules {cfg['tmpfiles']}; systemd-tmpfiles made "
            f"/{victim} (uid, gid, mode) {before} -> {owner_mode(root / victim)}"
        )
    # and `inventory check` refuses it too, naming the key
    problems = [str(p) for p in inventory.check(tmp_path / "fleet").problems]
    assert any("defaults.local_hub" in p for p in problems), problems


def test_a_hostile_receipt_root_is_refused_naming_its_recipe_key(tmp_path: Path) -> None:
    root = fleet(tmp_path)
    recipe = next(
        p for p in sorted((root / "recipes").glob("*/recipe.toml")) if "receipt_roots" in p.read_text()
    )
    text = recipe.read_text()
    start = text.index("receipt_roots")
    end = text.index("]", start)
    recipe.write_text(text[:start] + 'receipt_roots = ["/cache/a b/receipts"' + text[end:])
    with pytest.raises(
        NixEvalError, match=rf"recipes/{recipe.parent.name}/recipe.toml: launch.receipt_roots\[0\]"
    ):
        evaluate(root, "dgx1", host_module=str(REPO / "hosts" / "dgx1"))
    problems = [str(p) for p in inventory.check(root).problems]
    assert any("launch.receipt_roots[0]" in p for p in problems), problems
