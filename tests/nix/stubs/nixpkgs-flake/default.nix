# `import nixpkgs { system; overlays; }` for the stand-in nixpkgs flake: builder stand-ins +
# overlays, with nixpkgs lib's own callPackageWith (lib/customisation.nix: it wraps every result
# with makeOverridable, so `override`/`overrideDerivation` ride along exactly as on a real nixpkgs).
{ system ? "x86_64-linux", overlays ? [ ], ... }:
let
  lib = import ./lib;
  stubs = import ./pkgs.nix { nixpkgsLib = ./lib; };
  base = stubs // { inherit system; };
  extensions = builtins.foldl' (acc: overlay: acc // overlay final (base // acc)) { } overlays;
  final = base // extensions // { callPackage = lib.callPackageWith final; };
in
final
