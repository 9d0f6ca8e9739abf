# smg (Shepherd Model Gateway, PyPI smg==1.13.0, the version pyproject.toml pins): the gateway
# `sparkfleet gateway run` starts in-process (serving/gateway_main.py imports smg.launch_router).
#
# From PyPI's own wheels, pinned by hash: smg is a Rust router (smg/smg_rs.abi3.so, built by
# maturin) with a thin Python package around it, and PyPI ships it as manylinux wheels only for
# aarch64 (the Sparks) and x86_64. Building the Rust crate from source would need its whole cargo
# lock vendored; the wheel is the artifact upstream releases and tests. So: installed as a wheel
# (buildPythonPackage format = "wheel": the Python package and the console script `smg` stay
# importable and wrapped), with autoPatchelfHook pointing the .so at Nix's glibc and libgcc_s (its
# only NEEDED libraries: libc, libm, libdl, libpthread, librt, libgcc_s, ld-linux).
# tests/nix/test_pkgs.py downloads both wheels with pip and compares their sha256 with these.
{ lib, stdenv, buildPythonPackage, fetchPypi, autoPatchelfHook, setproctitle, grpcio
, grpcio-health-checking, pyyaml }:
let
  version = "1.13.0";
  # system -> the wheel's platform tag and the sha256 of the file PyPI serves
  wheels = {
    aarch64-linux = {
      platform = "manylinux_2_28_aarch64";
      hash = "sha256-UnYyhWA1Tcom6p9FRpTD1WmU+1pBwyPI7fl1CBgdLX4=";
    };
    x86_64-linux = {
      platform = "manylinux_2_17_x86_64.manylinux2014_x86_64";
      hash = "sha256-z66BcdrGinS0giJjsYZPp5lSmS7kcqJbpyZszSADmbQ=";
    };
  };
  system = stdenv.hostPlatform.system;
  wheel = wheels.${system} or (throw "smg ${version}: PyPI has no wheel for ${system} (only ${lib.concatStringsSep ", " (builtins.attrNames wheels)})");
in
buildPythonPackage {
  pname = "smg";
  inherit version;
  format = "wheel";

  src = fetchPypi {
    pname = "smg";
    inherit version;
    format = "wheel";
    dist = "cp38";
    python = "cp38";
    abi = "abi3";
    inherit (wheel) platform hash;
  };

  nativeBuildInputs = [ autoPatchelfHook ];
  buildInputs = [ (lib.getLib stdenv.cc.cc) ]; # libgcc_s.so.1
  # the wheel's Requires-Dist (METADATA), its dev extra left out
  dependencies = [ setproctitle grpcio grpcio-health-checking pyyaml ];

  # smg.smg_rs loads the patched .so; launch_router is what gateway_main calls
  pythonImportsCheck = [ "smg" "smg.smg_rs" "smg.launch_router" ];

  passthru = { inherit wheels; };

  meta = {
    description = "Shepherd Model Gateway: SGLang's router (sglang-router's successor)";
    homepage = "https://github.com/smg-project/smg";
    license = lib.licenses.asl20;
    platforms = builtins.attrNames wheels;
    mainProgram = "smg";
    sourceProvenance = [ lib.sourceTypes.binaryNativeCode ];
  };
}
