# One serving unit per lane this host heads (rank 0): `sparkfleet launch LANE` / `sparkfleet stop LANE`.
# The launch code derives env, binds and receipts per rank; nothing of that is restated here.
#
# A lane takes minutes to reload, so a NixOS switch never restarts one on its own
# (restartIfChanged = false): a tooling update or a README commit leaves a serving lane alone.
# Each lane has a companion `<lane unit>-spec` unit whose only content is the lane's spec (the
# store path of hosts/fleet.toml + that lane's recipe, units.specRoot); when that changes, the
# switch reloads the companion (reloadIfChanged) and its ExecReload queues a try-restart of the
# lane: a lane that is up restarts with its new spec, a stopped lane stays stopped.
{ config, lib, ... }:
let
  top = config.sparkfleet;
  cfg = top.lanes;
  facts = top.facts;
  units = import ./lib/units.nix;
  specs = units.specs {
    inherit facts;
    sparkfleet = units.systemBin;
    inherit (top) fleetRoot;
    remote = top.remoteCommand;
    inherit (cfg) autostart;
    # the socket's group: docker's daemon, or the rootful podman service (below)
    runtimeGroups = [ cfg.runtime ];
  };
  laneNames = map (l: l.lane) facts.lanes;
  podman = cfg.runtime == "podman";
  # Rootful podman on NixOS: rootless podman cannot run under the lane unit's
  # NoNewPrivileges=true and DevicePolicy=closed (newuidmap/newgidmap are setuid; pasta and
  # slirp4netns open /dev/net/tun, fuse-overlayfs /dev/fuse). The podman CLI in the unit (and in
  # the lane user's sessions: `sparkfleet image load`, the workers' ranks over ssh) talks to the
  # rootful podman service through its API socket instead (podman(1): CONTAINER_HOST set makes
  # --remote the default), open to the podman group; containers, images and CDI devices are the
  # service's.
  podmanSocket = "unix:///run/podman/podman.sock";
in
{
  options.sparkfleet.lanes = {
    enable = lib.mkEnableOption "the serving units of the lanes this host heads, and the container runtime with GPU access";

    runtime = lib.mkOption {
      type = lib.types.enum [ "docker" "podman" ];
      default = "docker";
      description = "Container runtime the lane recipes use; enabled with the NVIDIA container toolkit (CDI).";
    };

    watch = lib.mkOption {
      type = lib.types.listOf lib.types.str;
      default = [ ];
      example = [ "dsv41-flash-4x-mia" ];
      description = ''
        Lanes headed here that `sparkfleet watch LANE` supervises, one unit each, started with the
        lane. A lane whose recipe says `[watchdog] scope = "lane"` always has one (its kit's
        controller stops every node when one stops; the supervisor is what does that here). Restart=on-failure restarts the supervisor when it crashes (exit 70); exit 1 (its
        restart budget for the lane is spent: a human is needed) is RestartPreventExitStatus.
      '';
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
        assertion = builtins.all (w: builtins.elem w laneNames) cfg.watch;
        message = "sparkfleet.lanes.watch = [ ${toString cfg.watch} ]: only lanes headed by ${facts.host} can be watched here (${lib.concatStringsSep ", " laneNames})";
      }
      {
        assertion = facts.lanes == [ ] || config.users.users ? ${facts.sshUser};
        message = "sparkfleet lanes run as ${facts.sshUser} (ssh_user in hosts/fleet.toml): declare that user";
      }
    ];

    hardware.nvidia-container-toolkit.enable = true;
    virtualisation.docker.enable = lib.mkIf (cfg.runtime == "docker") true;
    virtualisation.podman.enable = lib.mkIf podman true;
    virtualisation.podman.dockerSocket.enable = lib.mkIf podman true;
    environment.variables.CONTAINER_HOST = lib.mkIf podman podmanSocket;
    users.users.${facts.sshUser}.extraGroups = lib.mkIf podman [ "podman" ];

    systemd.services = lib.listToAttrs (lib.concatMap (l: [
      {
        name = l.unit;
        value = lib.recursiveUpdate (units.toNixosService specs."${l.unit}.service") {
          restartIfChanged = false;
          environment = lib.optionalAttrs podman { CONTAINER_HOST = podmanSocket; };
        };
      }
      {
        name = "${l.unit}-spec";
        value = {
          description = "sparkfleet: restart ${l.unit} when lane ${l.lane}'s spec changes";
          wantedBy = [ "multi-user.target" ];
          reloadIfChanged = true;
          reloadTriggers = [ (units.specRoot top.fleetRoot "lane-${l.lane}" [ l.lane ]) ];
          serviceConfig = {
            Type = "oneshot";
            RemainAfterExit = true;
            # systemd: a service needs ExecStart= or ExecStop=; starting it does nothing
            ExecStart = "/run/current-system/sw/bin/true";
            ExecReload = units.execLine [ "/run/current-system/sw/bin/systemctl" "try-restart" "--no-block" "${l.unit}.service" ];
          };
        };
      }
    ]) facts.lanes
    ++ map (l: {
      name = builtins.replaceStrings [ "-lane-" ] [ "-watch-" ] l.unit;
      value = let lane = units.toNixosService specs."${l.unit}.service"; in {
        description = "sparkfleet: supervise lane ${l.lane} (known-answer probe, bundles, bounded restarts)";
        after = [ "${l.unit}.service" ];
        unitConfig.PartOf = [ "${l.unit}.service" ];
        wantedBy = [ "${l.unit}.service" ];
        inherit (lane) environment;
        serviceConfig = {
          User = lane.serviceConfig.User;
          SupplementaryGroups = lane.serviceConfig.SupplementaryGroups;
          ExecStart = units.execLine [ units.systemBin "watch" l.lane ];
          Restart = "on-failure";
          RestartSec = "30";
          # exit 1: the restart budget for the lane is spent; a human is needed, not another run
          RestartPreventExitStatus = "1";
        };
      };
    }) (builtins.filter (l: l.supervised || builtins.elem l.lane cfg.watch) facts.lanes));
  };
}
