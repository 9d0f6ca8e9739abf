# The fleet view on the head host: `sparkfleet view serve` as a unit (/metrics and the live page),
# and with prometheus.enable this host's Prometheus wired to it: the three file_sd jobs over the
# target files the unit keeps current from the inventory, and sparkfleet's alert rules.
# DGX OS head hosts run the same unit from the deploy profile and add the scrape snippet of
# docs/fleet-ops.md ("Adding the fleet to a Prometheus") to their Prometheus.
{ config, lib, ... }:
let
  inherit (lib) mkEnableOption mkIf mkMerge mkOption types;
  top = config.sparkfleet;
  cfg = top.view;
  units = import ./lib/units.nix;
  stateDir = "/var/lib/sparkfleet-view";
  targetsDir = "${stateDir}/targets";
  # file_sd file -> job: the names `sparkfleet view targets` writes (python/sparkfleet/view/targets.py JOBS)
  jobs = [
    { job = "sparkfleet-view"; file = "view.json"; }
    { job = "sparkfleet-engines"; file = "engines.json"; }
    { job = "sparkfleet-nodes"; file = "nodes.json"; }
  ];
  argv = [ units.systemBin "view" "serve" "--listen" cfg.listen "--interval" (toString cfg.interval)
           "--node-timeout" (toString cfg.nodeTimeout) "--targets-dir" targetsDir ];
  every = "${toString cfg.interval}s";
  scrapeJob = j: {
    job_name = j.job;
    file_sd_configs = [ { files = [ "${targetsDir}/${j.file}" ]; } ];
  } // lib.optionalAttrs (j.file == "view.json" && cfg.prometheus.credentialsFile != null) {
    authorization.credentials_file = cfg.prometheus.credentialsFile;
  };
in
{
  options.sparkfleet.view = {
    enable = mkEnableOption "the fleet view on this host (sparkfleet view serve: /metrics and the fleet page)";

    listen = mkOption {
      type = types.strMatching "[^[:space:]]*:[0-9]{1,5}"; # `view serve` checks the rest as it starts
      default = "127.0.0.1:9841";
      description = "HOST:PORT the view serves on. Beyond loopback it asks for its key (docs/fleet-ops.md).";
    };

    interval = mkOption {
      type = types.ints.positive;
      default = 15;
      description = "Seconds between the view's refreshes, and Prometheus's scrape and rule evaluation interval.";
    };

    nodeTimeout = mkOption {
      type = types.ints.positive;
      default = 10;
      description = "Seconds a host or lane may take to answer before the view shows it as not answering.";
    };

    prometheus = {
      enable = mkEnableOption "this host's Prometheus scraping the fleet (the view, every lane's engine, node exporters) with sparkfleet's alert rules";
      credentialsFile = mkOption {
        type = types.nullOr types.str;
        default = null;
        description = "A copy of the view's key that the prometheus user can read, when `listen` is beyond loopback.";
      };
    };
  };

  config = mkIf cfg.enable (mkMerge [
    {
      systemd.services.sparkfleet-view = {
        description = "sparkfleet view: /metrics and the fleet page";
        wants = [ "network-online.target" ];
        after = [ "network-online.target" ];
        wantedBy = [ "multi-user.target" ];
        environment = {
          SPARKFLEET_ROOT = "${top.fleetRoot}";
          SPARKFLEET_REMOTE = top.remoteCommand;
          SPARKFLEET_STATE_DIR = stateDir; # the view's key, when it serves beyond loopback
          PYTHONUNBUFFERED = "1";
        };
        serviceConfig = {
          Type = "simple";
          User = top.facts.sshUser;
          ExecStart = units.execLine argv;
          StateDirectory = "sparkfleet-view";
          StateDirectoryMode = "0755"; # the target files are for Prometheus to read; the key stays 0600
          Restart = "on-failure";
          RestartSec = "5";
        };
      };
    }
    (mkIf cfg.prometheus.enable {
      services.prometheus = {
        enable = true;
        globalConfig = { scrape_interval = every; evaluation_interval = every; };
        ruleFiles = [ ../python/sparkfleet/view/rules/sparkfleet-rules.yml ];
        scrapeConfigs = map scrapeJob jobs;
        # The build checks prometheus.yml with `promtool check config`, which fails on a
        # credentials_file it cannot read, and the view's key never enters the store or the sandbox.
        checkConfig = lib.mkIf (cfg.prometheus.credentialsFile != null) (lib.mkDefault "syntax-only");
      };
    })
  ]);
}
