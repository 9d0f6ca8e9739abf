# The NAS hub cache over NFS (read-only, automounted) and the node-local hub roots.
{ config, lib, ... }:
let
  cfg = config.sparkfleet.storage;
  facts = config.sparkfleet.facts;
  fleetLib = import ./lib/fleet.nix;
  nas = builtins.head facts.mounts;
  # facts.tmpfiles are rules as fields, owned by the user and the group of its name (DGX OS /
  # Ubuntu gives every user one). On NixOS a normal user's primary group is `users`: the rules name
  # the group the user is declared with here, so systemd-tmpfiles never meets an unknown group.
  userGroup = config.users.users.${facts.sshUser}.group or facts.sshUser;
  # As systemd.tmpfiles.settings (NixOS renders them to /etc/tmpfiles.d/10-sparkfleet.conf, each
  # field on its own), taken field by field from the facts: no rule string is built or split, and
  # modules/lib/fleet.nix has refused a path tmpfiles would split or expand, naming its key.
  tmpfiles = lib.listToAttrs (map (rule: {
    name = rule.path;
    value.${rule.type} = {
      inherit (rule) mode user age;
      group = if rule.group == facts.sshUser then userGroup else rule.group;
    };
  }) facts.tmpfiles);
in
{
  options.sparkfleet.storage = {
    enable = lib.mkEnableOption "the NAS hub cache mount (NFS, read-only) and the local hub roots";

    nas.device = lib.mkOption {
      type = lib.types.nullOr lib.types.str;
      default = nas.what;
      defaultText = lib.literalExpression "nas_export from hosts/fleet.toml";
      example = "nas.lan:/volume1/huggingface";
      description = "NFS export holding the Hugging Face cache; mounted at the parent of nas_hub.";
    };

    nas.extraOptions = lib.mkOption {
      type = lib.types.listOf lib.types.str;
      default = [ ];
      example = [ "rsize=1048576" ];
      description = "Mount options added to the read-only NFS defaults.";
    };

    local.device = lib.mkOption {
      type = lib.types.nullOr lib.types.str;
      default = null;
      example = "/dev/disk/by-label/hf-local";
      description = ''
        A dedicated NVMe filesystem for the local hub (by-uuid or by-label), mounted at
        `local.mountPoint`. Null when the local hub lives on the root filesystem.
      '';
    };

    local.mountPoint = lib.mkOption {
      type = lib.types.str;
      default = fleetLib.parentOf facts.localHub;
      defaultText = lib.literalExpression "parent of local_hub";
      description = "Where the local NVMe filesystem is mounted.";
    };

    local.fsType = lib.mkOption {
      type = lib.types.str;
      default = "ext4";
      description = "Filesystem type of `local.device`.";
    };
  };

  config = lib.mkIf cfg.enable {
    assertions = [
      {
        assertion = cfg.nas.device != null;
        message = ''
          sparkfleet.storage: no NFS export for ${facts.host}'s NAS hub (${facts.nasHub}).
          Set nas_export = "server:/path" in hosts/fleet.toml ([defaults] or [hosts.${facts.host}]).
        '';
      }
      {
        assertion = lib.hasPrefix "/" cfg.local.mountPoint;
        message = "sparkfleet.storage.local.mountPoint must be an absolute path";
      }
    ];

    boot.supportedFilesystems = [ "nfs" ];

    fileSystems = lib.mkMerge [
      (lib.mkIf (cfg.nas.device != null) {
        ${nas.where} = {
          device = cfg.nas.device;
          fsType = nas.fsType;
          options = nas.options ++ cfg.nas.extraOptions;
        };
      })
      (lib.mkIf (cfg.local.device != null) {
        ${cfg.local.mountPoint} = {
          device = cfg.local.device;
          fsType = cfg.local.fsType;
          options = fleetLib.constants.localOptions;
        };
      })
    ];

    systemd.tmpfiles.settings."10-sparkfleet" = tmpfiles;
  };
}
