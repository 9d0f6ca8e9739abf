# dgx4 of hosts/fleet.toml. Everything sparkfleet places here (NAS mount, hub roots, staging
# timer, the lanes it heads) follows from the inventory; this file only says which host it is.
# Hardware (boot loader, root filesystem, the Spark's kernel and NVIDIA driver) comes from
# ./hardware-configuration.nix, generated on the machine (nixos-generate-config) or taken from
# graham33/nixos-dgx-spark; CI evaluates with modules/eval-only.nix in its place.
{ config, lib, ... }:
{
  imports = lib.optional (builtins.pathExists ./hardware-configuration.nix) ./hardware-configuration.nix;

  networking.hostName = "dgx4";
  sparkfleet = {
    host = "dgx4";
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
