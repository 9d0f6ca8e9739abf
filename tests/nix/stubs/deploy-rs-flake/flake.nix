# A stand-in for the deploy-rs flake input: activate.{nixos,custom} return store-path-shaped
# strings named after what they activate; deployChecks returns deploy-rs's two check names.
{
  outputs = { self }:
    let
      store = "/nix/store/00000000000000000000000000000000";
      forSystem = {
        activate = {
          nixos = cfg: "${store}-activatable-nixos-system-${cfg.config.networking.hostName}";
          custom = base: activate: "${store}-activatable-${base.name}";
        };
        deployChecks = deploy: { deploy-schema = deploy; deploy-activate = deploy; };
      };
    in
    {
      lib = { aarch64-linux = forSystem; x86_64-linux = forSystem; };
    };
}
