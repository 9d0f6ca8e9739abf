"""sparkfleet's own derivations built for real, in Nix 2.26's sandbox, and rebuilt bit for bit.

Each host's deploy profile (pkgs/sparkfleet-profile.nix with the real modules/lib and activate.sh)
and the fleet facts (flake.nix's checks.fleet-facts) are built by `nix-build` with `sandbox = true`
over tests/nix/buildset (nixpkgs' real lib, the trivial builders on builtins.derivation, a static
busybox in the store as the shell), then rebuilt with `nix-build --check`, which fails when a
rebuild differs by one bit. Two controls show the check and the sandbox can fail: a build that
writes random bytes is caught (exit 104), and a build that reads a host file cannot see it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from sparkfleet.cli.render import to_jsonable
from sparkfleet.fleet import hostfacts, inventory

from .conftest import REPO, nixpkgs_lib, requires_nixpkgs_lib
from .realnix import CHROOT, RealNix

pytestmark = [pytest.mark.nix, requires_nixpkgs_lib, pytest.mark.xdist_group("builds")]

ENTRY = Path(__file__).parent / "buildset" / "sparkfleet.nix"


class Builds:
    """nix-build of tests/nix/buildset/sparkfleet.nix over a fleet copy, in the chroot."""

    def __init__(self, nix: RealNix, base: Path) -> None:
        self.nix, self.base = nix, base
        self.fleet = base / "fleet"
        self.busybox = base / "busybox"

    def build(self, attr: str, *extra: str) -> tuple[int, list[str], str]:
        argv = ["nix-build", str(ENTRY), "-A", attr, "--no-out-link", *extra]
        argv += ["--arg", "nixpkgsLib", str(nixpkgs_lib()), "--arg", "busyboxDir", str(self.busybox)]
        argv += ["--arg", "fleetRoot", str(self.fleet)]
        proc = self.nix.run(argv, binds=(REPO, self.base, nixpkgs_lib()), timeout=600)
        return proc.returncode, proc.stdout.split(), proc.stderr

    def host_path(self, store_path: str) -> Path:
        """A path of the chroot's /nix/store as this machine sees it (the session's store folder)."""
        assert store_path.startswith("/nix/store/"), store_path
        return self.nix.store / store_path.removeprefix("/nix/")


@pytest.fixture(scope="module")
def builds(real_nix: RealNix, tmp_path_factory: pytest.TempPathFactory) -> Builds:
    b = Builds(real_nix, tmp_path_factory.mktemp("builds"))
    shutil.copytree(REPO / "hosts", b.fleet / "hosts", ignore=shutil.ignore_patterns("dgx*"))
    shutil.copytree(REPO / "recipes", b.fleet / "recipes", ignore=shutil.ignore_patterns("reports"))
    # dgx1 runs the gateway in front of the TP4 lane: its profile links smg and nginx too
    toml = b.fleet / "hosts" / "fleet.toml"
    toml.write_text(toml.read_text().replace("[hosts.dgx1]\n", '[hosts.dgx1]\nservices = ["gateway"]\n', 1))
    recipe = b.fleet / "recipes" / "dsv41-flash-4x-mia" / "recipe.toml"
    recipe.write_text(recipe.read_text().replace("[[models]]", "[gateway]\n\n[[models]]", 1))
    # Debian's static busybox from the chroot, with sh as the applet name the builder runs by
    (b.busybox / "bin").mkdir(parents=True)
    shutil.copy(CHROOT / "bin" / "busybox", b.busybox / "bin" / "busybox")
    os.symlink("busybox", b.busybox / "bin" / "sh")
    return b


def test_profiles_and_fleet_facts_build_sandboxed_and_rebuild_bit_for_bit(builds: Builds) -> None:
    rc, profiles, err = builds.build("profiles")
    assert rc == 0, err[-3000:]
    inv = inventory.load(builds.fleet)
    assert sorted(Path(p).name.split("-", 1)[1] for p in profiles) == [
        f"sparkfleet-profile-{h}" for h in sorted(inv.hosts)
    ]
    activate = (REPO / "pkgs" / "sparkfleet-profile" / "activate.sh").read_bytes()
    for path in profiles:
        host = path.rsplit("-", 1)[1]
        out = builds.host_path(path)
        assert os.readlink(out / "bin" / "sparkfleet").endswith("-sparkfleet-stand-in/bin/sparkfleet")
        # activate.sh as it is (its bash is not in the build set, so patchShebangs leaves it)
        assert (out / "bin" / "sparkfleet-activate").read_bytes() == activate
        assert os.access(out / "bin" / "sparkfleet-activate", os.X_OK)
        units = sorted(p.name for p in (out / "share" / "sparkfleet" / "units").iterdir())
        assert "sparkfleet-stage.service" in units and "sparkfleet-stage.timer" in units
        facts = hostfacts.facts(inv, host)
        assert {f"{lane.unit}.service" for lane in facts.lanes} <= set(units)
        gateway = any(s.service == "gateway" for s in facts.services)
        assert (out / "bin" / "smg").is_symlink() == gateway and (
            out / "bin" / "nginx"
        ).is_symlink() == gateway
        # the spec roots: content-addressed store copies of the fleet file (and the lanes' recipes)
        spec = builds.host_path(os.readlink(out / "share" / "sparkfleet" / "fleet-root"))
        assert (spec / "hosts" / "fleet.toml").read_bytes() == (
            builds.fleet / "hosts" / "fleet.toml"
        ).read_bytes()

    rc, (facts_path,), err = builds.build("fleet-facts")
    assert rc == 0, err[-3000:]
    built = json.loads(builds.host_path(facts_path).read_text())
    assert built == {name: to_jsonable(hostfacts.facts(inv, name)) for name in inv.hosts}

    for attr in ("profiles", "fleet-facts"):
        rc, again, err = builds.build(attr, "--check")
        assert rc == 0, f"{attr} did not rebuild bit for bit:\n{err[-3000:]}"
        assert "checking outputs of" in err


def test_a_nondeterministic_build_is_caught(builds: Builds) -> None:
    rc, _, err = builds.build("nondeterministic")
    assert rc == 0, err[-2000:]
    rc, _, err = builds.build("nondeterministic", "--check")
    assert rc == 104, err[-2000:]
    assert "may not be deterministic" in err


def test_the_builds_are_sandboxed(builds: Builds) -> None:
    """A build cannot read this machine's files; the same build without the sandbox can."""
    secret = builds.base / "host-file"
    secret.write_text("visible outside the sandbox only\n")
    peek = ("--argstr", "peekPath", str(secret))
    rc, _, err = builds.build("peek", *peek)
    assert rc != 0 and "No such file or directory" in err, err[-2000:]
    rc, (out,), err = builds.build("peek", *peek, "--option", "sandbox", "false")
    assert rc == 0, err[-2000:]
    assert builds.host_path(out).read_text() == secret.read_text()
