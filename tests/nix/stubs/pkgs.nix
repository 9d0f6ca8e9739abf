# Stand-ins for the nixpkgs builders pkgs/*.nix call, where nixpkgs' lib has no such function.
# `lib` is nixpkgs' real lib (NIXPKGS_LIB), and lib's own functions are used wherever lib has them
# (callPackageWith/makeOverridable in nixpkgs-flake/default.nix, fetchers.withNormalizedHash here).
#
# What each stand-in keeps of the real one (nothing is built; every store path is the zero hash):
#   - the shape: every builder returns a derivation-shaped value (type = "derivation", drvPath,
#     outPath, name), which is what `nix flake check` and string
#     interpolation see;
#   - the string context of what it is built from (outPath carries it, as a real derivation's
#     closure holds its inputs): writeText keeps its text and the text's context;
#   - the argument set: dockerTools.pullImage, dockerTools.streamLayeredImage and
#     writeShellApplication are lambdas with the real formals, so Nix itself rejects an unknown
#     argument or a missing one exactly as the real function does. The formals are those of
#     nixpkgs pkgs/build-support/docker/default.nix and pkgs/build-support/trivial-builders
#     (see modules/README.md "What the tests stub").
# Inspection-only attributes a real derivation does not have: `kind`, `args` (the call's
# arguments), `script`/`env` (runCommand's), `text` is writeText's own (real: also an env var).
{ nixpkgsLib }:
let
  lib = import nixpkgsLib;
  trivial = import ./trivial-builders.nix;
  inherit (trivial) store mkDrv;
  # nixpkgs' pkgs.go.GOARCH for the two systems sparkfleet builds on
  defaultArchitecture = "arm64";
  pkgs = {
    inherit lib;
    # nixos/lib/testing (pkgs.testers.runNixOSTest): each node evaluated with nixpkgs' lib and the
    # NixOS option stand-ins (./nixos-options.nix) and its toplevel forced, so a node that would not
    # evaluate fails here; the test script itself runs only in a VM (CI, KVM).
    testers.runNixOSTest = { name, nodes, testScript, ... }:
      let
        # as nixos/lib/testing does: the node's name is its hostName, stateVersion the release's
        toplevel = nodeName: node: (lib.evalModules {
          modules = [
            ./nixos-options.nix
            node
            {
              _module.args = { inherit pkgs; modulesPath = "/nonexistent"; };
              networking.hostName = lib.mkDefault nodeName;
              system.stateVersion = lib.mkDefault lib.trivial.release;
            }
          ];
        }).config.system.build.toplevel;
        built = builtins.mapAttrs toplevel nodes;
      in
      mkDrv { name = "vm-test-run-${name}"; kind = "runNixOSTest"; inputs = [ testScript ]; extra = { nodes = built; inherit testScript; }; };
    dockerTools = {
      # lib.fetchers.withNormalizedHash { } and the formals of dockerTools.pullImage
      pullImage =
        let fixName = name: builtins.replaceStrings [ "/" ":" ] [ "-" "-" ] name; in
        lib.fetchers.withNormalizedHash { } (
          { imageName
          , imageDigest
          , outputHash
          , outputHashAlgo
          , os ? "linux"
          , arch ? defaultArchitecture
          , finalImageName ? imageName
          , finalImageTag ? "latest"
          , tlsVerify ? true
          , name ? fixName "docker-image-${finalImageName}-${finalImageTag}.tar"
          }@args:
          assert lib.assertMsg (lib.hasPrefix "sha256:" imageDigest) "pullImage: imageDigest ${imageDigest} is not sha256:...";
          mkDrv {
            inherit name;
            kind = "pullImage";
            extra = { inherit args imageDigest; imageName = finalImageName; imageTag = finalImageTag; };
          });
      # the formals of dockerTools.streamLayeredImage (a makeOverridable function, as there)
      streamLayeredImage = lib.makeOverridable (
        { name
        , tag ? null
        , fromImage ? null
        , contents ? [ ]
        , config ? { }
        , architecture ? defaultArchitecture
        , created ? "1970-01-01T00:00:01Z"
        , mtime ? "1970-01-01T00:00:01Z"
        , uid ? 0
        , gid ? 0
        , uname ? "root"
        , gname ? "root"
        , maxLayers ? 100
        , extraCommands ? ""
        , fakeRootCommands ? ""
        , enableFakechroot ? false
        , includeStorePaths ? true
        , includeNixDB ? false
        , passthru ? { }
        , meta ? { }
        , layeringPipeline ? null
        , debug ? false
        }@args:
        assert lib.assertMsg (maxLayers > 1)
          "the maxLayers argument of dockerTools.buildLayeredImage function must be greather than 1 (current value: ${toString maxLayers})";
        mkDrv {
          name = "stream-${baseNameOf name}";
          kind = "streamLayeredImage";
          inputs = [ fromImage contents extraCommands fakeRootCommands ];
          extra = passthru // {
            inherit args passthru meta;
            imageName = lib.toLower name;
            imageTag = if tag != null then tag else "0000000000000000000000000000000";
            isExe = true;
          };
        });
    };
    fetchFromGitHub = { owner, repo, rev ? null, tag ? null, hash ? null, sha256 ? null, name ? "source", ... }@args:
      mkDrv { name = "source"; kind = "fetchFromGitHub"; extra = { inherit args; }; };
    fetchurl = { url ? "", urls ? [ ], hash ? "", sha256 ? "", sha512 ? "", name ? baseNameOf (if url != "" then url else builtins.head urls), ... }@args:
      mkDrv { inherit name; kind = "fetchurl"; extra = { inherit args; }; };
    inherit (trivial) runCommand writeText writeTextFile writeScript buildEnv runtimeShell;
    # the formals of writeShellApplication
    writeShellApplication =
      { name
      , text
      , runtimeInputs ? [ ]
      , runtimeEnv ? null
      , meta ? { }
      , passthru ? { }
      , checkPhase ? null
      , excludeShellChecks ? [ ]
      , extraShellCheckFlags ? [ ]
      , bashOptions ? [ "errexit" "nounset" "pipefail" ]
      , inheritPath ? true
      , derivationArgs ? { }
      }@args:
      mkDrv {
        inherit name;
        kind = "writeShellApplication";
        inputs = [ text runtimeInputs ];
        extra = passthru // { inherit args text; meta = meta // { mainProgram = name; }; };
      };
    python3Packages = let py = {
      buildPythonApplication = args: mkDrv {
        name = "${args.pname}-${args.version}";
        kind = "buildPythonApplication";
        extra = { inherit args; inherit (args) meta; };
      };
      # a Python dependency as the tests compare it with pyproject.toml: "name==version"
      buildPythonPackage = args: "${builtins.replaceStrings [ "-" ] [ "_" ] args.pname}==${args.version}";
      # nixpkgs' own: the Python set's callPackage is lib.callPackageWith over pkgs and the set
      # (pkgs.newScope), so a result carries override/overrideDerivation and a missing argument is
      # lib's error naming it
      callPackage = lib.callPackageWith (pkgs // py);
      fetchPypi = args: { kind = "fetchPypi"; inherit args; };
      # what pkgs/smg.nix takes besides (python3Packages.callPackage reaches pkgs' attributes too)
      stdenv = { hostPlatform.system = "aarch64-linux"; cc.cc = { lib = "gcc-lib"; outputs = [ "out" "lib" ]; }; };
      autoPatchelfHook = "autoPatchelfHook";
      setproctitle = "setproctitle";
      grpcio = "grpcio";
      grpcio-health-checking = "grpcio-health-checking";
      setuptools-scm = "setuptools-scm";
      httpx = "httpx";
      python-dotenv = "python-dotenv";
      pyyaml = "pyyaml";
      matplotlib = "matplotlib";
      bcrypt = "bcrypt";
      numpy = "numpy";
      setuptools = "setuptools";
      wheel = "wheel";
      click = "click";
      jsonschema = "jsonschema";
      rich = "rich";
      huggingface-hub = "huggingface_hub";
      safetensors = "safetensors";
      prometheus-client = "prometheus_client";
    }; in py;
    git = "git";
    perl = "perl";
    python3 = {
      outPath = "${store}-python3";
      withPackages = f: "${store}-python3-with-${builtins.concatStringsSep "-" (f { installer = "installer"; })}";
    };
    proot = "${store}-proot";
    openssh = "openssh";
    rsync = "rsync";
    nixpkgs-fmt = mkDrv { name = "nixpkgs-fmt"; kind = "package"; extra.meta.mainProgram = "nixpkgs-fmt"; };
    # nixpkgs' own deploy-rs package (substituted from cache.nixos.org on a real machine)
    deploy-rs = mkDrv { name = "deploy-rs"; kind = "package"; extra.meta.mainProgram = "deploy"; };
    check-jsonschema = mkDrv { name = "check-jsonschema"; kind = "package"; };
    sparkfleet = mkDrv {
      name = "sparkfleet";
      kind = "package";
      extra = {
        meta.mainProgram = "sparkfleet";
        # passthru.smg (pkgs/sparkfleet.nix)
        smg = mkDrv { name = "smg-1.13.0"; kind = "package"; extra.meta.mainProgram = "smg"; };
      };
    };
    nginx = mkDrv { name = "nginx-1.26.3"; kind = "package"; extra.meta.mainProgram = "nginx"; };
    writeShellScriptBin = name: text:
      mkDrv { inherit name; kind = "writeShellScriptBin"; inputs = [ text ]; extra = { inherit text; meta.mainProgram = name; }; };
  };
in
pkgs
