# An example Spark under NixOS, evaluated end to end in CI (checks.<system>.eval-nixos-spark forces
# its system.build.toplevel.drvPath with the real nixpkgs, nixos-dgx-spark and srvos inputs).
# It is no host of the fleet: its inventory is ./fleet (one host, os = "nixos", no recipes, so it
# heads and joins no lane and has no deploy node); hosts/fleet.toml does not name it. A real NixOS
# Spark is a [hosts.NAME] with os = "nixos" in hosts/fleet.toml and a hosts/NAME/ like
# ../dgx1 (common.nix), with its own hardware-configuration.nix and hosts/authorized_keys.
{ lib, ... }:
{
  imports = [ (import ../common.nix "nixos-spark") ];
  sparkfleet.fleetRoot = lib.mkForce ./fleet;
  # An example nobody logs into: the repository holds no operators' keys (hosts/authorized_keys
  # is the fleet's). A real host leaves this false, so NixOS refuses a host nobody can reach.
  users.allowNoPasswordLogin = true;
}
