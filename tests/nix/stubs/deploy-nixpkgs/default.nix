# `import nixpkgs { system; overlays; }` without nixpkgs' lib, for the deploy-output tests that
# run everywhere: nixpkgs' own deploy-rs package plus whatever the overlays add.
{ system ? "x86_64-linux", overlays ? [ ] }:
let
  base = {
    inherit system;
    deploy-rs = { type = "derivation"; name = "deploy-rs-from-nixpkgs"; };
  };
  final = builtins.foldl' (acc: overlay: acc // overlay final acc) base overlays;
in
final
