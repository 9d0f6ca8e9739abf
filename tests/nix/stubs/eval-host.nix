# Evaluate sparkfleet's NixOS modules + a host folder with nixpkgs' lib and option stubs.
# nix-instantiate --eval --strict --json --arg nixpkgsLib <lib> --arg fleetRoot <root> \
#   --argstr host dgx1 [--arg extra '{ ... }'] eval-host.nix
{ nixpkgsLib, fleetRoot, host, hostModule ? null, extra ? { } }:
let
  lib = import nixpkgsLib;
  pkgs = {
    # a package as mkPackageOption / lib.getExe' see it
    sparkfleet = {
      type = "derivation";
      name = "sparkfleet-0.1.0";
      outPath = "/nix/store/00000000000000000000000000000000-sparkfleet-0.1.0";
      meta.mainProgram = "sparkfleet";
      # passthru.smg (pkgs/sparkfleet.nix), what services.smgPackage defaults to
      smg = { type = "derivation"; name = "smg-1.13.0"; outPath = "/nix/store/33333333333333333333333333333333-smg-1.13.0"; };
    };
    # what modules/services.nix names (mkPackageOption defaults)
    nginx = { type = "derivation"; name = "nginx-1.26.3"; outPath = "/nix/store/11111111111111111111111111111111-nginx-1.26.3"; };
    docker-distribution = { type = "derivation"; name = "docker-distribution-2.8.3";
      outPath = "/nix/store/22222222222222222222222222222222-docker-distribution-2.8.3"; };
  };
  repo = ../../..;
  # the flake's other NixOS inputs, as their stand-ins (dgx-spark-flake/, srvos-flake/)
  inputModule = dir: attr: ((import (dir + "/flake.nix")).outputs { self = null; }).nixosModules.${attr};
  evaluated = lib.evalModules {
    specialArgs = { modulesPath = "/nonexistent"; };
    modules = [
      ./nixos-options.nix
      (inputModule ./dgx-spark-flake "dgx-spark")
      (inputModule ./srvos-flake "server")
      (repo + "/modules")
      { _module.args.pkgs = pkgs; sparkfleet.fleetRoot = fleetRoot; }
      (if hostModule != null then hostModule else repo + "/hosts/${host}")
      extra
    ];
  };
  cfg = evaluated.config;
  prom = cfg.services.prometheus;
  # what nixos/modules/services/monitoring/prometheus/default.nix writes into prometheus.yml:
  # every option left null (and `_module`) dropped, through attribute sets and lists alike
  written = x:
    if builtins.isAttrs x then lib.mapAttrs (_: written) (lib.filterAttrs (n: v: n != "_module" && v != null) x)
    else if builtins.isList x then map written x
    else x;
in
{
  failedAssertions = map (a: a.message) (builtins.filter (a: !a.assertion) cfg.assertions);
  inherit (cfg) fileSystems networking virtualisation hardware boot nix security;
  openssh = cfg.services.openssh;
  users = { inherit (cfg.users) users; groups = builtins.attrNames cfg.users.groups; };
  etc = cfg.environment.etc;
  systemPackages = map (p: p.name) cfg.environment.systemPackages;
  # systemd.tmpfiles.settings as the lines NixOS writes to /etc/tmpfiles.d/10-sparkfleet.conf
  # (nixos/modules/system/boot/systemd/tmpfiles.nix, settingsEntryToRule: each field quoted, the
  # argument C-escaped), so a test can hand them to the real systemd-tmpfiles
  tmpfiles = lib.concatLists (lib.mapAttrsToList (path: types: lib.mapAttrsToList (type: r:
    "'${type}' '${path}' '${r.mode}' '${r.user}' '${r.group}' '${r.age}' "
    + lib.strings.escapeC [ "\t" "\n" "\r" " " "\\" ] r.argument) types)
    (cfg.systemd.tmpfiles.settings."10-sparkfleet" or { }));
  rawTmpfiles = cfg.systemd.tmpfiles.rules;
  services = cfg.systemd.services;
  timers = cfg.systemd.timers;
  facts = cfg.sparkfleet.facts;
  # this host's Prometheus: whether it runs, how its build checks prometheus.yml (promtool check
  # config, --syntax-only or not at all), and the part of prometheus.yml the sparkfleet modules set
  prometheus = {
    inherit (prom) enable checkConfig;
    yml = {
      global = written prom.globalConfig;
      rule_files = map toString prom.ruleFiles;
      scrape_configs = written prom.scrapeConfigs;
    };
  };
}
