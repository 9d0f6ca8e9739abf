# The part of NixOS's services.prometheus that modules/view.nix sets, declared with the types
# nixos/modules/services/monitoring/prometheus/default.nix gives them, so the module evaluates with
# nixpkgs' lib alone: a misspelt option or a wrong type fails here as it would on the host.
{ lib, ... }:
let
  inherit (lib) mkOption types;
in
{
  options.services.prometheus = {
    enable = mkOption { type = types.bool; default = false; };
    globalConfig = mkOption { type = types.attrsOf types.str; default = { }; };
    ruleFiles = mkOption { type = types.listOf types.path; default = [ ]; };
    scrapeConfigs = mkOption { type = types.listOf (types.attrsOf types.anything); default = [ ]; };
  };
}
