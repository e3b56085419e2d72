#!/usr/bin/env bash
# Sets up, builds and runs every test: the unit/property/golden/end-to-end suite, the installed
# library from a program outside the tree (examples/cpp), the Python package (built as a wheel,
# installed into the project's venv, pytest), the benchmark harness's self-tests, then the C++ suite
# once more under AddressSanitizer + UndefinedBehaviorSanitizer, generated CPU kernels included (skip
# it with REDFUSE_NO_SANITIZE=1).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

scripts/setup.sh
echo "== tests"
ctest --test-dir build --output-on-failure -j "$jobs"

echo "== the installed library from a program outside the tree (examples/cpp: find_package(redfuse))"
rm -rf build/install build/example-cpp
cmake --install build --prefix build/install >/dev/null
cmake -S examples/cpp -B build/example-cpp -G Ninja -DCMAKE_PREFIX_PATH="$PWD/build/install" >/dev/null
ninja -C build/example-cpp >/dev/null
build/example-cpp/softmax_kernel examples/softmax.rf

echo "== the Python package: pip wheel . (in build/, reusing its library), installed into the project's venv, and its tests (pytest)"
venv=$(scripts/python_setup.sh --in-build build | tail -1)
"$venv/bin/python" -m pytest -q python/tests

echo "== the benchmark harness's self-tests (stand-ins for redfuse and the workers; a few seconds)"
"$venv/bin/python" bench/test_bench.py
"$venv/bin/python" bench/gpu/test_gpu_bench.py

echo "== the wheel in a fresh venv (pip install of build/wheel/redfuse-*.whl and its dependency, numpy)"
rm -rf build/fresh-venv
"${PYTHON:-python3}" -m venv build/fresh-venv
build/fresh-venv/bin/python -m pip install -q --disable-pip-version-check build/wheel/redfuse-*.whl numpy==2.4.6
(cd build && fresh-venv/bin/python ../examples/python/softmax_numpy.py)

if [ "${REDFUSE_NO_SANITIZE:-0}" != "1" ]; then
  echo "== tests under AddressSanitizer + UndefinedBehaviorSanitizer"
  # Debug (assertions on) at -Og with line tables (-g1): it compiles in half the time of -O1 under
  # the sanitizers (LowerPlan.cpp: 6.2 s against 13.1 s), runs the reference interpreter several times
  # faster than -O0, and the reports keep file:line.
  BUILD_DIR=build-asan BUILD_TYPE=Debug scripts/setup.sh -DREDFUSE_SANITIZE=ON -DCMAKE_CXX_FLAGS_DEBUG="-Og -g1"
  # The generated CPU kernels are compiled with the sanitizers too, at -O1 (cpu_jit_flags), so the CPU
  # example suites check them. scripts/asan_excluded.txt lists what this pass skips and why (numerics
  # the first pass covers, which took most of this pass's time with sanitized kernels).
  excluded=$(grep -v '^#' scripts/asan_excluded.txt | grep -v '^$' | paste -sd'|')
  # LeakSanitizer's tracer crashes (signal 11) at the exit of a process that loaded PoCL, among its
  # threads (seen 2026-12-01 on this machine, in a different set of OpenCL tests from run to run;
  # the tests pass, the leak check cannot run). So the leak check runs for every test but those that
  # may load an OpenCL driver: the tests named OpenCL*, and the stages (ctest labels) whose tests run
  # `--target opencl` among others (tile, codegen, driver, cli); those run under ASan and UBSan
  # without it.
  pocl_stages="^(tile|codegen|driver|cli)\$"
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -j "$jobs" -LE "$pocl_stages" -E "$excluded|OpenCL"
  ASAN_OPTIONS=detect_leaks=0 ctest --test-dir build-asan --output-on-failure -j "$jobs" -LE "$pocl_stages" -R "OpenCL" -E "$excluded"
  ASAN_OPTIONS=detect_leaks=0 ctest --test-dir build-asan --output-on-failure -j "$jobs" -L "$pocl_stages" -E "$excluded"
fi
