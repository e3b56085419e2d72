#!/usr/bin/env bash
# Installs the build dependencies (Debian packages) and builds redfuse into build/.
# Usage: scripts/setup.sh [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."

# Installed without recommends (clang's and PoCL's would add ~300 MB of llvm-*-dev), so what a recommend used
# to bring is listed: llvm gives llvm-symbolizer for clang's sanitizer and libFuzzer stack traces.
# PoCL runs the OpenCL backend on the CPU; without an OpenCL driver those tests skip.
PACKAGES=(cmake ninja-build g++ clang libclang-rt-14-dev llvm nlohmann-json3-dev libcli11-dev libgtest-dev
          pocl-opencl-icd ocl-icd-opencl-dev opencl-headers clinfo)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} "$@" >/dev/null
ninja -C "$BUILD_DIR"
