# A stand-in for the deploy-rs flake input, shaped like deploy-rs's own flake: overlays.default
# puts `deploy-rs = { deploy-rs; lib }` into nixpkgs, and lib.activate.{nixos,custom} return
# store-path-shaped strings that name what they activate AND which deploy-rs package supplies
# activate-rs (final.deploy-rs.deploy-rs), so a test sees whether nixpkgs' cached one is used.
# deployChecks returns deploy-rs's two check names.
{
  outputs = { self }:
    let
      store = "/nix/store/00000000000000000000000000000000";
    in
    {
      overlays.default = final: _prev: {
        deploy-rs = {
          deploy-rs = { type = "derivation"; name = "deploy-rs-built-from-flake"; };
          lib = {
            activate = {
              nixos = cfg: "${store}-activatable-nixos-system-${cfg.config.networking.hostName}+${final.deploy-rs.deploy-rs.name}";
              custom = base: activate: "${store}-activatable-${base.name}+${final.deploy-rs.deploy-rs.name}";
            };
            deployChecks = deploy: { deploy-schema = deploy; deploy-activate = deploy; };
          };
        };
      };
    };
}
