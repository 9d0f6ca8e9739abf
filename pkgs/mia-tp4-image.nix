# The TP4 lane image, built the way the pinned repo's Dockerfile.canary-roce builds it, from pins:
#   base      the sglang dev-dsv41 image, arm64, by digest (dockerTools.pullImage)
#   repo      MiaAI-Lab/DeepSeek-v4.1-Flash-DGX-Sparks at its commit (fetchFromGitHub)
#   runtime   the third-party sources its runtime/sources.manifest pins, imported as url pins
#             (`sparkfleet pins import-manifest`) and fetched fixed-output; the repo's own
#             scripts/fetch_runtime.sh then verifies, patches and lays them out, offline: its
#             `curl` is a stand-in that hands over the pinned store paths by URL.
# Layout and PYTHONPATH follow the Dockerfile: /opt/dsv41 (adapter/, boot.py, scripts, tests,
# benchmarks), /opt/b12x, /opt/b12x_next, and /sgl-workspace/sglang/python replaced (an opaque
# whiteout hides the base's tree) by the dsv4.1 branch tree with the RoCEnante patch applied.
# Env also carries the lane's world shape (DSV41_LAUNCHER=tp4, TP_SIZE, EP_SIZE, DSV41_TP_PAD).
#
# A pin the log gave only in part makes this a derivation that fails when built, printing each
# such pin and `sparkfleet pins resolve <pin>`; evaluation (nix flake check) still succeeds.
#
# Not done here (see the Dockerfile): `pip install sglang-kernel==0.4.7 sgl-deep-gemm==0.2.0`
# (needs those aarch64 wheels pinned), compiling adapter/row_store.cpp against the base's
# toolchain, and the in-image adapter tests.
{ lib, dockerTools, fetchFromGitHub, fetchurl, runCommand, writeText, perl, python3, fleet
, lane ? "dsv41-flash-4x-mia", basePin ? "sglang-dsv41-base", repoPin ? "mia-tp4" }:
let
  manifestPins = lib.filter (p: p.kind == "url" && p.manifest == repoPin) (lib.attrValues fleet.pins);
  problems = lib.filter (m: m != null) (
    [ (fleet.pinProblem basePin "nixHash") (fleet.pinProblem repoPin "nixHash") ]
    ++ map (p: fleet.pinProblem p.name "value") manifestPins
    ++ lib.optional (manifestPins == [ ])
      "no runtime sources: run `sparkfleet pins import-manifest <checkout>/runtime/sources.manifest --from ${repoPin}`");

  base = fleet.requirePin basePin "nixHash";
  repo = fleet.requirePin repoPin "nixHash";
  short = builtins.substring 0 12 repo.value;
  owner = builtins.elemAt (lib.splitString "/" repo.source) 0;
  name = builtins.elemAt (lib.splitString "/" repo.source) 1;

  src = fetchFromGitHub {
    inherit owner;
    repo = name;
    rev = repo.value;
    hash = repo.nixHash;
  };

  baseImage = dockerTools.pullImage {
    imageName = base.source;
    imageDigest = base.value;
    hash = base.nixHash;
    os = "linux";
    arch = "arm64";
    finalImageName = base.source;
    finalImageTag = if base.tag != null then base.tag else "pinned";
  };

  # url -> store path of every runtime source, for the offline `curl` below
  downloads = writeText "mia-tp4-downloads.tsv" (lib.concatMapStrings (p:
    "${p.source}\t${fetchurl { url = p.source; sha256 = (fleet.requirePin p.name "value").value; }}\n")
    manifestPins);

  # scripts/fetch_runtime.sh as the Dockerfile's fetch stage runs it, with the network replaced
  runtime = runCommand "mia-tp4-runtime-${short}" { nativeBuildInputs = [ perl ]; } ''
    mkdir -p bin
    cat > bin/curl <<'SHIM'
    #!/usr/bin/env bash
    # curl -fsSL ... -o DEST URL: copy the pinned download for URL (fetched by Nix, sha256-checked)
    set -euo pipefail
    dest="" url=""
    while (($#)); do
      case $1 in
        -o) dest=$2; shift 2 ;;
        -m | --retry | --retry-delay) shift 2 ;;
        -*) shift ;;
        *) url=$1; shift ;;
      esac
    done
    file=$(awk -F '\t' -v u="$url" '$1 == u { print $2 }' ${downloads})
    if [[ -z $file ]]; then
      echo "curl (nix build): $url is not a url pin in hosts/fleet.toml; run sparkfleet pins import-manifest" >&2
      exit 22
    fi
    cp -- "$file" "$dest"
    SHIM
    chmod +x bin/curl
    patchShebangs bin
    export PATH=$PWD/bin:$PATH
    cp -r ${src} repo
    chmod -R u+w repo
    bash repo/scripts/fetch_runtime.sh $out sglang-canary b12x b12x-next
  '';

  tree = runCommand "mia-tp4-tree-${short}" { nativeBuildInputs = [ python3 ]; } ''
    mkdir -p $out/opt/dsv41 $out/opt/b12x $out/opt/b12x_next $out/sgl-workspace/sglang
    for d in adapter scripts tests benchmarks; do cp -r ${src}/$d $out/opt/dsv41/; done
    cp ${src}/boot.py $out/opt/dsv41/boot.py
    cp -r ${runtime}/b12x/. $out/opt/b12x/
    cp -r ${runtime}/b12x_next/. $out/opt/b12x_next/
    cp -r ${runtime}/sglang-canary/python $out/sgl-workspace/sglang/python
    chmod -R u+w $out
    # RoCEnante overlay on the branch tree, then adapted to TP4 (as the Dockerfile does, in place)
    (cd $out/sgl-workspace/sglang \
      && patch -p1 -F3 < ${src}/runtime/sglang-rocenante.patch \
      && python3 ${src}/runtime/roce_tp4_adapt.py)
    cp ${src}/runtime/flash_mla_sm120.canary.py \
      $out/sgl-workspace/sglang/python/sglang/kernels/ops/attention/flash_mla_sm120.py
  '';

  env = fleet.imageEnv lane;

  unresolved = runCommand "mia-tp4-image-unresolved-pins" { } ''
    echo "mia-tp4-image cannot be built from hosts/fleet.toml as it stands:" >&2
    ${lib.concatMapStrings (m: "echo ${lib.escapeShellArg "  - ${m}"} >&2\n") problems}
    exit 1
  '';
in
if problems != [ ] then unresolved else
dockerTools.streamLayeredImage {
  name = "sparkfleet/mia-tp4";
  tag = short;
  fromImage = baseImage;
  contents = [ tree ];
  # The base's layers count toward the limit; leave room for them.
  maxLayers = 100;
  # Our python/ replaces the base's: an opaque whiteout in the layer that carries it.
  extraCommands = ''
    touch sgl-workspace/sglang/python/.wh..wh..opq
  '';
  config = {
    # Only Env is inherited from the base image, so Entrypoint, Cmd and WorkingDir are set here.
    # The Dockerfile's ENTRYPOINT is boot.py, which derives the env itself (the script the night
    # shift did not run); sparkfleet's launch passes the whole serve argv and derives the env, so
    # the entry point only executes what it is given.
    Env = lib.mapAttrsToList (k: v: "${k}=${v}") env ++ [
      "PYTHONPATH=/opt/dsv41/adapter:/opt/b12x:/opt/b12x_next"
    ];
    Entrypoint = [ "/usr/bin/env" ];
    Cmd = [ "python3" "-u" "/opt/dsv41/boot.py" "run" ];
    WorkingDir = "/opt/dsv41";
    Labels = {
      "org.opencontainers.image.source" = "https://github.com/${repo.source}";
      "org.opencontainers.image.revision" = repo.value;
      "org.opencontainers.image.base.digest" = base.value;
      "org.opencontainers.image.base.name" = "${base.source}:${toString base.tag}";
    };
  };
}
