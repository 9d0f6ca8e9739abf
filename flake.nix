{
  description = "sparkfleet: staging, launch and bench of DeepSeek-V4.1-Flash lanes on a DGX Spark fleet";

  # Inputs and outputs only; the logic lives in modules/ (incl. the pure lib), pkgs/ and hosts/.
  inputs = {
    nixpkgs.url = "github:NixOS/nixpkgs/nixos-25.11";
    deploy-rs.url = "github:serokell/deploy-rs";
  };

  outputs = { self, nixpkgs, deploy-rs }:
    let
      # hosts/fleet.toml + recipes/ read with builtins only (the same facts sparkfleet.hostfacts derives)
      fleet = (import ./modules/lib/fleet.nix).fromRoot ./.;
      # The Sparks are aarch64-linux; operators' machines and CI are often x86_64-linux.
      hostSystem = "aarch64-linux";
      systems = [ "aarch64-linux" "x86_64-linux" ];
      forSystems = f: builtins.listToAttrs (map (system: { name = system; value = f system; }) systems);
      forHosts = f: builtins.listToAttrs (map (host: { name = host; value = f host; }) fleet.hostNames);
      pkgsFor = system: import nixpkgs { inherit system; overlays = [ self.overlays.default ]; };
      isNixos = host: fleet.hosts.${host}.os == "nixos";
    in
    {
      lib = { inherit fleet; };

      overlays.default = final: _prev: {
        sparkfleet = final.callPackage ./pkgs/sparkfleet.nix { src = ./.; };
      };

      packages = forSystems (system:
        let pkgs = pkgsFor system; in
        {
          default = pkgs.sparkfleet;
          inherit (pkgs) sparkfleet;
        }
        // nixpkgs.lib.optionalAttrs (system == hostSystem) ({
          mia-tp4-image = pkgs.callPackage ./pkgs/mia-tp4-image.nix { inherit fleet; };
        } // nixpkgs.lib.mapAttrs' (host: _: {
          name = "sparkfleet-profile-${host}";
          value = pkgs.callPackage ./pkgs/sparkfleet-profile.nix { inherit fleet host; fleetRoot = self; };
        }) fleet.hosts));

      apps = forSystems (system:
        let pkgs = pkgsFor system; in
        pkgs.callPackage ./pkgs/apps.nix { inherit (pkgs) sparkfleet; fleetRoot = self; });

      nixosModules = {
        default = ./modules;
        fleet = ./modules/fleet.nix;
        storage = ./modules/storage.nix;
        staging = ./modules/staging.nix;
        lanes = ./modules/lanes.nix;
        eval-only = ./modules/eval-only.nix;
      };

      nixosConfigurations = forHosts (host: nixpkgs.lib.nixosSystem {
        system = hostSystem;
        modules = [
          self.nixosModules.default
          { nixpkgs.overlays = [ self.overlays.default ]; sparkfleet.fleetRoot = self; }
          ./hosts/${host}
        ];
      });

      # `deploy .#dgx2` (every profile) or `deploy .#dgx2.sparkfleet` (tooling + units only).
      # NixOS hosts take `system` too; DGX OS hosts only `sparkfleet` (os in hosts/fleet.toml).
      deploy.nodes = forHosts (host:
        let activate = deploy-rs.lib.${hostSystem}.activate; in
        fleet.deployNode host {
          system = if isNixos host then activate.nixos self.nixosConfigurations.${host} else null;
          sparkfleet = activate.custom self.packages.${hostSystem}."sparkfleet-profile-${host}"
            "$PROFILE/bin/sparkfleet-activate";
        });

      checks = forSystems (system:
        let
          pkgs = pkgsFor system;
          # Force each host's toplevel derivation (eval only: stubbed hardware, nothing built).
          evalHost = host: pkgs.writeText "eval-${host}.drvpath" (builtins.unsafeDiscardStringContext
            (self.nixosConfigurations.${host}.extendModules {
              modules = [ self.nixosModules.eval-only ];
            }).config.system.build.toplevel.drvPath);
        in
        {
          inherit (pkgs) sparkfleet;
          fleet-facts = pkgs.writeText "fleet-facts.json" (builtins.toJSON fleet.allFacts);
        }
        // nixpkgs.lib.mapAttrs' (host: _: { name = "eval-${host}"; value = evalHost host; }) fleet.hosts
        # deployChecks builds every profile: only where the hosts' system builds (deploy-rs #389).
        // nixpkgs.lib.optionalAttrs (system == hostSystem)
          (deploy-rs.lib.${system}.deployChecks self.deploy));

      formatter = forSystems (system: (pkgsFor system).nixpkgs-fmt);
    };
}
