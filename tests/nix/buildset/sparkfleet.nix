# What tests/nix/test_builds.py builds with `nix-build` in Nix's sandbox: each host's deploy
# profile (pkgs/sparkfleet-profile.nix, called as flake.nix calls it: the real modules/lib/units.nix,
# modules/lib/fleet.nix and activate.sh) and the fleet facts (flake.nix's checks.fleet-facts), over
# the build set beside this file; plus two controls that must not pass.
#
# The profile links the CLI, smg and nginx: here they are stand-ins built in the same sandbox (a
# script each), since building them needs nixpkgs' Python and nginx.
{ nixpkgsLib, busyboxDir, fleetRoot, peekPath ? "/nonexistent" }:
let
  lib = import nixpkgsLib;
  busybox = builtins.path { path = busyboxDir; name = "busybox-static"; };
  pkgs = import ./. { inherit lib busybox; };
  fleet = (import ../../../modules/lib/fleet.nix).fromRoot fleetRoot;
  standIn = name: pkgs.runCommand "${name}-stand-in" { meta.mainProgram = name; } ''
    mkdir -p $out/bin
    printf '#!%s\necho "%s stand-in: $*"\n' ${pkgs.runtimeShell} ${name} > $out/bin/${name}
    chmod 0755 $out/bin/${name}
  '';
  sparkfleet = standIn "sparkfleet" // { smg = standIn "smg"; };
  nginx = standIn "nginx";
  callPackage = lib.callPackageWith (pkgs // { inherit sparkfleet nginx fleet fleetRoot; });
in
{
  profiles = lib.genAttrs fleet.hostNames (host: callPackage ../../../pkgs/sparkfleet-profile.nix { inherit host; });
  # flake.nix: checks.<system>.fleet-facts
  fleet-facts = pkgs.writeText "fleet-facts.json" (builtins.toJSON fleet.allFacts);
  # controls: a build whose output differs each time (`nix-build --check` must say so), and one
  # that reads a host file the sandbox must hide
  nondeterministic = pkgs.runCommand "nondeterministic" { } "head -c 16 /dev/urandom > $out";
  peek = pkgs.runCommand "peek" { } "cat ${lib.escapeShellArg peekPath} > $out";
}
