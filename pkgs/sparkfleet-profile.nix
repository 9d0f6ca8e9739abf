# The deploy-rs `sparkfleet` profile of one host: the pinned CLI, the host's unit files (rendered
# by modules/lib/units.nix from the same facts the NixOS modules use, plus the NAS mount units a
# host without NixOS needs) and the activation script that installs them and restarts only what
# changed (sparkfleet-profile/activate.sh).
#
# The units run the CLI as <profile>/bin/sparkfleet (units.profileBin): the path deploy-rs
# activates this profile at, the same on every deploy, so a new build of the tooling changes no
# unit file. Their SPARKFLEET_ROOT is a per-unit copy of hosts/fleet.toml and the lane's recipe.
#
# A host that runs the gateway (services = ["gateway"]) also gets nginx and smg in bin/: the
# gateway unit's PATH starts there (units.profileUnits), so `gateway run` finds both in the
# profile, not in whatever the host's apt installed.
{ lib, runCommand, writeText, sparkfleet, nginx, fleet, host, fleetRoot }:
let
  units = import ../modules/lib/units.nix;
  exe = lib.getExe' sparkfleet "sparkfleet";
  shipped = units.profileUnits { inherit fleet host fleetRoot; };
  gateway = builtins.any (s: s.service == "gateway") ((fleet.facts host).services or [ ]);
in
runCommand "sparkfleet-profile-${host}" { } (''
  mkdir -p $out/bin $out/share/sparkfleet/units
  ln -s ${exe} $out/bin/sparkfleet
'' + lib.optionalString gateway ''
  ln -s ${lib.getExe' sparkfleet.smg "smg"} $out/bin/smg
  ln -s ${lib.getExe' nginx "nginx"} $out/bin/nginx
'' + ''
  ln -s ${shipped.stageRoot} $out/share/sparkfleet/stage-root
  ln -s ${shipped.fleetRoot} $out/share/sparkfleet/fleet-root
  install -m 0755 ${./sparkfleet-profile/activate.sh} $out/bin/sparkfleet-activate
  patchShebangs $out/bin/sparkfleet-activate
'' + lib.concatStrings (lib.mapAttrsToList (name: text: ''
  install -m 0644 ${writeText name text} $out/share/sparkfleet/units/${name}
'') shipped.files))
