# All sparkfleet NixOS modules. Each is off until enabled; hosts/dgx*/ turn them on.
{
  imports = [ ./fleet.nix ./storage.nix ./staging.nix ./lanes.nix ./services.nix ./view.nix ];
}
