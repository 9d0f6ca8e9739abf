# What every Spark's NixOS configuration shares. hosts/<name>/default.nix only names the host:
# everything sparkfleet places there (NAS mount, hub roots, staging timer, the lanes it heads)
# follows from hosts/fleet.toml. Only hosts with os = "nixos" in hosts/fleet.toml get a NixOS
# configuration (flake.nix); today's DGX OS hosts take the deploy-rs `sparkfleet` profile alone.
#
# Hardware is graham33/nixos-dgx-spark's module (flake input; NVIDIA kernel + open driver,
# container toolkit with CDI, allowUnfree, unlimited RDMA memlock, podman with docker compat);
# ssh, sudo and Nix trust are nix-community/srvos's server module (openssh with keys only,
# passwordless sudo for wheel, trusted-users = @wheel). What the machine adds (boot loader, root
# filesystem) comes from hosts/<name>/hardware-configuration.nix, generated on it
# (nixos-generate-config); CI evaluates with modules/eval-only.nix in its place.
host:
{ config, lib, ... }:
let
  hardware = ./. + "/${host}/hardware-configuration.nix";
  user = config.sparkfleet.facts.sshUser;
  isHead = config.sparkfleet.headHost == host;
in
{
  imports = lib.optional (builtins.pathExists hardware) hardware;

  hardware.dgx-spark.enable = true;

  networking.hostName = host;
  sparkfleet = {
    inherit host;
    storage.enable = true;
    staging.enable = true;
    lanes.enable = true;
    # the gateway / registry units, where hosts/fleet.toml gives this host `services`
    services.enable = true;
    # the DGX Spark module runs podman (docker compat on); docker beside it would conflict
    lanes.runtime = "podman";
    # the fleet view and its Prometheus on the host heading every lane (modules/lib/fleet.nix
    # headHost); where the lanes have different heads, set both in one host's folder
    view.enable = lib.mkDefault isHead;
    view.prometheus.enable = lib.mkDefault isHead;
  };
  # The staging and lane units run as the inventory's ssh_user. deploy-rs connects as that user:
  # wheel makes it a trusted Nix user and lets it sudo to activate (srvos server module).
  # Its keys: hosts/authorized_keys (one public key per line, the operators' and CI's deploy keys);
  # srvos makes users immutable and reads keys only from /etc/ssh/authorized_keys.d, and NixOS
  # refuses to build a host nobody can log into.
  users.users.${user} = {
    isNormalUser = true;
    extraGroups = [ "wheel" ] ++ lib.optional (config.sparkfleet.lanes.runtime == "docker") "docker";
    openssh.authorizedKeys.keyFiles = lib.optional (builtins.pathExists ./authorized_keys) ./authorized_keys;
  };
  # The release a host was first installed with (NixOS keeps state formats by it): no Spark runs
  # NixOS yet, so the first ones start on the flake's 26.05. Never change it on an installed host.
  system.stateVersion = "26.05";
}
