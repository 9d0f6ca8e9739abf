# A nixpkgs-free build set, for building sparkfleet's own derivations for real in Nix's sandbox
# (tests/nix/test_builds.py): nixpkgs' real lib, and the trivial builders pkgs/ uses written on
# builtins.derivation with a static busybox in the store as the builders' shell and tools.
#
# What stands in for nixpkgs, and how it differs (modules/README.md lists it too):
#   - stdenv: none. A builder is busybox's sh running `buildCommand` after a setup that puts
#     busybox's applets on PATH (coreutils, install, ln, sed, ...) and stops at the first error;
#   - runCommand, writeTextFile, writeText, writeScript, writeShellScript: their nixpkgs formals and
#     build commands (trivial-builders/default.nix), the environment attributes passed to
#     derivation as nixpkgs passes them (passAsFile included);
#   - runtimeShell is busybox's sh, not bash; patchShebangs rewrites an interpreter to its store
#     path when it is one of busybox's applets and leaves it alone otherwise (the real one finds
#     bash on the stdenv's PATH).
{ lib, busybox, system ? builtins.currentSystem }:
let
  shell = "${busybox}/bin/sh";
  setup = builtins.toFile "sparkfleet-buildset-setup.sh" ''
    set -eu
    mkdir -p "$NIX_BUILD_TOP/.bin"
    ${busybox}/bin/busybox --install -s "$NIX_BUILD_TOP/.bin"
    export PATH="$NIX_BUILD_TOP/.bin"
    patchShebangs() {
      for f in "$@"; do
        first=$(head -n 1 "$f")
        case "$first" in
          "#!/usr/bin/env "*) interpreter=''${first#"#!/usr/bin/env "} ;;
          "#!/"*) interpreter=$(basename "''${first#"#!"}") ;;
          *) continue ;;
        esac
        if [ -e "$NIX_BUILD_TOP/.bin/$interpreter" ]; then
          sed -i "1s|.*|#!${busybox}/bin/$interpreter|" "$f"
        else
          echo "patchShebangs: $f: $interpreter is not in this build set, left as it is" >&2
        fi
      done
    }
  '';
in
rec {
  inherit lib system;
  runtimeShell = shell;

  # pkgs/build-support/trivial-builders: runCommand name env buildCommand
  runCommand = name: env: buildCommand:
    let
      drv = derivation (removeAttrs env [ "passthru" "meta" ] // {
        inherit name system buildCommand;
        builder = shell;
        args = [ "-c" ". ${setup}; eval \"$buildCommand\"" ];
      });
    in
    drv // (env.passthru or { }) // { meta = env.meta or { }; };

  writeTextFile =
    { name, text, executable ? false, destination ? "", checkPhase ? "", meta ? { }, passthru ? { }
    , allowSubstitutes ? false, preferLocalBuild ? true, derivationArgs ? { } }:
    runCommand name ({
      inherit text executable checkPhase allowSubstitutes preferLocalBuild meta passthru;
      passAsFile = [ "text" ];
    } // derivationArgs) ''
      target=$out${lib.escapeShellArg destination}
      mkdir -p "$(dirname "$target")"
      if [ -e "$textPath" ]; then
        mv "$textPath" "$target"
      else
        echo -n "$text" > "$target"
      fi
      if [ -n "$executable" ]; then
        chmod +x "$target"
      fi
      eval "$checkPhase"
    '';

  writeText = name: text: writeTextFile { inherit name text; };
  writeScript = name: text: writeTextFile { inherit name text; executable = true; };
  writeShellScript = name: text: writeTextFile {
    inherit name;
    executable = true;
    text = ''
      #!${runtimeShell}
      ${text}
    '';
    checkPhase = ''${shell} -n "$target"'';
  };
}
