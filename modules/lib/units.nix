# systemd unit specs for one host, from the fleet facts (modules/lib/fleet.nix). Builtins only.
#
# One spec, two renderings: the NixOS modules turn a spec into systemd.services / timers options,
# and `render` turns it into unit-file text for the deploy-rs `sparkfleet` profile, whose
# activation installs the files on hosts without NixOS (DGX OS). Hardening lives here once.
let
  inherit (builtins) attrNames concatStringsSep concatMap isBool isList isInt isFloat listToAttrs map
    replaceStrings toString;

  # The deploy-rs `sparkfleet` profile (modules/lib/fleet.nix constants.sparkfleetProfilePath):
  # every deployed host, NixOS or DGX OS, has the tooling here.
  profileBin = "${(import ./fleet.nix).constants.sparkfleetProfilePath}/bin/sparkfleet";
  # On NixOS the modules put the package on the system path (environment.systemPackages).
  systemBin = "/run/current-system/sw/bin/sparkfleet";
  # The PATH systemd gives a unit that sets none (systemd.exec(5), "Environment variables in
  # spawned processes", on a merged-/usr host as DGX OS is).
  systemdDefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin";

  # systemd's Exec quoting: each argument double-quoted, `\` and `"` escaped, `$` and `%` doubled
  # so systemd neither expands variables nor specifiers inside our argv.
  quoteArg = a: "\"" + replaceStrings [ "\\" "\"" "$" "%" ] [ "\\\\" "\\\"" "$$" "%%" ] a + "\"";
  execLine = argv: concatStringsSep " " (map quoteArg argv);

  # The staging unit reads the NAS and writes only the node's hub cache.
  stagingHardening = localHub: {
    ProtectSystem = "strict";
    ProtectHome = "read-only";
    ReadWritePaths = [ localHub ];
    PrivateTmp = true;
    PrivateDevices = true;
    NoNewPrivileges = true;
    ProtectKernelTunables = true;
    ProtectKernelModules = true;
    ProtectKernelLogs = true;
    ProtectControlGroups = true;
    ProtectClock = true;
    ProtectHostname = true;
    RestrictNamespaces = true;
    RestrictRealtime = true;
    RestrictSUIDSGID = true;
    LockPersonality = true;
    # No MemoryDenyWriteExecute: libffi closures (ctypes/cffi in the hashing and hub libraries)
    # need writable+executable pages.
    SystemCallArchitectures = "native";
    CapabilityBoundingSet = "";
    # AF_NETLINK: glibc's getaddrinfo (AI_ADDRCONFIG, used by ssh) asks the kernel for addresses.
    RestrictAddressFamilies = [ "AF_UNIX" "AF_INET" "AF_INET6" "AF_NETLINK" ];
    UMask = "0022";
  };

  # The lane unit drives the container runtime's CLI and ssh to the workers; the containers are
  # the daemon's (docker) or the rootful podman service's (NixOS: CONTAINER_HOST, modules/lanes.nix),
  # so this unit needs no capability, no setuid helper and no device of its own. The GPU and RDMA
  # devices stay allowed for a serve process started in it. It writes only its node's records
  # beside the local hub (inventory.state_dir_of: the hub's parent); ~/.ssh is read.
  laneHardening = localHub: {
    # RDMA registers (pins) the model's memory: a rootless runtime or the process runtime inherit
    # this unit's limit, and the default 8 MiB makes ibv_reg_mr fail.
    LimitMEMLOCK = "infinity";
    ProtectSystem = "full";
    PrivateTmp = true;
    NoNewPrivileges = true;
    ProtectKernelTunables = true;
    ProtectKernelModules = true;
    ProtectKernelLogs = true;
    ProtectControlGroups = true;
    RestrictRealtime = true;
    LockPersonality = true;
    SystemCallArchitectures = "native";
    DevicePolicy = "closed";
    DeviceAllow = [
      "char-nvidiactl rw" "char-nvidia-caps rw" "char-nvidia-frontend rw" "char-nvidia-uvm rw"
      "char-infiniband_verbs rw" "char-infiniband_mad rw" "/dev/infiniband/rdma_cm rw"
    ];
    RestrictAddressFamilies = [ "AF_UNIX" "AF_INET" "AF_INET6" "AF_NETLINK" ];
    CapabilityBoundingSet = "";
    ProtectHome = "read-only";
    # "-": a host whose hub folder is not there yet still starts the unit (systemd.exec(5))
    ReadWritePaths = [ "-${builtins.dirOf localHub}" ];
    # python, ssh and the runtime's CLI: what a system service calls (systemd.exec(5))
    SystemCallFilter = [ "@system-service" ];
    SystemCallErrorNumber = "EPERM";
  };

  # The fleet services (the gateway, the registry): network servers that write only their own
  # StateDirectory; the gateway reads ~/.ssh (it installs its key on the lanes' hosts over ssh).
  serviceHardening = {
    ProtectSystem = "full";
    ProtectHome = "read-only";
    PrivateTmp = true;
    PrivateDevices = true;
    NoNewPrivileges = true;
    ProtectKernelTunables = true;
    ProtectKernelModules = true;
    ProtectKernelLogs = true;
    ProtectControlGroups = true;
    RestrictRealtime = true;
    RestrictSUIDSGID = true;
    LockPersonality = true;
    SystemCallArchitectures = "native";
    CapabilityBoundingSet = "";
    RestrictAddressFamilies = [ "AF_UNIX" "AF_INET" "AF_INET6" "AF_NETLINK" ];
    UMask = "0077";
  };

  # `systemd-escape --path` for the paths sparkfleet mounts (letters, digits, / _ . : -).
  escapePath = path:
    let
      trimmed = builtins.head (builtins.match "/*(.*[^/])/*" path);
    in
    if builtins.match "[A-Za-z0-9/_.:-]+" path == null || builtins.match "(.*/)?\\.[^/]*" path != null then
      throw "units.nix: cannot name a mount unit for ${path} (only letters, digits, / _ . : - and no hidden components)"
    else replaceStrings [ "/" ] [ "-" ] (replaceStrings [ "-" ] [ "\\x2d" ] trimmed);

  # On hosts without NixOS (no fileSystems), the NAS hub is a mount + automount unit pair that
  # carries what the fstab options say on NixOS (x-systemd.* and _netdev are fstab-only).
  nasMountSpecs = m:
    let name = escapePath m.where; in
    if m.what == null then { } else {
      "${name}.mount" = {
        Unit = {
          Description = "sparkfleet: NAS hub cache (read-only NFS) at ${m.where}";
          Wants = [ "network-online.target" ];
          After = [ "network-online.target" ];
        };
        Mount = {
          What = m.what;
          Where = m.where;
          Type = m.fsType;
          Options = concatStringsSep "," (builtins.filter
            (o: builtins.match "(x-systemd\\..*|noauto|_netdev)" o == null) m.options);
          TimeoutSec = "30s";
        };
      };
      "${name}.automount" = {
        Unit.Description = "sparkfleet: automount of the NAS hub cache at ${m.where}";
        Automount = { Where = m.where; TimeoutIdleSec = "600"; };
        Install.WantedBy = [ "remote-fs.target" ];
      };
    };

  # What a unit reads of the fleet root, and nothing more: hosts/fleet.toml plus the named lanes'
  # recipe.toml, copied to the store by content (builtins.path). Two trees that differ only outside
  # hosts/fleet.toml and those recipes give the same store path, so a README-only commit renders
  # byte-identical units and restarts nothing; a lane's unit changes when its own recipe does.
  specRoot = fleetRoot: name: lanes:
    let
      root = toString fleetRoot;
      rel = p: builtins.substring (builtins.stringLength root + 1) (-1) p;
      keep = [ "hosts" "hosts/fleet.toml" "recipes" ]
        ++ concatMap (l: [ "recipes/${l}" "recipes/${l}/recipe.toml" ]) lanes;
    in
    builtins.path {
      name = "sparkfleet-${name}-spec";
      path = fleetRoot;
      filter = p: _type: builtins.elem (rel (toString p)) keep;
    };

  # The whole fleet's spec (hosts/fleet.toml + every recipe): every deploy profile carries it, and
  # the flake's apps name it as SPARKFLEET_REMOTE_ROOT, so an operator's command reaches a host's
  # copy exactly when that host was deployed from the same fleet file and recipes.
  fleetSpec = fleetRoot: fleet: specRoot fleetRoot "fleet" (builtins.attrNames fleet.lanes);

  # specs { facts, sparkfleet, fleetRoot, stagedLanes?, stagingRoot?, remote?, schedule?,
  #         runtimeGroups?, autostart?, withMounts? }
  #   facts:      fleet.facts <host>
  #   sparkfleet: absolute path of the sparkfleet executable the units run: a path that stays the
  #               same across deploys (the deploy profile's bin/ on DGX OS, the system path on
  #               NixOS), so a new build of the tooling alone changes no unit
  #   remote:     SPARKFLEET_REMOTE, how the lane's head starts sparkfleet on its workers over ssh
  #               (default: the deploy profile's bin/, which every deployed host has)
  #   fleetRoot:  the fleet root the inventory comes from (the flake source); each unit gets its
  #               own filtered copy (specRoot) as SPARKFLEET_ROOT
  #   stagedLanes: every lane this host serves in (fleet.lanesOf host): what its staging unit reads
  #   stagingRoot: SPARKFLEET_ROOT of the staging unit. Callers give a stable path that links to
  #               specRoot of stagedLanes (the profile's share/, /etc on NixOS): the timer then
  #               stages what the deployed recipes say, and a recipe edit changes no staging unit.
  #   withMounts: also the NAS mount units (hosts without NixOS; on NixOS fileSystems does it)
  #   gatewayPath: PATH of the gateway unit, where `gateway run` finds nginx and smg (the deploy
  #               profile's bin/ first); null leaves PATH to the caller (NixOS: the unit's `path`)
  specs = { facts, sparkfleet, fleetRoot, stagedLanes ? map (l: l.lane) facts.lanes
          , stagingRoot ? specRoot fleetRoot "stage-${facts.host}" stagedLanes, remote ? profileBin
          , schedule ? "daily", runtimeGroups ? [ "docker" ], autostart ? null, withMounts ? false
          , gatewayPath ? null }:
    let
      withBin = argv: [ sparkfleet ] ++ builtins.tail argv;
      env = root: [ "SPARKFLEET_ROOT=${root}" "SPARKFLEET_REMOTE=${remote}" "PYTHONUNBUFFERED=1" ];
      st = facts.staging;
      stage = {
        "${st.unit}.service" = {
          Unit = {
            Description = "sparkfleet: stage ${facts.host}'s lanes from the NAS to local NVMe";
            Wants = [ "network-online.target" ];
            After = [ "network-online.target" ];
            RequiresMountsFor = st.requiresMountsFor;
          };
          Service = {
            Type = "oneshot";
            User = st.user;
            Environment = env stagingRoot;
            # The CLI takes ${st.lock} itself, so a timer run and a manual run never overlap.
            ExecStart = execLine (withBin st.argv);
            Nice = 10;
            IOSchedulingClass = "idle";
            # exit 75: another run holds the stage lock; that is not this unit failing
            SuccessExitStatus = [ "75" ];
          } // stagingHardening facts.localHub;
        };
        "${st.unit}.timer" = {
          Unit.Description = "sparkfleet: periodic staging on ${facts.host}";
          Timer = { OnCalendar = schedule; RandomizedDelaySec = "30m"; Persistent = true; };
          Install.WantedBy = [ "timers.target" ];
        };
      };
      lane = l: {
        name = "${l.unit}.service";
        value = {
          Unit = {
            Description = "sparkfleet: lane ${l.lane} (${concatStringsSep ", " l.hosts})";
            Wants = [ "network-online.target" ];
            After = l.after;
            Conflicts = l.conflicts;
            RequiresMountsFor = [ facts.localHub facts.nasHub ];
          };
          Service = {
            Type = "oneshot";
            RemainAfterExit = true;
            User = l.user;
            SupplementaryGroups = runtimeGroups;
            Environment = env (specRoot fleetRoot "lane-${l.lane}" [ l.lane ]);
            ExecStart = execLine (withBin l.startArgv);
            ExecStop = execLine (withBin l.stopArgv);
            TimeoutStartSec = toString l.timeoutStartSec;
            TimeoutStopSec = "300";
          } // laneHardening facts.localHub;
        } // (if autostart == l.lane then { Install.WantedBy = [ "multi-user.target" ]; } else { });
      };
      # hosts.<h>.services (fleet.nix serviceUnit): long-running, restarted on failure, at boot.
      # The gateway reads fleet.toml + the [gateway] lanes' recipes (its own spec root, so a recipe
      # edit of another lane leaves it alone); the registry reads only its config.yml.
      service = s: {
        name = "${s.unit}.service";
        value = {
          Unit = {
            Description = if s.service == "gateway"
              then "sparkfleet: the gateway (smg behind nginx) in front of ${concatStringsSep ", " s.lanes}"
              else "sparkfleet: the fleet registry (docker-registry, TLS from the fleet CA)";
            Wants = [ "network-online.target" ];
            After = [ "network-online.target" ];
          };
          Service = {
            Type = "simple";
            User = s.user;
            Environment = if s.service == "gateway"
              then env (specRoot fleetRoot "gateway" s.lanes) ++ [ "SPARKFLEET_GATEWAY_STATE=${s.stateDir}" ]
                ++ (if gatewayPath == null then [ ] else [ "PATH=${gatewayPath}" ])
              else [ "SPARKFLEET_STATE_DIR=${s.stateDir}" "PYTHONUNBUFFERED=1" ];
            ExecStart = execLine (withBin s.argv);
            Restart = "on-failure";
            RestartSec = "5";
            # systemd makes it (0700, owned by User) before the start
            StateDirectory = builtins.substring 9 (-1) s.stateDir;
            StateDirectoryMode = "0700";
          } // serviceHardening;
          Install.WantedBy = [ "multi-user.target" ];
        };
      };
    in
    stage // listToAttrs (map lane facts.lanes) // listToAttrs (map service (facts.services or [ ]))
    // (if withMounts then builtins.foldl' (acc: m: acc // nasMountSpecs m) { } facts.mounts else { });

  # INI text of one spec: sections in a fixed order; a list becomes one line per item (systemd
  # accumulates After=, DeviceAllow=, ReadWritePaths=, ... across lines); Environment= is quoted.
  value = k: v:
    if isBool v then (if v then "true" else "false")
    else if isInt v || isFloat v then toString v
    else if k == "Environment" then quoteArg v
    else v;
  section = name: attrs:
    if attrs == { } then "" else
    "[${name}]\n" + concatStringsSep "" (concatMap (k:
      let v = attrs.${k}; in
      map (item: "${k}=${value k item}\n") (if isList v then v else [ v ])) (attrNames attrs));
  render = spec:
    concatStringsSep "\n" (builtins.filter (s: s != "") (map (n: section n (spec.${n} or { }))
      [ "Unit" "Service" "Mount" "Automount" "Timer" "Install" ]));

  renderAll = args: builtins.mapAttrs (_: render) (specs args);

  # What the deploy-rs `sparkfleet` profile of `host` ships (pkgs/sparkfleet-profile.nix): unit
  # files that run the profile's own bin/ and a stable stage-root link inside the profile.
  # `fleet` is (import ./fleet.nix).fromRoot fleetRoot.
  profileUnits = { fleet, host, fleetRoot, profilePath ? fleet.constants.sparkfleetProfilePath }:
    let stagedLanes = fleet.lanesOf host; in
    {
      stageRoot = specRoot fleetRoot "stage-${host}" stagedLanes;
      fleetRoot = fleetSpec fleetRoot fleet;
      files = renderAll {
        facts = fleet.facts host;
        sparkfleet = "${profilePath}/bin/sparkfleet";
        remote = "${profilePath}/bin/sparkfleet";
        inherit fleetRoot stagedLanes;
        stagingRoot = "${profilePath}/share/sparkfleet/stage-root";
        withMounts = true;
        # the profile links nginx and smg into its bin/ (sparkfleet-profile.nix); then systemd's
        # own default PATH, so the rest of the host's tools stay where they were
        gatewayPath = "${profilePath}/bin:${systemdDefaultPath}";
      };
    };

  # The same spec as NixOS systemd.services.<name> / systemd.timers.<name> option values.
  # builtins.match drops string context: the value takes the entry's back, so a store path named
  # in Environment= (the unit's spec root) stays a dependency of the unit
  envAttrs = list: listToAttrs (map (kv:
    let m = builtins.match "([^=]+)=(.*)" kv; in
    { name = builtins.elemAt m 0; value = builtins.elemAt m 1 + builtins.substring 0 0 kv; }) list);
  toNixosService = spec: {
    description = spec.Unit.Description;
    wants = spec.Unit.Wants or [ ];
    after = spec.Unit.After or [ ];
    conflicts = spec.Unit.Conflicts or [ ];
    unitConfig.RequiresMountsFor = spec.Unit.RequiresMountsFor or [ ];
    environment = envAttrs (spec.Service.Environment or [ ]);
    serviceConfig = removeAttrs spec.Service [ "Environment" ];
    wantedBy = (spec.Install or { }).WantedBy or [ ];
  };
  toNixosTimer = spec: {
    description = spec.Unit.Description;
    timerConfig = spec.Timer;
    wantedBy = (spec.Install or { }).WantedBy or [ ];
  };
in {
  inherit specs specRoot fleetSpec profileBin systemBin systemdDefaultPath profileUnits render renderAll execLine quoteArg escapePath stagingHardening laneHardening serviceHardening toNixosService
    toNixosTimer envAttrs;
}
