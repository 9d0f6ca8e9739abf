{
  description = "sparkfleet: staging, launch and bench of DeepSeek-V4.1-Flash lanes on a DGX Spark fleet";

  # Inputs and outputs only; the logic lives in modules/ (incl. the pure lib), pkgs/ and hosts/.
  inputs = {
    # A release every NixOS module input supports: srvos at its locked rev tests nixos-26.05 (its
    # dev flake's nixos-stable) and has dropped older releases (tests/nix/test_input_floors.py);
    # the lock entry is the one srvos's dev/private/flake.lock records. docs/nix.md: why, and when to move.
    nixpkgs.url = "github:NixOS/nixpkgs/nixos-26.05";
    # One nixpkgs for everything: deploy-rs's lib (activate.*) is evaluated against ours, and its
    # `deploy`/`activate` binaries come from our nixpkgs' binary cache (deployPkgsFor below).
    deploy-rs = {
      url = "github:serokell/deploy-rs";
      inputs.nixpkgs.follows = "nixpkgs";
    };
    # NixOS on the Spark: its nixosModules.dgx-spark carries the NVIDIA kernel + open driver, the
    # container toolkit, allowUnfree and the RDMA memlock limits (hosts/common.nix enables it).
    nixos-dgx-spark = {
      url = "github:graham33/nixos-dgx-spark";
      inputs.nixpkgs.follows = "nixpkgs";
    };
    # ssh, sudo and trusted-users the way servers want them (nixosModules.server).
    srvos = {
      url = "github:nix-community/srvos";
      inputs.nixpkgs.follows = "nixpkgs";
    };
  };

  outputs = { self, nixpkgs, deploy-rs, nixos-dgx-spark, srvos }:
    let
      # hosts/fleet.toml + recipes/ read with builtins only (the same facts sparkfleet.fleet.hostfacts derives)
      fleet = (import ./modules/lib/fleet.nix).fromRoot ./.;
      units = import ./modules/lib/units.nix;
      # The Sparks are aarch64-linux; operators' machines and CI are often x86_64-linux.
      hostSystem = "aarch64-linux";
      systems = [ "aarch64-linux" "x86_64-linux" ];
      forSystems = f: builtins.listToAttrs (map (system: { name = system; value = f system; }) systems);
      forHosts = f: builtins.listToAttrs (map (host: { name = host; value = f host; }) fleet.hostNames);
      pkgsFor = system: import nixpkgs { inherit system; overlays = [ self.overlays.default ]; };
      # deploy-rs's README: its overlay for lib, with the deploy-rs package taken from nixpkgs so
      # activate-rs is substituted from the binary cache instead of compiled.
      deployPkgsFor = system: import nixpkgs {
        inherit system;
        overlays = [
          deploy-rs.overlays.default
          (_final: prev: { deploy-rs = { inherit (pkgsFor system) deploy-rs; inherit (prev.deploy-rs) lib; }; })
        ];
      };
      isNixos = host: fleet.hosts.${host}.os == "nixos";
      # Only hosts that run NixOS have a NixOS configuration (os in hosts/fleet.toml), plus the
      # example NixOS Spark (hosts/nixos-spark: its own one-host inventory, in no lane, never
      # deployed), so a NixOS toplevel is evaluated end to end whatever the fleet runs today.
      exampleHosts = [ "nixos-spark" ];
      nixosHosts = builtins.filter isNixos fleet.hostNames ++ exampleHosts;
      nixosModulesFor = host: [
        nixos-dgx-spark.nixosModules.dgx-spark
        srvos.nixosModules.server
        self.nixosModules.default
        { nixpkgs.overlays = [ self.overlays.default ]; sparkfleet.fleetRoot = self; }
        ./hosts/${host}
      ];
      forNixosHosts = f: builtins.listToAttrs (map (host: { name = host; value = f host; }) nixosHosts);
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

      # Imported, not callPackage'd: nixpkgs' callPackage wraps its result with makeOverridable,
      # and `override`/`overrideDerivation` beside the apps fail `nix flake check` (checkApp).
      apps = forSystems (system:
        let pkgs = pkgsFor system; in
        import ./pkgs/apps.nix {
          inherit (pkgs) lib writeShellApplication sparkfleet;
          fleetSpec = units.fleetSpec self fleet;
          inherit (units) profileBin;
        } // {
          # `nix run .#deploy -- .#dgx2`: deploy-rs's CLI from our nixpkgs (binary cache)
          deploy = {
            type = "app";
            program = "${pkgs.deploy-rs}/bin/deploy";
            meta.description = "deploy-rs: activate a host's profiles (deploy .#HOST)";
          };
        });

      nixosModules = {
        default = ./modules;
        fleet = ./modules/fleet.nix;
        storage = ./modules/storage.nix;
        staging = ./modules/staging.nix;
        lanes = ./modules/lanes.nix;
        view = ./modules/view.nix; # the head host's fleet view and its Prometheus (docs/fleet-ops.md)
        eval-only = ./modules/eval-only.nix;
      };

      nixosConfigurations = forNixosHosts (host: nixpkgs.lib.nixosSystem {
        system = hostSystem;
        modules = nixosModulesFor host;
      });

      # `deploy .#dgx2` (every profile) or `deploy .#dgx2.sparkfleet` (tooling + units only).
      # NixOS hosts take `system` too; DGX OS hosts only `sparkfleet` (os in hosts/fleet.toml).
      deploy.nodes = forHosts (host:
        let activate = (deployPkgsFor hostSystem).deploy-rs.lib.activate; in
        fleet.deployNode host {
          system = if isNixos host then activate.nixos self.nixosConfigurations.${host} else null;
          sparkfleet = activate.custom self.packages.${hostSystem}."sparkfleet-profile-${host}"
            "$PROFILE/bin/sparkfleet-activate";
        });

      checks = forSystems (system:
        let
          pkgs = pkgsFor system;
          # Force each host's toplevel derivation, as graham33/nixos-dgx-spark's
          # checks/dgx-spark-eval.nix does: the kernel, driver and every unit instantiated,
          # nothing built. DGX-OS-style hosts without a hardware-configuration.nix get
          # eval-only's stubs; the example host is evaluated as it stands.
          evalHost = host:
            let
              configuration = if builtins.elem host exampleHosts then self.nixosConfigurations.${host}
                else self.nixosConfigurations.${host}.extendModules { modules = [ self.nixosModules.eval-only ]; };
            in
            pkgs.runCommand "eval-${host}" {
              drvPath = builtins.unsafeDiscardStringContext configuration.config.system.build.toplevel.drvPath;
            } ''
              echo "$drvPath" > $out
            '';
        in
        {
          inherit (pkgs) sparkfleet;
          fleet-facts = pkgs.writeText "fleet-facts.json" (builtins.toJSON fleet.allFacts);
          # a Spark under NixOS (whatever os the inventory says today), asserted on
          nixos-units = pkgs.callPackage ./pkgs/check-nixos-units.nix {
            inherit (nixpkgs.lib) nixosSystem;
            modules = nixosModulesFor "dgx1";
          };
        }
        // builtins.listToAttrs (map (host: { name = "eval-${host}"; value = evalHost host; }) nixosHosts)
        # deployChecks builds every profile: only where the hosts' system builds (deploy-rs #389).
        // nixpkgs.lib.optionalAttrs (system == hostSystem)
          ((deployPkgsFor system).deploy-rs.lib.deployChecks self.deploy));

      # The staging and lane units booted in a NixOS VM with a stand-in lane command. It needs KVM,
      # and deploy-rs builds every check of the operator's system before each deploy (`nix flake
      # check`), so it is no check: CI's vm job builds it (`nix build .#hydraJobs.units-vm.x86_64-linux`);
      # `nix flake check` still evaluates it.
      hydraJobs.units-vm.x86_64-linux = import ./pkgs/units-vm-test.nix {
        pkgs = pkgsFor "x86_64-linux";
        modules = [ self.nixosModules.default ];
      };

      formatter = forSystems (system: (pkgsFor system).nixpkgs-fmt);
    };
}
