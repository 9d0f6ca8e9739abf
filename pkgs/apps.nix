# `nix run .#stage -- dgx1` and friends, from an operator's machine: the pinned CLI, pointed at
#   - the inventory: the sparkfleet checkout you run it in (its hosts/fleet.toml; bench reports
#     land in its recipes/<lane>/reports), else the fleet this flake was built from (`fleetSpec`,
#     a read-only store copy: then bench writes to ./sparkfleet-reports unless --out says where);
#   - on the hosts, what `deploy .#HOST` left there: the tooling in the `sparkfleet` profile's
#     bin/ (SPARKFLEET_REMOTE) and the same store copy of the fleet (SPARKFLEET_REMOTE_ROOT). A
#     host without them gets one error naming `deploy .#HOST` / `sparkfleet bootstrap HOST`.
# Any of the variables set by the caller wins.
{ lib, writeShellApplication, sparkfleet, fleetSpec, profileBin }:
let
  exe = lib.getExe' sparkfleet "sparkfleet";
  descriptions = {
    stage = "Stage a host's weights and images (sparkfleet stage HOST)";
    launch = "Launch a lane across its hosts (sparkfleet launch LANE)";
    bench = "Benchmark a lane and write its report (sparkfleet bench LANE)";
    doctor = "Check a host, or every host of a lane, is ready (sparkfleet doctor HOST|LANE)";
  };
  verb = v: {
    type = "app";
    meta.description = descriptions.${v};
    program = lib.getExe (writeShellApplication {
      name = "sparkfleet-${v}";
      text = ''
        if [[ -z ''${SPARKFLEET_ROOT:-} ]]; then
          dir=$PWD
          while [[ $dir != / && ! -f $dir/hosts/fleet.toml ]]; do dir=$(dirname -- "$dir"); done
          if [[ -f $dir/hosts/fleet.toml ]]; then SPARKFLEET_ROOT=$dir; else SPARKFLEET_ROOT=${fleetSpec}; fi
          export SPARKFLEET_ROOT
        fi
        export SPARKFLEET_REMOTE=''${SPARKFLEET_REMOTE:-${profileBin}}
        export SPARKFLEET_REMOTE_ROOT=''${SPARKFLEET_REMOTE_ROOT:-${fleetSpec}}
        args=("$@")
      '' + lib.optionalString (v == "bench") ''
        # never into the read-only store: a store inventory's reports go to ./sparkfleet-reports
        if [[ $SPARKFLEET_ROOT == /nix/store/* && " $* " != *" --out "* && " $* " != *" --out="* ]]; then
          args+=(--out "$PWD/sparkfleet-reports")
        fi
      '' + ''
        exec ${exe} ${v} "''${args[@]}"
      '';
    });
  };
in
lib.genAttrs (builtins.attrNames descriptions) verb // {
  default = {
    type = "app";
    meta.description = "The sparkfleet CLI, pinned by this flake";
    program = lib.getExe' sparkfleet "sparkfleet";
  };
}
