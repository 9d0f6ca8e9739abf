# The NixOS options the sparkfleet modules (and the host folders) set, declared the way NixOS
# declares them, so the modules evaluate with nixpkgs' lib alone (lib.evalModules) where full
# nixpkgs is unavailable. Declarations follow nixos/lib/systemd-unit-options.nix (unitOption merge,
# unitNameType, checkService's Type/Restart check, restartIfChanged/reloadIfChanged/reloadTriggers),
# nixos/modules/config/users-groups.nix (isNormalUser → group "users", the groups NixOS always
# declares, the "group is unset" assertion) and the docker/podman modules (their groups). Only what
# sparkfleet touches is declared: an option the modules set that NixOS does not have fails here as
# it would on a host; a wrong type or an unknown unit name fails the same way.
{ lib, config, ... }:
let
  inherit (lib) mkOption types;

  # nixos/lib/systemd-unit-options.nix: lists concatenate, scalars must agree
  unitOption = types.mkOptionType {
    name = "systemd option";
    merge = loc: defs:
      let defs' = lib.filterOverrides defs; in
      if builtins.isList (builtins.head defs').value
      then lib.concatMap (def:
        if builtins.isList def.value then def.value
        else throw "systemd option ${lib.showOption loc}: a mix of list and non-list definitions") defs'
      else lib.mergeEqualOption loc defs';
  };
  unitNameType = types.strMatching
    "[a-zA-Z0-9@%:_.\\-]+[.](service|socket|device|mount|automount|swap|target|path|timer|scope|slice)";
  oneOfChecked = name: values: cfg:
    !(cfg ? ${name}) || builtins.elem cfg.${name} values
    || throw "systemd: ${name} = ${toString cfg.${name}} is not one of ${lib.concatStringsSep ", " values}";
  checkService = cfg:
    oneOfChecked "Type" [ "exec" "simple" "forking" "oneshot" "dbus" "notify" "notify-reload" "idle" ] cfg
    && oneOfChecked "Restart" [ "no" "on-success" "on-failure" "on-abnormal" "on-abort" "always" ] cfg;

  unitOptions = {
    description = mkOption { type = types.singleLineStr; default = ""; };
    wants = mkOption { type = types.listOf unitNameType; default = [ ]; };
    requires = mkOption { type = types.listOf unitNameType; default = [ ]; };
    after = mkOption { type = types.listOf unitNameType; default = [ ]; };
    before = mkOption { type = types.listOf unitNameType; default = [ ]; };
    conflicts = mkOption { type = types.listOf unitNameType; default = [ ]; };
    wantedBy = mkOption { type = types.listOf unitNameType; default = [ ]; };
    unitConfig = mkOption { type = types.attrsOf unitOption; default = { }; };
    restartTriggers = mkOption { type = types.listOf types.unspecified; default = [ ]; };
    reloadTriggers = mkOption { type = types.listOf unitOption; default = [ ]; };
  };

  # What NixOS itself declares in users.groups (ids.gids) before any module adds one.
  builtinGroups = [ "root" "wheel" "users" "nogroup" "systemd-journal" "nixbld" "keys" "utmp" "tty" ];
in
{
  # services.prometheus (modules/view.nix), in a file of its own so that a test can swap in the real one
  imports = [ ./prometheus-options.nix ];

  options = {
    assertions = mkOption { type = types.listOf types.unspecified; default = [ ]; };
    warnings = mkOption { type = types.listOf types.str; default = [ ]; };
    networking.hostName = mkOption { type = types.str; default = "nixos"; };
    # nixos/modules/services/networking/firewall.nix
    networking.firewall.allowedTCPPorts = mkOption { type = types.listOf types.port; default = [ ]; };
    nixpkgs.overlays = mkOption { type = types.listOf types.unspecified; default = [ ]; };
    system.stateVersion = mkOption { type = types.str; };
    # nixos/modules/system/activation/top-level.nix: the system derivation; evaluating its drvPath
    # fails on a failed assertion (as there) and forces every unit, file and package it would hold
    system.build.toplevel = mkOption { type = types.unspecified; readOnly = true; };
    environment.systemPackages = mkOption { type = types.listOf types.package; default = [ ]; };
    environment.etc = mkOption {
      default = { };
      type = types.attrsOf (types.submodule {
        options.source = mkOption { type = types.path; };
        options.mode = mkOption { type = types.str; default = "symlink"; };
      });
    };
    boot.supportedFilesystems = mkOption { type = types.listOf types.str; default = [ ]; };
    boot.loader.grub.enable = mkOption { type = types.bool; default = true; };
    boot.loader.systemd-boot.enable = mkOption { type = types.bool; default = false; };
    boot.loader.efi.canTouchEfiVariables = mkOption { type = types.bool; default = false; };
    boot.initrd.availableKernelModules = mkOption { type = types.listOf types.str; default = [ ]; };
    nixpkgs.hostPlatform = mkOption { type = types.either types.str types.attrs; default = "x86_64-linux"; };
    virtualisation.memorySize = mkOption { type = types.ints.positive; default = 1024; };
    fileSystems = mkOption {
      default = { };
      type = types.attrsOf (types.submodule {
        options = {
          device = mkOption { type = types.nullOr types.str; default = null; };
          fsType = mkOption { type = types.str; default = "auto"; };
          options = mkOption { type = types.nonEmptyListOf types.str; default = [ "defaults" ]; };
        };
      });
    };
    systemd.tmpfiles.rules = mkOption { type = types.listOf types.str; default = [ ]; };
    # nixos/modules/system/boot/systemd/tmpfiles.nix: settings.<file>.<path>.<type> = { ... }
    systemd.tmpfiles.settings = mkOption {
      default = { };
      type = types.attrsOf (types.attrsOf (types.attrsOf (types.submodule {
        options = {
          type = mkOption { type = types.str; default = "d"; };
          mode = mkOption { type = types.str; default = "-"; };
          user = mkOption { type = types.str; default = "-"; };
          group = mkOption { type = types.str; default = "-"; };
          age = mkOption { type = types.str; default = "-"; };
          argument = mkOption { type = types.str; default = ""; };
        };
      })));
    };
    systemd.services = mkOption {
      default = { };
      # the unit's `path` rendered into environment.PATH as nixos/lib/systemd-lib.nix serviceConfig
      # does (makeBinPath + the sbin dirs, lib's own functions); NixOS's stage-2 default path
      # (coreutils, findutils, gnugrep, gnused, systemd, mkAfter) is not added here
      type = types.attrsOf (types.submodule ({ config, ... }: {
        options = unitOptions // {
          environment = mkOption {
            type = types.attrsOf (types.nullOr (types.oneOf [ types.str types.path types.package ]));
            default = { };
          };
          path = mkOption {
            type = types.listOf (types.oneOf [ types.package types.str ]);
            default = [ ];
          };
          serviceConfig = mkOption {
            type = types.addCheck (types.attrsOf unitOption) checkService;
            default = { };
          };
          restartIfChanged = mkOption { type = types.bool; default = true; };
          reloadIfChanged = mkOption { type = types.bool; default = false; };
          stopIfChanged = mkOption { type = types.bool; default = true; };
        };
        config.environment.PATH = lib.mkIf (config.path != [ ])
          "${lib.makeBinPath config.path}:${lib.makeSearchPathOutput "bin" "sbin" config.path}";
      }));
    };
    systemd.timers = mkOption {
      default = { };
      type = types.attrsOf (types.submodule {
        options = unitOptions // {
          timerConfig = mkOption { type = types.attrsOf unitOption; };
        };
      });
    };
    users.users = mkOption {
      default = { };
      type = types.attrsOf (types.submodule ({ config, ... }: {
        options = {
          isNormalUser = mkOption { type = types.bool; default = false; };
          isSystemUser = mkOption { type = types.bool; default = false; };
          group = mkOption { type = types.str; default = ""; };
          extraGroups = mkOption { type = types.listOf types.str; default = [ ]; };
          hashedPassword = mkOption { type = types.nullOr types.str; default = null; };
          openssh.authorizedKeys.keys = mkOption { type = types.listOf types.singleLineStr; default = [ ]; };
          openssh.authorizedKeys.keyFiles = mkOption { type = types.listOf types.path; default = [ ]; };
        };
        config.group = lib.mkIf config.isNormalUser (lib.mkDefault "users");
      }));
    };
    users.groups = mkOption {
      default = { };
      type = types.attrsOf (types.submodule { options.gid = mkOption { type = types.nullOr types.int; default = null; }; });
    };
    hardware.nvidia-container-toolkit.enable = mkOption { type = types.bool; default = false; };
    hardware.nvidia-container-toolkit.suppressNvidiaDriverAssertion = mkOption { type = types.bool; default = false; };
    virtualisation.docker.enable = mkOption { type = types.bool; default = false; };
    virtualisation.podman.enable = mkOption { type = types.bool; default = false; };
    virtualisation.podman.dockerCompat = mkOption { type = types.bool; default = false; };
    virtualisation.podman.dockerSocket.enable = mkOption { type = types.bool; default = false; };
    environment.variables = mkOption { type = types.attrsOf (types.either types.str (types.listOf types.str)); default = { }; };
    nix.settings.trusted-users = mkOption { type = types.listOf types.str; default = [ "root" ]; };
    security.sudo.wheelNeedsPassword = mkOption { type = types.bool; default = true; };
    services.openssh.enable = mkOption { type = types.bool; default = false; };
    users.mutableUsers = mkOption { type = types.bool; default = true; };
    users.allowNoPasswordLogin = mkOption { type = types.bool; default = false; };
  };

  config = {
    system.build.toplevel =
      let
        failed = map (a: a.message) (builtins.filter (a: !a.assertion) config.assertions);
        contents = builtins.toJSON {
          inherit (config.systemd) services timers;
          tmpfiles = config.systemd.tmpfiles;
          etc = lib.mapAttrs (_: e: "${e.source}") config.environment.etc;
          packages = map (p: "${p}") config.environment.systemPackages;
          inherit (config) fileSystems;
          # the real toplevel holds Prometheus's unit, whose ExecStart names the prometheus.yml
          # written from these (so a wrong value fails the toplevel there too)
          prometheus = lib.optionalAttrs config.services.prometheus.enable {
            inherit (config.services.prometheus) checkConfig globalConfig ruleFiles scrapeConfigs;
          };
        };
        name = "nixos-system-${config.networking.hostName}-${config.system.stateVersion}";
        path = "/nix/store/${builtins.substring 0 32 (builtins.hashString "sha256" contents)}-${name}";
      in
      if failed != [ ] then throw "Failed assertions:\n${lib.concatMapStrings (m: "- ${m}\n") failed}"
      else { type = "derivation"; inherit name; outPath = path; drvPath = "${path}.drv"; };
    users.groups = lib.genAttrs builtinGroups (_: { })
      // lib.optionalAttrs config.virtualisation.docker.enable { docker = { }; }
      // lib.optionalAttrs config.virtualisation.podman.enable { podman = { }; };
    # podman's module: docker compat puts podman where docker's CLI would be
    assertions = [{
      assertion = config.virtualisation.podman.dockerCompat -> !config.virtualisation.docker.enable;
      message = "Option dockerCompat conflicts with docker";
    }]
    # users-groups.nix: immutable users and nobody in wheel (or root) can log in = locked out
    ++ [{
      assertion = !config.users.mutableUsers -> config.users.allowNoPasswordLogin
        || lib.any (x: x) (lib.mapAttrsToList (name: u:
          (name == "root" || u.group == "wheel" || lib.elem "wheel" u.extraGroups)
          && (u.hashedPassword != null || u.openssh.authorizedKeys.keys != [ ] || u.openssh.authorizedKeys.keyFiles != [ ]))
          config.users.users);
      message = "Neither the root account nor any wheel user has a password or SSH authorized key.";
    }]
    # users-groups.nix: every user needs a group that exists
    ++ lib.mapAttrsToList (name: user: {
      assertion = user.group != "" && config.users.groups ? ${user.group};
      message = "users.users.${name}.group ${if user.group == "" then "is unset" else "= ${user.group}: no such group"}";
    }) config.users.users;
  };
}
