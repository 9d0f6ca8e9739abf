# For evaluation in CI only (checks.<system>.eval-<host>): what a real host gets from its
# hardware-configuration.nix (root filesystem, boot loader, the Spark's NVIDIA driver) is stubbed
# so `toplevel.drvPath` can be forced without the machine. Never imported by a deployed host.
{ config, lib, ... }:
{
  fileSystems."/" = lib.mkDefault { device = "none"; fsType = "tmpfs"; };
  boot.loader.grub.enable = lib.mkDefault false;
  # The repository holds no login keys (hosts/authorized_keys lives with the fleet's operators);
  # a real host without them fails NixOS's lock-out assertion, which is what it should do.
  users.allowNoPasswordLogin = lib.mkDefault true;
  hardware.nvidia-container-toolkit.suppressNvidiaDriverAssertion = true;
  # An NFS export the inventory does not name yet (nas_export) is stubbed only here.
  sparkfleet.storage.nas.device =
    lib.mkIf ((builtins.head config.sparkfleet.facts.mounts).what == null) (lib.mkDefault "eval-only.invalid:/hub");
}
