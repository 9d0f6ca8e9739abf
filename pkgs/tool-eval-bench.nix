# tool-eval-bench, the quality harness `sparkfleet bench` pins (pyproject: tool-eval-bench==3.0.0):
# scores move with the harness version, so it is pinned here by the sdist's hash as well.
{ lib, buildPythonPackage, fetchPypi, setuptools, setuptools-scm, wheel, httpx, python-dotenv, pyyaml, rich }:
buildPythonPackage rec {
  pname = "tool-eval-bench";
  version = "3.0.0";
  pyproject = true;

  src = fetchPypi {
    pname = "tool_eval_bench";
    inherit version;
    # sha256 of tool_eval_bench-3.0.0.tar.gz as PyPI serves it
    hash = "sha256-GOB+mbdRyVFeXpidHDityIzH7ndPYkIANYZBLiPCO8s=";
  };

  # the sdist's own [build-system] requires: setuptools>=77, setuptools-scm>=8 and wheel; the pypa
  # build hook refuses a build missing any of them (tests/nix/test_python_builds.py builds it so)
  build-system = [ setuptools setuptools-scm wheel ];
  dependencies = [ httpx python-dotenv pyyaml rich ];

  pythonImportsCheck = [ "tool_eval_bench" ];

  meta = {
    description = "Agentic tool-call benchmark for LLM serving stacks";
    homepage = "https://pypi.org/project/tool-eval-bench/";
    license = lib.licenses.mit;
  };
}
