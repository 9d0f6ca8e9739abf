# `import nixpkgs { system; overlays; }` without nixpkgs' lib, for the deploy-output tests that
# run everywhere: the trivial-builder stand-ins deploy-rs's lib calls, nixpkgs' own deploy-rs
# package, plus whatever the overlays add.
{ system ? "x86_64-linux", overlays ? [ ] }:
let
  trivial = import ../trivial-builders.nix;
  base = trivial // {
    inherit system;
    deploy-rs = trivial.mkDrv { name = "deploy-rs"; kind = "package"; extra.meta.mainProgram = "deploy"; };
    check-jsonschema = trivial.mkDrv { name = "check-jsonschema"; kind = "package"; };
  };
  final = builtins.foldl' (acc: overlay: acc // overlay final acc) base overlays;
in
final
