# Stand-ins for the nixpkgs functions pkgs/*.nix call: each returns its arguments, so a test can
# read what a derivation would be built from without nixpkgs. `lib` is nixpkgs' real lib.
{ nixpkgsLib }:
let
  lib = import nixpkgsLib;
  store = "/nix/store/00000000000000000000000000000000";
in
{
  inherit lib;
  dockerTools = {
    pullImage = args: { kind = "pullImage"; inherit args; outPath = "${store}-docker-image-base.tar"; };
    streamLayeredImage = args: { kind = "streamLayeredImage"; inherit args; };
  };
  fetchFromGitHub = args: { kind = "fetchFromGitHub"; inherit args; outPath = "${store}-source"; };
  fetchurl = args: { kind = "fetchurl"; inherit args; name = baseNameOf args.url; outPath = "${store}-${baseNameOf args.url}"; };
  runCommand = name: env: script: { kind = "runCommand"; inherit name env script; outPath = "${store}-${name}"; };
  writeText = name: text: "${store}-${name}";
  writeShellApplication = args: { type = "derivation"; inherit args; name = args.name; meta.mainProgram = args.name; outPath = "${store}-${args.name}"; };
  python3Packages = let py = {
    buildPythonApplication = args: {
      type = "derivation";
      name = "${args.pname}-${args.version}";
      outPath = "${store}-${args.pname}-${args.version}";
      inherit args;
      inherit (args) meta;
    };
    # a Python dependency as the tests compare it with pyproject.toml: "name==version"
    buildPythonPackage = args: "${builtins.replaceStrings [ "-" ] [ "_" ] args.pname}==${args.version}";
    callPackage = path: overrides:
      let f = import path; in f (builtins.intersectAttrs (builtins.functionArgs f) (py // { inherit lib; } // overrides));
    fetchPypi = args: { kind = "fetchPypi"; inherit args; };
    setuptools-scm = "setuptools-scm";
    httpx = "httpx";
    python-dotenv = "python-dotenv";
    pyyaml = "pyyaml";
    matplotlib = "matplotlib";
    numpy = "numpy";
    setuptools = "setuptools";
    click = "click";
    jsonschema = "jsonschema";
    rich = "rich";
    huggingface-hub = "huggingface_hub";
    safetensors = "safetensors";
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
  # nixpkgs' own deploy-rs package (substituted from cache.nixos.org on a real machine)
  deploy-rs = { type = "derivation"; name = "deploy-rs-from-nixpkgs"; outPath = "${store}-deploy-rs"; };
  sparkfleet = {
    type = "derivation";
    name = "sparkfleet";
    outPath = "${store}-sparkfleet";
    meta.mainProgram = "sparkfleet";
  };
}
