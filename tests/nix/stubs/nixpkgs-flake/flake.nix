# A stand-in for the nixpkgs flake input (tests/nix/test_flake.py copies it next to nixpkgs' lib):
# the real lib, nixosSystem = lib.evalModules + the NixOS option stubs, and `import nixpkgs {}`
# giving the builder stubs, so the real flake.nix evaluates through Nix's flake machinery.
{
  outputs = { self }:
    let
      lib = import ./lib;
    in
    {
      lib = lib // {
        nixosSystem = { system, modules, ... }:
          lib.evalModules {
            modules = modules ++ [
              ./nixos-options.nix
              # like NixOS: pkgs is nixpkgs for the system with config.nixpkgs.overlays applied
              ({ config, ... }: {
                _module.args.pkgs = import ./default.nix { inherit system; inherit (config.nixpkgs) overlays; };
              })
            ];
          } // { inherit system; };
      };
      outPath = ./.;
    };
}
