# `sparkfleet stage <host>` as a systemd oneshot + timer, after the network and the hub mounts.
{ config, lib, ... }:
let
  top = config.sparkfleet;
  cfg = top.staging;
  facts = top.facts;
  units = import ./lib/units.nix;
  fleetLib = import ./lib/fleet.nix;
  specs = units.specs {
    inherit facts;
    sparkfleet = units.systemBin;
    inherit (top) fleetRoot;
    remote = top.remoteCommand;
    inherit stagedLanes;
    stagingRoot = "/etc/${stageRootEtc}";
    inherit (cfg) schedule;
  };
  name = facts.staging.unit;
  stagedLanes = (fleetLib.fromRoot top.fleetRoot).lanesOf facts.host;
  # a stable path for the unit; what it links to follows the deployed recipes (units.nix, stagingRoot)
  stageRootEtc = "sparkfleet/stage-root";
in
{
  options.sparkfleet.staging = {
    enable = lib.mkEnableOption "periodic staging of this host's lanes from the NAS to local NVMe";

    schedule = lib.mkOption {
      type = lib.types.str;
      default = "daily";
      example = "*-*-* 03:00:00";
      description = "systemd OnCalendar expression for the staging timer.";
    };
  };

  config = lib.mkIf cfg.enable {
    assertions = [
      {
        assertion = top.storage.enable;
        message = "sparkfleet.staging needs sparkfleet.storage (the NAS mount it stages from)";
      }
      {
        assertion = config.users.users ? ${facts.staging.user};
        message = "sparkfleet.staging runs as ${facts.staging.user} (ssh_user in hosts/fleet.toml): declare that user";
      }
    ];

    environment.etc.${stageRootEtc}.source = units.specRoot top.fleetRoot "stage-${facts.host}" stagedLanes;
    systemd.services.${name} = units.toNixosService specs."${name}.service";
    systemd.timers.${name} = units.toNixosTimer specs."${name}.timer";
  };
}
