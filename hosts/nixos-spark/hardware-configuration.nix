# What `nixos-generate-config` writes on a Spark installed with graham33/nixos-dgx-spark's
# installer image (UEFI, systemd-boot; NVMe root + ESP, by label here). The example's stand-in
# for a machine's own file: enough for the toplevel to evaluate, not a disk layout to copy.
{ lib, ... }:
{
  boot.loader.systemd-boot.enable = true;
  boot.loader.efi.canTouchEfiVariables = true;
  boot.initrd.availableKernelModules = [ "nvme" "xhci_pci" "usbhid" "usb_storage" ];
  fileSystems."/" = { device = "/dev/disk/by-label/nixos"; fsType = "ext4"; };
  fileSystems."/boot" = { device = "/dev/disk/by-label/ESP"; fsType = "vfat"; options = [ "fmask=0077" "dmask=0077" ]; };
  nixpkgs.hostPlatform = lib.mkDefault "aarch64-linux";
}
