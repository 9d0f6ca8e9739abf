# `import nixpkgs { system; overlays; }` for the stand-in nixpkgs flake: builder stubs + overlays.
{ system ? "x86_64-linux", overlays ? [ ], ... }:
let
  stubs = import ./pkgs.nix { nixpkgsLib = ./lib; };
  callPackageWith = scope: f: args:
    let fn = if builtins.isFunction f then f else import f; in
    fn (builtins.intersectAttrs (builtins.functionArgs fn) scope // args);
  base = stubs // { inherit system; nixpkgs-fmt = "nixpkgs-fmt"; };
  extensions = builtins.foldl' (acc: overlay: acc // overlay final (base // acc)) { } overlays;
  final = base // extensions // { callPackage = callPackageWith final; };
in
final
