# modules/view.nix (with the other sparkfleet modules) evaluated with nixpkgs' lib and option stubs:
# the unit it makes and the Prometheus it wires, as JSON for tests/view/test_view_module.py.
{ nixpkgsLib, fleetRoot, host, extra ? { } }:
let
  lib = import nixpkgsLib;
  repo = ../../..;
  pkgs.sparkfleet = {
    type = "derivation";
    name = "sparkfleet-0.1.0";
    outPath = "/nix/store/00000000000000000000000000000000-sparkfleet-0.1.0";
    meta.mainProgram = "sparkfleet";
    smg = { type = "derivation"; name = "smg-1.13.0"; outPath = "/nix/store/33333333333333333333333333333333-smg-1.13.0"; };
  };
  evaluated = lib.evalModules {
    modules = [
      (repo + "/tests/nix/stubs/nixos-options.nix")
      ./prometheus-options.nix
      (repo + "/modules")
      (repo + "/modules/view.nix")
      { _module.args.pkgs = pkgs; sparkfleet.fleetRoot = fleetRoot; sparkfleet.host = host; }
      extra
    ];
  };
  cfg = evaluated.config;
  prom = cfg.services.prometheus;
in
{
  failedAssertions = map (a: a.message) (builtins.filter (a: !a.assertion) cfg.assertions);
  unit = cfg.systemd.services.sparkfleet-view or null;
  prometheus = { inherit (prom) enable globalConfig scrapeConfigs; ruleFiles = map toString prom.ruleFiles; };
}
