# Evaluation-only test of the NixOS side, after graham33/nixos-dgx-spark's checks/vllm-units.nix:
# a Spark's NixOS configuration (the DGX Spark module, srvos's server module, our modules, a host
# folder) evaluated with the real option declarations, asserting on the generated units, groups
# and trust. Nothing is built: `nix flake check --no-build` runs these assertions on every system
# (CI, with full nixpkgs); tests/nix/test_flake.py runs the same file here against option stubs.
{ lib, runCommand, nixosSystem, modules, host ? "dgx1" }:
let
  system = nixosSystem {
    system = "aarch64-linux";
    modules = modules ++ [
      # what a real host's hardware-configuration.nix and nas_export give
      ../modules/eval-only.nix
    ];
  };
  cfg = system.config;
  services = cfg.systemd.services;
  facts = cfg.sparkfleet.facts;
  user = facts.sshUser;
  group = cfg.users.users.${user}.group;
  failed = map (a: a.message) (builtins.filter (a: !a.assertion) cfg.assertions);
  lanes = map (l: l.unit) facts.lanes;
  # our tmpfiles settings (the hub roots and receipt parents, owned by the inventory's user)
  ourRules = lib.concatLists (lib.mapAttrsToList (_path: types: builtins.attrValues types)
    (cfg.systemd.tmpfiles.settings."10-sparkfleet" or { }));
  execOf = name: key: builtins.unsafeDiscardStringContext (toString services.${name}.serviceConfig.${key});

  ok =
    assert lib.assertMsg (failed == [ ]) "NixOS assertions fail for ${host}: ${lib.concatStringsSep "; " failed}";
    assert lib.assertMsg (lanes != [ ]) "${host} heads no lane: pick a lane head for this check";
    assert lib.assertMsg (ourRules != [ ]) "no tmpfiles rules for ${user}'s hub roots";
    assert lib.all (u: services.${u}.restartIfChanged == false) lanes
      || throw "a switch must never restart a lane by itself (restartIfChanged = false)";
    assert lib.all (u: services."${u}-spec".reloadIfChanged && services."${u}-spec".reloadTriggers != [ ]) lanes
      || throw "each lane needs its -spec companion (reloadIfChanged, spec as reload trigger)";
    assert lib.all (u: lib.hasPrefix "\"/run/current-system/sw/bin/sparkfleet\" " (execOf u "ExecStart")) lanes
      || throw "lane units must run sparkfleet from the system path";
    assert lib.assertMsg (lib.elem cfg.sparkfleet.package cfg.environment.systemPackages)
      "sparkfleet must be on the system path the units name";
    assert lib.assertMsg (lib.all (u: services.${u}.environment.SPARKFLEET_REMOTE == cfg.sparkfleet.remoteCommand) lanes)
      "lane units must tell the head how to start sparkfleet on its workers";
    assert lib.assertMsg (group != "" && cfg.users.groups ? ${group}) "${user}'s group ${group} does not exist";
    assert lib.all (r: r.user == user && lib.elem r.group (lib.attrNames cfg.users.groups)) ourRules
      || throw "a tmpfiles rule names a group that does not exist";
    assert lib.assertMsg cfg.hardware.nvidia-container-toolkit.enable "containers reach the GPU through CDI";
    assert lib.assertMsg (lib.elem "wheel" cfg.users.users.${user}.extraGroups) "${user} deploys: it must be in wheel";
    assert lib.assertMsg (lib.elem "@wheel" cfg.nix.settings.trusted-users) "wheel must be trusted by Nix (srvos)";
    assert lib.assertMsg cfg.services.openssh.enable "sshd must run";
    true;
in
assert ok;
runCommand "sparkfleet-nixos-units-${host}" { } "touch $out"
