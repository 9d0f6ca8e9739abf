# A stand-in for the deploy-rs flake input: its overlays.default and lib as deploy-rs's own
# flake.nix writes them (serokell/deploy-rs d5eff7f948535b9c723d60cd8239f8f11ddc90fa, the locked
# rev): activate.custom is the same functor building the same buildEnv (the base, its
# /deploy-rs-activate script and /activate-rs exec'ing final.deploy-rs.deploy-rs), activate.nixos
# activates base.config.system.build.toplevel with switch-to-configuration, and deployChecks gives
# deploy-schema / deploy-activate as runCommand derivations. What differs: deploy-rs.deploy-rs here
# is a named stand-in for the flake's own build (so a test sees whether nixpkgs' cached package
# replaces it), the builders are nixpkgs' stand-ins, and lib.mapAttrsToList is written out so the
# lib-free tests can evaluate it.
{
  outputs = { self }:
    let
      mapAttrsToList = f: set: map (n: f n set.${n}) (builtins.attrNames set);
    in
    {
      overlays.default = final: _prev: {
        deploy-rs = {
          deploy-rs = rec {
            type = "derivation";
            name = "deploy-rs-built-from-flake";
            outPath = "/nix/store/00000000000000000000000000000000-${name}";
            drvPath = "${outPath}.drv";
          };
          lib = rec {
            activate = rec {
              custom = {
                __functor = customSelf: base: activate:
                  final.buildEnv {
                    name = "activatable-" + base.name;
                    paths = [
                      base
                      (final.writeTextFile {
                        name = base.name + "-activate-path";
                        text = ''
                          #!${final.runtimeShell}
                          set -euo pipefail

                          if [[ "''${DRY_ACTIVATE:-}" == "1" ]]
                          then
                              ${customSelf.dryActivate or "echo ${final.writeScript "activate" activate}"}
                          elif [[ "''${BOOT:-}" == "1" ]]
                          then
                              ${customSelf.boot or "echo ${final.writeScript "activate" activate}"}
                          else
                              ${activate}
                          fi
                        '';
                        executable = true;
                        destination = "/deploy-rs-activate";
                      })
                      (final.writeTextFile {
                        name = base.name + "-activate-rs";
                        text = ''
                          #!${final.runtimeShell}
                          exec ${final.deploy-rs.deploy-rs}/bin/activate "$@"
                        '';
                        executable = true;
                        destination = "/activate-rs";
                      })
                    ];
                  };
              };
              nixos = base:
                (custom // {
                  dryActivate = "$PROFILE/bin/switch-to-configuration dry-activate";
                  boot = "$PROFILE/bin/switch-to-configuration boot";
                })
                  base.config.system.build.toplevel
                  ''
                    cd /tmp
                    $PROFILE/bin/switch-to-configuration switch
                  '';
              noop = base: custom base ":";
            };
            deployChecks = deploy: builtins.mapAttrs (_: check: check deploy) {
              deploy-schema = deploy: final.runCommand "jsonschema-deploy-system" { } ''
                ${final.check-jsonschema}/bin/check-jsonschema --schemafile interface.json ${final.writeText "deploy.json" (builtins.toJSON deploy)} && touch $out
              '';
              deploy-activate = deploy:
                let
                  profiles = builtins.concatLists (mapAttrsToList (nodeName: node:
                    mapAttrsToList (profileName: profile: [ (toString profile.path) nodeName profileName ]) node.profiles)
                    deploy.nodes);
                in
                final.runCommand "deploy-rs-check-activate" { } ''
                  for x in ${builtins.concatStringsSep " " (map (p: builtins.concatStringsSep ":" p) profiles)}; do
                    profile_path=$(echo $x | cut -f1 -d:)
                    test -f "$profile_path/deploy-rs-activate" && test -f "$profile_path/activate-rs"
                  done
                  touch $out
                '';
            };
          };
        };
      };
    };
}
