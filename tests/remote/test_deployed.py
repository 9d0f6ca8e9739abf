"""sparkfleet.remote.deployed: the one error an operator gets when a host lacks what a deploy leaves."""

from __future__ import annotations

from pathlib import Path

from sparkfleet.base.errors import ExitCode
from sparkfleet.remote.deployed import REMOTE_ROOT_ENV, not_deployed, remote_root

PROFILE_BIN = "/nix/var/nix/profiles/sparkfleet/bin/sparkfleet"
SPEC = Path("/nix/store/00000000000000000000000000000000-sparkfleet-fleet-spec")


def test_missing_tooling_as_the_remote_shells_say_it() -> None:
    for line in (
        f"bash: line 1: {PROFILE_BIN}: No such file or directory",
        f"sh: 1: {PROFILE_BIN}: not found",  # dash
        f"zsh:1: command not found: {PROFILE_BIN}",
    ):
        err = not_deployed("dgx1", PROFILE_BIN, ["some banner", line], SPEC)
        assert err is not None, line
        assert err.message == f"dgx1: sparkfleet is not installed there ({PROFILE_BIN}: command not found)"
        assert "deploy .#dgx1" in err.hint and "sparkfleet bootstrap dgx1" in err.hint
        assert err.exit_code == ExitCode.REFUSED


def test_missing_fleet_spec_and_what_is_not_that() -> None:
    err = not_deployed("dgx2", PROFILE_BIN, [f"error: {SPEC}/hosts/fleet.toml: file not found"], SPEC)
    assert err is not None and "was not deployed there" in err.message and "deploy .#dgx2" in err.hint
    # the spec is there but something else is wrong with it: not this error
    other = f"error: {SPEC}/hosts/fleet.toml: pins.x: 'kind' is a required property"
    assert not_deployed("dgx2", PROFILE_BIN, [other], SPEC) is None
    assert not_deployed("dgx2", PROFILE_BIN, ["error: dgx2: local hub is full"], SPEC) is None


def test_remote_root_comes_from_the_app(monkeypatch) -> None:
    monkeypatch.delenv(REMOTE_ROOT_ENV, raising=False)
    assert remote_root(Path("/home/op/fleet")) == Path("/home/op/fleet")
    monkeypatch.setenv(REMOTE_ROOT_ENV, str(SPEC))
    assert remote_root(Path("/home/op/fleet")) == SPEC
