# What every Spark's NixOS configuration shares. hosts/<name>/default.nix only names the host:
# everything sparkfleet places there (NAS mount, hub roots, staging timer, the lanes it heads)
# follows from hosts/fleet.toml. Hardware (boot loader, root filesystem, the Spark's kernel and
# NVIDIA driver) comes from hosts/<name>/hardware-configuration.nix, generated on the machine
# (nixos-generate-config) or taken from graham33/nixos-dgx-spark; CI evaluates with
# modules/eval-only.nix in its place.
host:
{ config, lib, ... }:
let
  hardware = ./. + "/${host}/hardware-configuration.nix";
in
{
  imports = lib.optional (builtins.pathExists hardware) hardware;

  networking.hostName = host;
  sparkfleet = {
    inherit host;
    storage.enable = true;
    staging.enable = true;
    lanes.enable = true;
  };
  # The staging and lane units run as the inventory's ssh_user, in the runtime's group.
  users.users.${config.sparkfleet.facts.sshUser} = {
    isNormalUser = true;
    extraGroups = lib.optional (config.sparkfleet.lanes.runtime == "docker") "docker";
  };
  system.stateVersion = "25.11";
}
