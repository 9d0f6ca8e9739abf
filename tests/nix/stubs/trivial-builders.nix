# Derivation-shaped stand-ins for nixpkgs' trivial builders (pkgs/build-support/trivial-builders
# and buildEnv), for evaluating the flake's outputs (never built: tests/nix/buildset builds for
# real). Each returns what `nix flake check` and string interpolation see of a derivation: type, name,
# drvPath, outPath (the zero hash + name). outPath carries the context of every string it is
# built from, so a store path named in a text stays a dependency (a real derivation holds it
# through its inputs). Its own zero-hash path has no context: `nix eval` would try to realise it. Inspection-only: `kind` and the arguments.
let
  store = "/nix/store/00000000000000000000000000000000";
  strings = v:
    if builtins.isString v then [ v ]
    else if builtins.isList v then builtins.concatLists (map strings v)
    else if builtins.isAttrs v then
      (if v ? outPath then [ (toString v.outPath) ] else builtins.concatLists (map strings (builtins.attrValues v)))
    else [ ];
  contextOf = values: builtins.substring 0 0 (builtins.concatStringsSep "" (strings values));
  mkDrv = { name, kind, inputs ? [ ], extra ? { } }:
    let out = "${store}-${name}" + contextOf inputs; in
    extra // {
      type = "derivation";
      inherit name kind;
      outPath = out;
      drvPath = "${out}.drv";
      outputs = [ "out" ];
      out = { outPath = out; };
    };
  isString = s: builtins.isString s || throw "a text must be a string";
in
rec {
  inherit store mkDrv contextOf;
  runtimeShell = "${store}-bash-interactive/bin/bash";
  # each of env.outputs is a derivation of its own, named NAME-OUTPUT (NAME for out), all sharing
  # the script and each carrying the others as attributes, as mkDerivation's outputs do
  runCommand = name: env: script:
    let
      outputs = env.outputs or [ "out" ];
      one = o: mkDrv {
        name = if o == "out" then name else "${name}-${o}";
        kind = "runCommand";
        inputs = [ env script ];
        extra = (env.passthru or { }) // { inherit env script; outputName = o; };
      } // all;
      all = builtins.listToAttrs (map (o: { name = o; value = one o; }) outputs);
    in
    all.${builtins.head outputs};
  # the formals of writeTextFile
  writeTextFile =
    { name, text, executable ? false, destination ? "", checkPhase ? "", meta ? { }, passthru ? { }
    , allowSubstitutes ? false, preferLocalBuild ? true, derivationArgs ? { } }@args:
    assert isString text;
    mkDrv { inherit name; kind = "writeTextFile"; inputs = [ text ]; extra = passthru // { inherit args text meta; }; };
  writeText = name: text:
    assert builtins.isString text || throw "writeText ${name}: text must be a string";
    mkDrv { inherit name; kind = "writeText"; inputs = [ text ]; extra = { inherit text; }; };
  writeScript = name: text: writeTextFile { inherit name text; executable = true; };
  # the formals of buildEnv (pkgs/build-support/buildenv)
  buildEnv =
    { name, paths, ignoreCollisions ? false, checkCollisionContents ? true, postBuild ? ""
    , extraOutputsToInstall ? [ ], extraPrefix ? "", ignoreSingleFileOutputs ? false
    , includeClosures ? false, manifest ? "", meta ? { }, passthru ? { }, pathsToLink ? [ "/" ]
    , pname ? null, version ? null, nativeBuildInputs ? [ ], buildInputs ? [ ] }@args:
    mkDrv { inherit name; kind = "buildEnv"; inputs = [ paths postBuild ]; extra = passthru // { inherit args paths meta; }; };
}
