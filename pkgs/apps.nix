# `nix run .#stage -- dgx1` and friends: the pinned CLI with this flake's inventory by default.
{ lib, writeShellApplication, sparkfleet, fleetRoot }:
let
  verb = v: {
    type = "app";
    program = lib.getExe (writeShellApplication {
      name = "sparkfleet-${v}";
      text = ''
        export SPARKFLEET_ROOT="''${SPARKFLEET_ROOT:-${fleetRoot}}"
        exec ${lib.getExe' sparkfleet "sparkfleet"} ${v} "$@"
      '';
    });
  };
in
lib.genAttrs [ "stage" "launch" "bench" "doctor" ] verb // {
  default = {
    type = "app";
    program = lib.getExe' sparkfleet "sparkfleet";
  };
}
