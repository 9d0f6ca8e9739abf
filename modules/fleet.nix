# Which host this machine is in hosts/fleet.toml, and the facts the other modules build from.
{ config, lib, pkgs, ... }:
let
  cfg = config.sparkfleet;
  fleet = (import ./lib/fleet.nix).fromRoot cfg.fleetRoot;
in
{
  options.sparkfleet = {
    host = lib.mkOption {
      type = lib.types.str;
      example = "dgx1";
      description = "This machine's name in hosts/fleet.toml.";
    };

    fleetRoot = lib.mkOption {
      type = lib.types.path;
      default = ../.;
      defaultText = lib.literalExpression "the flake's source";
      description = ''
        The fleet root (hosts/fleet.toml and recipes/). The units run the CLI with
        SPARKFLEET_ROOT pointing here, so Nix and the CLI read the same inventory.
      '';
    };

    package = lib.mkPackageOption pkgs "sparkfleet" { };

    remoteCommand = lib.mkOption {
      type = lib.types.str;
      default = (import ./lib/units.nix).profileBin;
      defaultText = lib.literalExpression "\"/nix/var/nix/profiles/sparkfleet/bin/sparkfleet\"";
      description = ''
        SPARKFLEET_REMOTE of the units: how a lane's head starts sparkfleet on its workers over
        ssh. The default is the deploy-rs `sparkfleet` profile, which `deploy .#<host>` installs on
        every host (NixOS and DGX OS alike).
      '';
    };

    facts = lib.mkOption {
      type = lib.types.attrs;
      readOnly = true;
      internal = true;
      default = fleet.facts cfg.host;
      defaultText = lib.literalExpression "((import ./lib/fleet.nix).fromRoot fleetRoot).facts host";
      description = "Per-host facts from modules/lib/fleet.nix (the same record sparkfleet.fleet.hostfacts derives).";
    };

    headHost = lib.mkOption {
      type = lib.types.nullOr lib.types.str;
      readOnly = true;
      internal = true;
      default = fleet.headHost;
      defaultText = lib.literalExpression "((import ./lib/fleet.nix).fromRoot fleetRoot).headHost";
      description = "The host that heads every lane (rank 0), null when the lanes have different heads or there is none.";
    };
  };

  # The units run sparkfleet from the system path (units.systemBin), not from its store path, so
  # a new build of the tooling alone changes no unit.
  config = lib.mkIf (cfg.storage.enable || cfg.staging.enable || cfg.lanes.enable || cfg.services.enable || cfg.view.enable) {
    environment.systemPackages = [ cfg.package ];
  };
}
