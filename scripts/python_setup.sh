#!/usr/bin/env bash
# Builds the Python package (pip wheel: the C++ library and its nanobind extension through
# scikit-build-core) and installs the wheel into the project's virtual environment, which lives
# outside the clone, keyed by the hash of the pinned requirements (so CI reuses what is installed,
# and a fresh machine builds it from the same files). Prints the venv's path on its last line.
# Usage: scripts/python_setup.sh [--no-wheel | --print-venv | --in-build DIR]
#          --no-wheel      create the venv if it is missing, build nothing (scripts/bench.sh --no-build)
#          --print-venv    only print the venv's path (creates nothing)
#          --in-build DIR  build the wheel in DIR, the CMake build scripts/setup.sh made (its type
#                          RelWithDebInfo, tests on), so the library compiled there is reused and only
#                          the extension is compiled (scripts/test.sh: ~20 s instead of ~3.5 minutes for
#                          the Release build of the library). DIR keeps the extension's settings (the
#                          venv's Python and nanobind) in its cache afterwards.
#        PYTHON: the interpreter, default python3; REDFUSE_VENV: use this venv instead
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-}
wheel_settings=()
case "$MODE" in
  ""|--no-wheel|--print-venv) ;;
  --in-build)
    [ -f "${2:-}/CMakeCache.txt" ] || { echo "python_setup.sh: --in-build needs a configured CMake build folder" >&2; exit 2; }
    wheel_settings=(--config-settings=build-dir="$2" --config-settings=cmake.build-type=RelWithDebInfo
                    --config-settings=cmake.define.REDFUSE_TESTS=ON --config-settings=install.strip=true) ;;
  *) echo "python_setup.sh: unknown argument '$MODE' (--no-wheel, --print-venv, --in-build DIR)" >&2; exit 2 ;;
esac
PYTHON=${PYTHON:-python3}
key=$(cat python/requirements-test.txt | sha256sum | cut -c1-16)
VENV=${REDFUSE_VENV:-$HOME/.cache/redfuse-venv/$key}
if [ "$MODE" = --print-venv ]; then echo "$VENV"; exit 0; fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "== creating $VENV" >&2
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r python/requirements-test.txt >&2
fi
if [ "$MODE" != --no-wheel ]; then
  echo "== building the wheel (pip wheel .) and installing it into $VENV" >&2
  rm -rf build/wheel
  "$VENV/bin/python" -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation -w build/wheel \
    ${wheel_settings[@]+"${wheel_settings[@]}"} . >&2
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps build/wheel/redfuse-*.whl >&2
fi
echo "$VENV"
