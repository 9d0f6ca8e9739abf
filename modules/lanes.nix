# One serving unit per lane this host heads (rank 0): `sparkfleet launch LANE` / `sparkfleet stop LANE`.
# The launch code derives env, binds and receipts per rank; nothing of that is restated here.
{ config, lib, ... }:
let
  top = config.sparkfleet;
  cfg = top.lanes;
  facts = top.facts;
  units = import ./lib/units.nix;
  specs = units.specs {
    inherit facts;
    sparkfleet = lib.getExe' top.package "sparkfleet";
    fleetRoot = "${top.fleetRoot}";
    inherit (cfg) autostart;
    runtimeGroups = lib.optional (cfg.runtime == "docker") "docker";
  };
  laneNames = map (l: l.lane) facts.lanes;
in
{
  options.sparkfleet.lanes = {
    enable = lib.mkEnableOption "the serving units of the lanes this host heads, and the container runtime with GPU access";

    runtime = lib.mkOption {
      type = lib.types.enum [ "docker" "podman" ];
      default = "docker";
      description = "Container runtime the lane recipes use; enabled with the NVIDIA container toolkit (CDI).";
    };

    autostart = lib.mkOption {
      type = lib.types.nullOr lib.types.str;
      default = null;
      example = "dsv41-flash-4x-mia";
      description = "The lane brought up at boot (lanes on one host conflict: at most one).";
    };
  };

  config = lib.mkIf cfg.enable {
    assertions = [
      {
        assertion = cfg.autostart == null || builtins.elem cfg.autostart laneNames;
        message = "sparkfleet.lanes.autostart = ${toString cfg.autostart}: not a lane headed by ${facts.host} (${lib.concatStringsSep ", " laneNames})";
      }
      {
        assertion = facts.lanes == [ ] || config.users.users ? ${facts.sshUser};
        message = "sparkfleet lanes run as ${facts.sshUser} (ssh_user in hosts/fleet.toml): declare that user";
      }
    ];

    hardware.nvidia-container-toolkit.enable = true;
    virtualisation.docker.enable = lib.mkIf (cfg.runtime == "docker") true;
    virtualisation.podman.enable = lib.mkIf (cfg.runtime == "podman") true;

    systemd.services = lib.listToAttrs (map (l: {
      name = l.unit;
      value = units.toNixosService specs."${l.unit}.service";
    }) facts.lanes);
  };
}
