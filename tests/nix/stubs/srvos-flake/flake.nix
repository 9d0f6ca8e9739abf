# A stand-in for nix-community/srvos: nixosModules.server sets what srvos's server module sets
# that a deploy depends on (nix trust for wheel, passwordless sudo for wheel, openssh), nothing else.
{
  # declared as the real flake declares it, so `inputs.<this>.inputs.nixpkgs.follows` names an input
  inputs.nixpkgs.url = "github:NixOS/nixpkgs";
  outputs = { self, ... }: {
    nixosModules.server = { lib, ... }: {
      nix.settings.trusted-users = [ "@wheel" ];
      security.sudo.wheelNeedsPassword = false;
      services.openssh.enable = true;
      users.mutableUsers = false;
    };
  };
}
