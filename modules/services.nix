# The fleet services this host runs (hosts/fleet.toml hosts.<h>.services): the gateway (smg behind
# nginx, `sparkfleet gateway run`) and the registry (`sparkfleet registry serve`, distribution).
# The units are the same specs DGX OS hosts get from the deploy profile (units.nix); here they run
# the system path's sparkfleet and name nixpkgs' nginx and registry binaries. The gateway unit has
# nginx and smg on its PATH (its `path`, rendered by NixOS as for any unit).
{ config, lib, pkgs, ... }:
let
  top = config.sparkfleet;
  cfg = top.services;
  facts = top.facts;
  units = import ./lib/units.nix;
  specs = units.specs {
    inherit facts;
    sparkfleet = units.systemBin;
    inherit (top) fleetRoot;
    remote = top.remoteCommand;
  };
  # the binaries the CLI looks for by name on Debian/Ubuntu (serving/front.py, images/registry.py)
  binaries = {
    gateway.SPARKFLEET_NGINX = "${cfg.nginxPackage}/bin/nginx";
    registry.SPARKFLEET_REGISTRY_BIN = "${cfg.registryPackage}/bin/registry";
  };
  # what each unit's PATH holds beyond NixOS's default (smg is also in sparkfleet's own Python)
  paths = {
    gateway = [ cfg.nginxPackage cfg.smgPackage ];
    registry = [ cfg.registryPackage ];
  };
in
{
  options.sparkfleet.services = {
    enable = lib.mkEnableOption "the fleet services hosts/fleet.toml gives this host (services = [\"gateway\", \"registry\"])";

    nginxPackage = lib.mkPackageOption pkgs "nginx" { };

    smgPackage = lib.mkOption {
      type = lib.types.package;
      default = top.package.smg;
      defaultText = lib.literalExpression "config.sparkfleet.package.smg";
      description = "smg, the gateway's router (pkgs/smg.nix: PyPI's wheel by hash), the one sparkfleet's Python imports.";
    };

    registryPackage = lib.mkPackageOption pkgs "docker-distribution" { };

    openFirewall = lib.mkOption {
      type = lib.types.listOf lib.types.port;
      default = [ ];
      example = [ 8080 5000 ];
      description = "TCP ports to open: the gateway's (8080 by default) and the registry's (its address in `registry init`).";
    };
  };

  config = lib.mkIf cfg.enable {
    assertions = [
      {
        assertion = facts.services == [ ] || config.users.users ? ${facts.sshUser};
        message = "sparkfleet services run as ${facts.sshUser} (ssh_user in hosts/fleet.toml): declare that user";
      }
    ];
    networking.firewall.allowedTCPPorts = cfg.openFirewall;
    systemd.services = lib.listToAttrs (map (s: {
      name = s.unit;
      value = lib.recursiveUpdate (units.toNixosService specs."${s.unit}.service") {
        environment = binaries.${s.service};
        path = paths.${s.service};
      };
    }) facts.services);
  };
}
