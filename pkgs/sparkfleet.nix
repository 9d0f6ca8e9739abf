# The sparkfleet CLI from the repo's Python package (pyproject.toml), with the tools it drives.
{ lib, python3Packages, git, openssh, rsync, src }:
let
  project = (builtins.fromTOML (builtins.readFile (src + "/pyproject.toml"))).project;
  # the gateway (pyproject's `gateway` extra): `gateway run` imports smg in the CLI's own Python
  smg = python3Packages.callPackage ./smg.nix { };
in
python3Packages.buildPythonApplication {
  pname = project.name;
  inherit (project) version;
  pyproject = true;

  src = lib.fileset.toSource {
    root = src;
    fileset = lib.fileset.unions [ (src + "/pyproject.toml") (src + "/README.md") (src + "/python") ];
  };

  build-system = [ python3Packages.setuptools ];
  # The same list as pyproject.toml's dependencies plus its `gateway` extra (tests/nix/test_pkgs.py
  # compares them).
  dependencies = with python3Packages; [
    click jsonschema rich huggingface-hub safetensors matplotlib numpy prometheus-client
    (callPackage ./tool-eval-bench.nix { })
    smg
    bcrypt # the registry's push login (registry init hashes it for htpasswd)
  ];
  # pyproject asks huggingface_hub>=1.0 (the trees/ + shared-blob layout); a release branch may
  # carry an older one. The staging code reads the cache layout itself, so relax the bound
  # rather than vendor a second hub client; the import check below still runs.
  pythonRelaxDeps = [ "huggingface_hub" ];

  # ssh for remote hosts, rsync as a transport, git for `pins resolve` and the kit checkouts `stage` clones.
  makeWrapperArgs = [ "--prefix" "PATH" ":" (lib.makeBinPath [ git openssh rsync ]) ];

  # The suite needs network namespaces, sshd and FUSE; CI runs it with `make test`.
  doCheck = false;
  pythonImportsCheck = [ "sparkfleet" "sparkfleet.cli" "sparkfleet.fleet.hostfacts" "sparkfleet.pins" ];

  # the gateway units put smg's bin/ on their PATH (modules/services.nix, sparkfleet-profile.nix)
  passthru = { inherit smg; };

  meta = {
    description = project.description;
    mainProgram = "sparkfleet";
    platforms = lib.platforms.linux;
  };
}
