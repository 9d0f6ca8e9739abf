# The fleet as Nix sees it: hosts/fleet.toml + recipes/*/recipe.toml -> per-host facts.
#
# Builtins only (no nixpkgs), so it evaluates anywhere, tests run it with a bare
# `nix-instantiate --eval --strict --json`, and python/sparkfleet/fleet/hostfacts.py derives the
# same record from the same TOML: tests/nix/test_fleet_lib.py compares the two answers.
# What is computed here is placement (mounts, unit names, argv, deploy fields); the lane's
# env (TP_SIZE, DSV41_LAUNCHER, ...) is derived by the sparkfleet CLI at launch, never here.
let
  inherit (builtins)
    attrNames concatStringsSep elemAt filter foldl' fromJSON fromTOML genList hasAttr head
    length listToAttrs map match pathExists readDir readFile sort stringLength substring toJSON;

  # The knobs both readers agree on. Changing one is a change to hostfacts.py too (tests compare).
  constants = {
    unitPrefix = "sparkfleet";
    stagingUnit = "sparkfleet-stage";
    # sparkfleet.base.lock.LOCK_PATH, under the local hub (flock works on NVMe, not on the NAS)
    stageLock = ".locks/sparkfleet-stage.lock";
    nfsOptions = [
      "nfsvers=4.2" "ro" "noatime" "noauto" "_netdev"
      "x-systemd.automount" "x-systemd.idle-timeout=600" "x-systemd.mount-timeout=30s"
    ];
    localOptions = [ "noatime" "nofail" ];
    # A lane image load at activation (tens of GB into podman/docker) outlasts deploy-rs's 240 s.
    activationTimeout = 1800;
    # Starting a lane's ranks may pull its image first (tens of GB); readiness is not awaited.
    laneStartTimeout = 1800;
    confirmTimeout = 60;
    # The Sparks are aarch64; an operator's machine is often x86_64 without an aarch64 builder.
    # remoteBuild: the node builds its own profiles (substituting what the binary cache has), so
    # `deploy .#dgx2` works from any operator machine (deploy-rs README, generic settings).
    remoteBuild = true;
    profileOrder = [ "system" "sparkfleet" ];
    sparkfleetProfilePath = "/nix/var/nix/profiles/sparkfleet";
    defaultOs = "dgx-os";
    # systemd StateDirectory of the fleet services (hostfacts.SERVICE_STATE)
    serviceState = "/var/lib/sparkfleet";
  };

  # A path that reaches systemd-tmpfiles (local_hub, the receipt roots' parents) must not be split
  # or expanded there (whitespace, %, \, quotes: "/etc 0777 u g -" would be a rule of its own).
  # The pattern is the schemas' tmpfilesPath, read here too, so Nix refuses what `inventory check`
  # refuses even where nobody ran it; it is written in what ECMA-262 (the schema) and POSIX ERE
  # (builtins.match) read alike: a bracket of literal characters.
  schemaPattern = file: (fromJSON (readFile (../../python/sparkfleet/fleet/schema + "/${file}")))."$defs".tmpfilesPath.pattern;
  tmpfilesPath = pattern: key: path:
    if match pattern path != null then path
    else throw "${key}: ${toJSON path} is no path systemd-tmpfiles can read as one (absolute, no whitespace, control character, %, \\ or quote): fix it, then run `sparkfleet inventory check`";

  hex40 = s: match "[0-9a-f]{40}" s != null;
  digest = s: match "sha256:[0-9a-f]{64}" s != null;
  sha256hex = s: match "[0-9a-f]{64}" s != null;

  # Path arithmetic on absolute path strings, the way Python's PurePosixPath.parent does it.
  parentOf = p: let d = builtins.dirOf p; in if d == "" then "/" else d;

  # A pin record with the same fields as sparkfleet.fleet.inventory.Pin (plus the Nix hash when known).
  mkPin = name: doc:
    let
      kind = doc.kind;
      value =
        if kind == "hf" then doc.revision
        else if kind == "git" then doc.rev
        else if kind == "oci" then doc.digest or "" # a tag alone: unresolved (sparkfleet.fleet.inventory._pin)
        else doc.sha256;
      source =
        if kind == "oci" then doc.image
        else if kind == "url" then doc.url
        else doc.repo;
    in {
      inherit name kind value source;
      tag = doc.tag or null;
      commit = doc.commit or null;
      nixHash = doc.nix_hash or null;
      component = doc.component or null;
      manifest = doc.manifest or null;
      # git pins: where hosts clone it from (sparkfleet.fleet.inventory.Pin.clone_url): a mirror, else GitHub
      cloneUrl = if kind == "git" then doc.url or "https://github.com/${doc.repo}" else null;
      resolved =
        if kind == "oci" then digest value
        else if kind == "url" then sha256hex value
        else hex40 value;
    };

  mkHost = defaults: name: own:
    let
      m = defaults // own;
      need = k: if hasAttr k m then m.${k} else
        throw "hosts/fleet.toml: hosts.${name}: missing ${k} (set it on the host or in [defaults])";
    in {
      inherit name;
      address = need "address";
      sshUser = need "ssh_user";
      sshPort = m.ssh_port or 22;
      localHub = need "local_hub";
      # where local_hub was set, for errors that name it
      localHubKey = "hosts/fleet.toml: " + (if own ? local_hub then "hosts.${name}.local_hub" else "defaults.local_hub");
      nasHub = need "nas_hub";
      nasExport = m.nas_export or null;
      sshKey = m.ssh_key or null;
      os = m.os or constants.defaultOs;
      services = sort builtins.lessThan (m.services or [ ]);
    };

  # Receipt roots a lane's recipe declares ([launch].receipt_roots), each a tmpfiles-safe path.
  receiptRootsOf = name: recipe:
    let roots = (recipe.launch or { }).receipt_roots or [ ]; in
    genList (i: tmpfilesPath (schemaPattern "recipe.schema.json")
      "recipes/${name}/recipe.toml: launch.receipt_roots[${toString i}]" (elemAt roots i)) (length roots);

  uniq = xs: foldl' (acc: x: if builtins.elem x acc then acc else acc ++ [ x ]) [ ] xs;

  mkFleet = { fleet, recipes }:
    let
      defaults = fleet.defaults or { };
      hosts = builtins.mapAttrs (mkHost defaults) fleet.hosts;
      pins = builtins.mapAttrs mkPin (fleet.pins or { });
      laneNames = sort builtins.lessThan (attrNames recipes);
      lanes = listToAttrs (map (name: {
        inherit name;
        value = let r = recipes.${name}; in {
          inherit name;
          hosts = r.lane.hosts;
          # [gateway] replicas: copies of the recipe on disjoint host sets, the first lane.hosts
          # (sparkfleet.fleet.inventory.replica_sets); every copy's hosts stage the lane's pins.
          replicaHosts = builtins.concatLists ((r.gateway or { }).replicas or [ r.lane.hosts ]);
          # Node rank per host: [world].ranks when the recipe sets it, else the order of lane.hosts.
          ranks = listToAttrs (genList (i: {
            name = elemAt r.lane.hosts i;
            value = ((r.world or { }).ranks or { }).${elemAt r.lane.hosts i} or i;
          }) (length r.lane.hosts));
          receiptRoots = receiptRootsOf name r;
          models = map (m: m.pin) r.models;
          # The world shape with the launch code's defaults (sparkfleet.lane.recipe.world_of).
          world = let w = r.world or { }; in {
            tp = w.tp or (length r.lane.hosts);
            ep = w.ep or 1;
            pad = w.pad or 0;
            launcher = w.launcher or null;
          };
        };
      }) laneNames);
      # The lanes `host` serves as any copy (sparkfleet.fleet.inventory.Inventory.lanes_of).
      lanesOf = host: filter (l: builtins.elem host l.replicaHosts) (map (n: lanes.${n}) laneNames);

      hostOf = name:
        if hasAttr name hosts then hosts.${name}
        else throw "unknown host ${name} (known: ${concatStringsSep ", " (attrNames hosts)})";

      # The NAS holds the hub cache at nas_hub; the export is mounted at the hub's parent
      # (an HF_HOME-style folder), the local NVMe hub's parent is its mount point when it has one.
      mounts = h:
        [{
          where = parentOf h.nasHub;
          what = h.nasExport;
          fsType = "nfs";
          options = constants.nfsOptions;
          readOnly = true;
        }];

      # systemd-tmpfiles rules as fields (never a rule string to split again): the local hub and the
      # receipt roots' parents, owned by the user and the group of its name (DGX OS; NixOS names
      # the user's declared group, modules/storage.nix)
      tmpfiles = h:
        let
          dir = path: { type = "d"; inherit path; mode = "0755"; user = h.sshUser; group = h.sshUser; age = "-"; };
          receiptParents = uniq (builtins.concatMap (l: map parentOf l.receiptRoots) (lanesOf h.name));
        in
        [ (dir (tmpfilesPath (schemaPattern "fleet.schema.json") h.localHubKey h.localHub)) ]
        ++ map dir receiptParents;

      staging = h: {
        unit = constants.stagingUnit;
        argv = [ "sparkfleet" "stage" h.name "--here" "--json" ];
        lock = "${h.localHub}/${constants.stageLock}";
        user = h.sshUser;
        readWritePaths = [ h.localHub ];
        requiresMountsFor = [ h.localHub h.nasHub ];
      };

      headOf = l: head (filter (n: l.ranks.${n} == 0) l.hosts ++ [ (head l.hosts) ]);
      byRank = l: sort (a: b: l.ranks.${a} < l.ranks.${b}) l.hosts;

      # The fleet's head host: the one host that heads (rank 0) every lane. The fleet-wide services
      # that ask every lane run there (hosts/common.nix: the view and its Prometheus). null when
      # the lanes are headed from different hosts, or there is no lane: nothing names one then.
      heads = uniq (map (n: headOf lanes.${n}) laneNames);
      headHost = if length heads == 1 then head heads else null;

      # The lane unit lives on the lane's head (rank 0): `sparkfleet launch LANE --no-wait` starts
      # every rank (workers first, head last; receipts cleared and bind manifest written per rank
      # by the launch code) and returns without waiting for the model to load, so neither a NixOS
      # switch nor a deploy-rs activation blocks for the lane's boot; `sparkfleet status LANE`
      # reports readiness. `sparkfleet stop LANE` stops every rank.
      laneUnit = h: l: {
        lane = l.name;
        unit = "${constants.unitPrefix}-lane-${l.name}";
        hosts = byRank l;
        user = h.sshUser;
        startArgv = [ "sparkfleet" "launch" l.name "--no-wait" ];
        stopArgv = [ "sparkfleet" "stop" l.name ];
        timeoutStartSec = constants.laneStartTimeout;
        after = [ "${constants.stagingUnit}.service" "network-online.target" ];
        # One Spark, one GPU: two lanes headed here share this host and never serve together.
        conflicts = map (o: "${constants.unitPrefix}-lane-${o.name}.service")
          (filter (o: o.name != l.name && headOf o == h.name) (lanesOf h.name));
        # [watchdog] scope = "lane": the kit's controller stops every node when one stops, so the
        # lane always runs with its supervisor (sparkfleet.fleet.hostfacts.lane_scoped_watchdog)
        supervised = ((recipes.${l.name}.watchdog or { }).scope or "rank") == "lane";
      };

      # What the lane image carries in Env (only Env is inherited from a base image, and the TP4
      # adapters read the world shape from env): compared with sparkfleet.launch in the tests.
      imageEnv = laneName:
        let w = lanes.${laneName}.world; in
        (if w.launcher != null then { DSV41_LAUNCHER = w.launcher; } else { })
        // { TP_SIZE = toString w.tp; EP_SIZE = toString w.ep; DSV41_TP_PAD = toString w.pad; };

      # The fleet services a host runs (hosts.<h>.services): the gateway in front of the lanes with
      # a [gateway] table, and the registry; state in systemd's StateDirectory under serviceState.
      gatewayLanes = filter (n: recipes.${n} ? gateway) laneNames;
      serviceUnit = h: service: {
        inherit service;
        unit = "${constants.unitPrefix}-${service}";
        user = h.sshUser;
        argv = if service == "gateway" then [ "sparkfleet" "gateway" "run" ] else [ "sparkfleet" "registry" "serve" ];
        stateDir = if service == "gateway" then "${constants.serviceState}/gateway" else constants.serviceState;
        lanes = if service == "gateway" then gatewayLanes else [ ];
      };

      facts = name:
        let h = hostOf name; in {
          host = h.name;
          inherit (h) address sshUser sshPort localHub nasHub os;
          mounts = mounts h;
          tmpfiles = tmpfiles h;
          staging = staging h;
          lanes = map (laneUnit h) (filter (l: headOf l == h.name) (lanesOf h.name));
          services = map (serviceUnit h) h.services;
        };

      # deploy.nodes.<host>: `profiles` maps profile name -> activatable path (or null to leave out).
      # NixOS hosts get both profiles; DGX OS hosts (Nix on Ubuntu) only the sparkfleet profile.
      deployNode = name: profiles:
        let
          h = hostOf name;
          wanted = if h.os == "nixos" then constants.profileOrder else [ "sparkfleet" ];
          present = filter (p: hasAttr p profiles && profiles.${p} != null) wanted;
          profileFor = p: { path = profiles.${p}; user = "root"; }
            // (if p == "sparkfleet" then { profilePath = constants.sparkfleetProfilePath; } else { });
        in {
          hostname = h.address;
          sshUser = h.sshUser;
          user = "root";
          sshOpts = [ "-p" (toString h.sshPort) ] ++ (if h.sshKey != null then [ "-i" h.sshKey ] else [ ]);
          magicRollback = true;
          autoRollback = true;
          inherit (constants) activationTimeout confirmTimeout remoteBuild;
          profilesOrder = present;
          profiles = listToAttrs (map (p: { name = p; value = profileFor p; }) present);
        };

      # A build that needs a pin the log gave only in part stops, naming the pin and the fix.
      pinProblem = name: field:
        let
          p = pins.${name} or null;
          fix = "run `sparkfleet pins resolve ${name}` where the network is, then commit hosts/fleet.toml";
        in
        if p == null then "pin ${name} is not in hosts/fleet.toml"
        else if !p.resolved then "pin ${name} is unresolved (${p.kind} ${p.source} at '${p.value}'): ${fix}"
        else if field == "nixHash" && p.nixHash == null && p.kind != "url" then
          "pin ${name} has no nix_hash (needed for a fixed-output fetch): ${fix}"
        else null;
      requirePin = name: field:
        let problem = pinProblem name field; in
        if problem != null then throw problem else pins.${name};
    in {
      inherit hosts pins lanes constants facts deployNode requirePin pinProblem imageEnv headHost;
      hostNames = sort builtins.lessThan (attrNames hosts);
      lanesOf = host: map (l: l.name) (lanesOf host);
      allFacts = listToAttrs (map (n: { name = n; value = facts n; }) (attrNames hosts));
    };

  # Read an inventory from a fleet root (a path or an absolute path string).
  fromRoot = root:
    let
      r = toString root;
      recipesDir = r + "/recipes";
      entries = if pathExists recipesDir then readDir recipesDir else { };
      laneDirs = filter (n: entries.${n} == "directory" && pathExists "${recipesDir}/${n}/recipe.toml")
        (attrNames entries);
    in mkFleet {
      fleet = fromTOML (readFile (r + "/hosts/fleet.toml"));
      recipes = listToAttrs (map (n: {
        name = n;
        value = fromTOML (readFile "${recipesDir}/${n}/recipe.toml");
      }) laneDirs);
    };
in {
  inherit mkFleet fromRoot constants parentOf;
}
