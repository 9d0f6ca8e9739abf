# The few NixOS options the sparkfleet modules set, declared with their NixOS types (trimmed), so
# the modules evaluate with nixpkgs' lib alone (lib.evalModules) where full nixpkgs is unavailable.
{ lib, ... }:
let
  inherit (lib) mkOption types;
  anyList = types.listOf types.anything;
  unitOptions = {
    description = mkOption { type = types.str; default = ""; };
    wants = mkOption { type = types.listOf types.str; default = [ ]; };
    after = mkOption { type = types.listOf types.str; default = [ ]; };
    conflicts = mkOption { type = types.listOf types.str; default = [ ]; };
    wantedBy = mkOption { type = types.listOf types.str; default = [ ]; };
    unitConfig = mkOption { type = types.attrsOf types.anything; default = { }; };
  };
in
{
  options = {
    assertions = mkOption { type = types.listOf types.unspecified; default = [ ]; };
    warnings = mkOption { type = types.listOf types.str; default = [ ]; };
    networking.hostName = mkOption { type = types.str; default = "nixos"; };
    nixpkgs.overlays = mkOption { type = types.listOf types.unspecified; default = [ ]; };
    system.stateVersion = mkOption { type = types.str; };
    boot.supportedFilesystems = mkOption { type = types.listOf types.str; default = [ ]; };
    boot.loader.grub.enable = mkOption { type = types.bool; default = true; };
    fileSystems = mkOption {
      default = { };
      type = types.attrsOf (types.submodule {
        options = {
          device = mkOption { type = types.nullOr types.str; default = null; };
          fsType = mkOption { type = types.str; default = "auto"; };
          options = mkOption { type = types.nonEmptyListOf types.str; default = [ "defaults" ]; };
        };
      });
    };
    systemd.tmpfiles.rules = mkOption { type = types.listOf types.str; default = [ ]; };
    systemd.services = mkOption {
      default = { };
      type = types.attrsOf (types.submodule {
        options = unitOptions // {
          environment = mkOption { type = types.attrsOf types.str; default = { }; };
          serviceConfig = mkOption {
            type = types.attrsOf (types.oneOf [ types.bool types.int types.str anyList ]);
            default = { };
          };
        };
      });
    };
    systemd.timers = mkOption {
      default = { };
      type = types.attrsOf (types.submodule {
        options = unitOptions // {
          timerConfig = mkOption { type = types.attrsOf (types.oneOf [ types.bool types.int types.str ]); };
        };
      });
    };
    users.users = mkOption {
      default = { };
      type = types.attrsOf (types.submodule {
        options = {
          isNormalUser = mkOption { type = types.bool; default = false; };
          extraGroups = mkOption { type = types.listOf types.str; default = [ ]; };
        };
      });
    };
    hardware.nvidia-container-toolkit.enable = mkOption { type = types.bool; default = false; };
    hardware.nvidia-container-toolkit.suppressNvidiaDriverAssertion = mkOption { type = types.bool; default = false; };
    virtualisation.docker.enable = mkOption { type = types.bool; default = false; };
    virtualisation.podman.enable = mkOption { type = types.bool; default = false; };
  };
}
