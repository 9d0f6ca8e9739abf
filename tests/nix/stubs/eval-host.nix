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
    };
  };
  repo = ../../..;
  evaluated = lib.evalModules {
    specialArgs = { modulesPath = "/nonexistent"; };
    modules = [
      ./nixos-options.nix
      (repo + "/modules")
      { _module.args.pkgs = pkgs; sparkfleet.fleetRoot = fleetRoot; }
      (if hostModule != null then hostModule else repo + "/hosts/${host}")
      extra
    ];
  };
  cfg = evaluated.config;
in
{
  failedAssertions = map (a: a.message) (builtins.filter (a: !a.assertion) cfg.assertions);
  inherit (cfg) fileSystems networking virtualisation hardware boot;
  users = { inherit (cfg.users) users; groups = builtins.attrNames cfg.users.groups; };
  etc = cfg.environment.etc;
  systemPackages = map (p: p.name) cfg.environment.systemPackages;
  tmpfiles = cfg.systemd.tmpfiles.rules;
  services = cfg.systemd.services;
  timers = cfg.systemd.timers;
  facts = cfg.sparkfleet.facts;
}
