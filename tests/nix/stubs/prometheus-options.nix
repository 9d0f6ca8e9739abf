# NixOS's services.prometheus, the part modules/view.nix sets, declared with the types
# nixos/modules/services/monitoring/prometheus/default.nix gives them: its config submodules'
# options are `nullOr` with default null (its mkOpt / mkDefOpt), `authorization` is any attrs, and
# prometheus.yml is written from what is not null. Only what view.nix sets is declared, so a
# misspelt or unknown option fails here as it would on the host. nixos-options.nix imports this
# file; real_prometheus.py puts the real module in its place (where full nixpkgs is: CI's nixos-eval) and checks
# that the head host's Prometheus comes out the same.
{ lib, ... }:
let
  inherit (lib) mkOption types;
  optional = type: mkOption { type = types.nullOr type; default = null; };
  fileSd = types.submodule { options.files = mkOption { type = types.listOf types.str; }; };
in
{
  options.services.prometheus = {
    enable = lib.mkEnableOption "Prometheus monitoring daemon";
    # true: the build runs `promtool check config` on prometheus.yml; "syntax-only" adds --syntax-only
    checkConfig = mkOption { type = types.either types.bool (types.enum [ "syntax-only" ]); default = true; };
    globalConfig = mkOption {
      type = types.submodule {
        options = { scrape_interval = optional types.str; evaluation_interval = optional types.str; };
      };
      default = { };
    };
    ruleFiles = mkOption { type = types.listOf types.path; default = [ ]; };
    scrapeConfigs = mkOption {
      type = types.listOf (types.submodule {
        options = {
          job_name = mkOption { type = types.str; };
          file_sd_configs = optional (types.listOf fileSd);
          authorization = optional types.attrs;
        };
      });
      default = [ ];
    };
  };
}
