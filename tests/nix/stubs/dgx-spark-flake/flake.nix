# A stand-in for graham33/nixos-dgx-spark: nixosModules.dgx-spark declares the option it has
# (hardware.dgx-spark.enable) and sets, when enabled, the options of that module that sparkfleet's
# modules meet (the container toolkit, podman with docker compat). The kernel, driver and
# firmware parts need full nixpkgs and are evaluated only in CI (checks.<system>.eval-<host>).
{
  # declared as the real flake declares it, so `inputs.<this>.inputs.nixpkgs.follows` names an input
  inputs.nixpkgs.url = "github:NixOS/nixpkgs";
  outputs = { self, ... }: {
    nixosModules.dgx-spark = { config, lib, ... }: {
      options.hardware.dgx-spark.enable = lib.mkEnableOption "DGX Spark hardware support";
      config = lib.mkIf config.hardware.dgx-spark.enable {
        hardware.nvidia-container-toolkit.enable = true;
        virtualisation.podman = { enable = true; dockerCompat = true; };
      };
    };
  };
}
