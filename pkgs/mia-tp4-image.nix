# The TP4 lane image, built the way the pinned repo's Dockerfile.canary-roce builds it, from pins:
#   base      the sglang dev-dsv41 image, arm64, by digest (dockerTools.pullImage)
#   repo      MiaAI-Lab/DeepSeek-v4.1-Flash-DGX-Sparks at its commit (fetchFromGitHub); never
#             stored in this repo: the build reads its Dockerfile, scripts and tests from the fetch
#   runtime   the third-party sources its runtime/sources.manifest pins, imported as url pins
#             (`sparkfleet pins import-manifest`) and fetched fixed-output; the repo's own
#             scripts/fetch_runtime.sh then verifies, patches and lays them out, offline: its
#             `curl` is a stand-in that hands over the pinned store paths by URL.
#   wheels    sglang-kernel 0.4.7 and sgl-deep-gemm 0.2.0 (aarch64, PyPI) as url pins with sha256,
#             installed into the base image's site-packages the way `pip install --no-deps` does
#             (pypa installer; the version they replace whited out): `kernels` below
# Layout and PYTHONPATH follow the Dockerfile: /opt/dsv41 (adapter/ with librow_store.so built by
# the base image's own g++ from adapter/row_store.cpp, boot.py, scripts, tests, benchmarks),
# /opt/b12x, /opt/b12x_next, and /sgl-workspace/sglang/python replaced (an opaque whiteout hides
# the base's tree) by the dsv4.1 branch tree with the RoCEnante patch applied and adapted to TP4.
# Env is the Dockerfile's ENV plus the lane's world shape (DSV41_LAUNCHER=tp4, TP_SIZE, ...).
#
# passthru.tests: the Dockerfile's import checks and in-image adapter tests, read from the pinned
# Dockerfile and run inside the assembled image's root filesystem (proot), plus a check that the
# image's Env carries the Dockerfile's ENV. Steps that run inside the base image (g++, the tests)
# need an aarch64 builder: CI's ubuntu-24.04-arm or a Spark.
#
# A pin the log gave only in part makes this a derivation that fails when built, printing each
# such pin and `sparkfleet pins resolve <pin>`; evaluation (nix flake check) still succeeds.
#
# The output is a stream script: `./result | docker load` (or `podman load`); `sparkfleet image
# load LANE` does that on every host of the lane and records the image ID.
{ lib, dockerTools, fetchFromGitHub, fetchurl, runCommand, writeText, perl, python3, proot, fleet
, lane ? "dsv41-flash-4x-mia", basePin ? "sglang-dsv41-base", repoPin ? "mia-tp4"
, wheelPins ? [ "sglang-kernel-aarch64" "sgl-deep-gemm-aarch64" ]
, dockerfile ? "Dockerfile.canary-roce" }:
let
  manifestPins = lib.filter (p: p.kind == "url" && p.manifest == repoPin) (lib.attrValues fleet.pins);
  problems = lib.filter (m: m != null) (
    [ (fleet.pinProblem basePin "nixHash") (fleet.pinProblem repoPin "nixHash") ]
    ++ map (p: fleet.pinProblem p.name "value") manifestPins
    ++ map (w: fleet.pinProblem w "value") wheelPins
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
    # curl as the pinned repo's scripts/fetch_runtime.sh calls it (its one call, read at MiaAI-Lab/
    # DeepSeek-v4.1-Flash-DGX-Sparks 56dc82001f9f: curl -fsSL --retry 3 --retry-delay 5 -m 900
    # -o "$dest" "$url"), served from the pinned download for URL (fetched by Nix, sha256-checked).
    # Any other flag stops the build: a flag misread (its value taken for the URL) would hand over
    # the wrong file or none.
    set -euo pipefail
    unknown() {
      echo "curl (nix build): unknown flag $1: the offline stand-in knows -f -s -S -L, -o/--output," \
        "-m/--max-time, --retry, --retry-delay (scripts/fetch_runtime.sh's call); teach it in pkgs/mia-tp4-image.nix" >&2
      exit 2
    }
    dest="" url=""
    while (($#)); do
      case $1 in
        -o | --output) dest=$2; shift 2 ;;
        -m | --max-time | --retry | --retry-delay) shift 2 ;;
        --fail | --silent | --show-error | --location) shift ;;
        -*) [[ $1 =~ ^-[fsSL]+$ ]] || unknown "$1"; shift ;;
        *)
          if [[ -n $url ]]; then echo "curl (nix build): a second URL $1 (after $url)" >&2; exit 2; fi
          url=$1; shift ;;
      esac
    done
    if [[ -z $dest || -z $url ]]; then echo "curl (nix build): needs -o DEST and one URL" >&2; exit 2; fi
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

  tree = runCommand "mia-tp4-tree-${short}" { nativeBuildInputs = [ python3 proot ]; } ''
    mkdir -p $out/opt/dsv41 $out/opt/b12x $out/opt/b12x_next $out/sgl-workspace/sglang
    for d in adapter scripts tests benchmarks; do cp -r ${src}/$d $out/opt/dsv41/; done
    cp ${src}/boot.py $out/opt/dsv41/boot.py
    # COPY --from=fetch /fetched/b12x/b12x and its LICENSE (b12x_next alike): the package, not the tree
    cp -r ${runtime}/b12x/b12x ${runtime}/b12x/LICENSE $out/opt/b12x/
    cp -r ${runtime}/b12x_next/b12x_next ${runtime}/b12x_next/LICENSE $out/opt/b12x_next/
    cp -r ${runtime}/sglang-canary/python $out/sgl-workspace/sglang/python
    chmod -R u+w $out
    # RoCEnante overlay on the branch tree, then adapted to TP4 (as the Dockerfile does, in place).
    # The adapter may name /sgl-workspace/... absolutely (the Dockerfile runs it there): proot
    # binds our tree at that path, so absolute and relative paths both land in $out.
    (cd $out/sgl-workspace/sglang && patch -p1 -F3 < ${src}/runtime/sglang-rocenante.patch)
    PROOT_TMP_DIR=$TMPDIR PROOT_NO_SECCOMP=1 proot -b $out/sgl-workspace:/sgl-workspace \
      -w /sgl-workspace/sglang python3 ${src}/runtime/roce_tp4_adapt.py
    # our python/ replaces the base's: an opaque whiteout in the layer that carries it
    touch $out/sgl-workspace/sglang/python/.wh..wh..opq
    cp ${src}/runtime/flash_mla_sm120.canary.py \
      $out/sgl-workspace/sglang/python/sglang/kernels/ops/attention/flash_mla_sm120.py
  '';

  # pip install --no-deps sglang-kernel==0.4.7 sgl-deep-gemm==0.2.0: the wheels, fetched by hash
  wheels = map (w: let p = fleet.requirePin w "value"; in fetchurl { url = p.source; sha256 = p.value; }) wheelPins;

  tools = ./mia-tp4-image/image_tools.py;
  python = python3.withPackages (ps: [ ps.installer ]);
  # The base image as a root filesystem: only inside the one build that needs it (it is tens of
  # GB), never an output. proot runs the base image's own programs in it without privileges.
  withBase = ''
    export PROOT_TMP_DIR=$TMPDIR PROOT_NO_SECCOMP=1
    mkdir root
    python3 ${tools} unpack ${baseImage} root >/dev/null
  '';

  # One build, one unpack of the base, two outputs:
  #   out    a layer: the kernel wheels as pip would install them, and adapter/librow_store.so
  #          compiled by the Dockerfile's own g++ line with the base image's toolchain (its
  #          libstdc++ and glibc are the ones the serving process loads);
  #   tests  the assembled image's root filesystem (base + tree + this layer) checked the way the
  #          Dockerfile checks its build (its import checks and in-image tests, its ENV).
  # The image needs `out`, so an image whose checks fail is never assembled.
  kernels = runCommand "mia-tp4-kernels-${short}" { nativeBuildInputs = [ python proot ]; outputs = [ "out" "tests" ]; } ''
    ${withBase}
    python3 ${tools} install-wheels root $out ${lib.concatStringsSep " " wheels}
    mkdir -p root/opt/dsv41
    cp -r ${src}/adapter root/opt/dsv41/adapter
    chmod -R u+w root/opt/dsv41
    build=$(python3 ${tools} run ${src}/${dockerfile} row_store.cpp)
    echo "in the base image: $build"
    python3 ${tools} in-image root ${baseImage} /opt/dsv41 "$build"
    install -D -m 0755 root/opt/dsv41/adapter/librow_store.so $out/opt/dsv41/adapter/librow_store.so

    # the same root, now as the image will be: the tree and this layer over the base
    python3 ${tools} overlay ${tree} root
    python3 ${tools} overlay $out root
    python3 ${tools} check-env ${src}/${dockerfile} ${lib.escapeShellArg (builtins.toJSON env)}
    n=$(python3 ${tools} run-checks ${src}/${dockerfile} root ${baseImage})
    echo "$n in-image test files passed" | tee $tests
  '';

  # The Dockerfile's ENV (checked against the pinned Dockerfile by passthru.tests) and the lane's
  # world shape: only Env is inherited from a base image, and the TP4 adapters read it.
  dockerfileEnv = {
    PYTHONPATH = "/opt/dsv41/adapter:/opt/b12x:/opt/b12x_next";
    MODEL_PATH = "/models/DeepSeek-V4.1-Flash";
    STATE_PATH = "/state";
    OFFLOAD_MODE = "nvme";
    DSV41_CACHE_GIB = "16";
  };
  env = dockerfileEnv // fleet.imageEnv lane;

  tests = kernels.tests;

  unresolved = runCommand "mia-tp4-image-unresolved-pins" { } ''
    echo "mia-tp4-image cannot be built from hosts/fleet.toml as it stands:" >&2
    ${lib.concatMapStrings (m: "echo ${lib.escapeShellArg "  - ${m}"} >&2\n") problems}
    exit 1
  '';

  image = dockerTools.streamLayeredImage {
  name = "sparkfleet/mia-tp4";
  tag = short;
  fromImage = baseImage;
  # The tree and the kernel layer are copied in as files (as the Dockerfile's COPY does), not
  # linked from the store: their whiteouts must be files in the layer for docker/podman to apply.
  extraCommands = ''
    cp -r --no-preserve=ownership ${tree}/. ${kernels}/. ./
    chmod -R u+w .
  '';
  # The base's layers count toward the limit; leave room for them.
  maxLayers = 100;
  config = {
    # Only Env is inherited from the base image, so Entrypoint, Cmd and WorkingDir are set here.
    # The Dockerfile's ENTRYPOINT is boot.py, which derives the env itself (the script the night
    # shift did not run); sparkfleet's launch passes the whole serve argv and derives the env, so
    # the entry point only executes what it is given.
    Env = lib.mapAttrsToList (k: v: "${k}=${v}") env;
    ExposedPorts."8888/tcp" = { };
    # the Dockerfile's HEALTHCHECK (durations in nanoseconds, as the image config stores them)
    Healthcheck = {
      Test = [ "CMD" "python3" "-S" "/opt/dsv41/boot.py" "health" ];
      Interval = 30000000000;
      Timeout = 30000000000;
      StartPeriod = 1800000000000;
      Retries = 3;
    };
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
};
in
if problems != [ ] then unresolved else
# `nix build .#mia-tp4-image.tests` runs the Dockerfile's checks; .tree and .kernels are the
# layers (CI builds them on aarch64 and pushes them to the binary cache).
image // {
  inherit tests tree kernels;
  passthru = (image.passthru or { }) // { inherit tests tree kernels; };
}
