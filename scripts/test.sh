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

echo "== the Python package: pip wheel ., installed into the project's venv, and its tests (pytest)"
venv=$(scripts/python_setup.sh | tail -1)
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
  BUILD_DIR=build-asan BUILD_TYPE=Debug scripts/setup.sh -DREDFUSE_SANITIZE=ON
  # The GPU example suites check generated kernels (PoCL runs them, NVRTC compiles them, the CUDA
  # emulator runs them on host fibers, whose stack switches ASan does not follow): the first
  # pass covers them, and under the sanitizers they would double the CI time for no host coverage.
  # The OpenCL and CUDA runtime tests (host code) still run here. The generated CPU kernels are
  # compiled with the sanitizers too (cpu_jit_flags), so the CPU example suites check them. The
  # merge-catching runs of tests/unit/MergeCases.h (PlannerChosen*, SelectionTies*,
  # StabilityInputs*) are numerics, covered by the first pass: under ASan and a Debug reference
  # interpreter they took ~6 minutes more.
  # The CPU example suites' size sets and dtype sweeps (SizeSetsAgainstTheReference, EveryFloatDtype)
  # and the interpreter's size sets (PlanEqualsReferenceAtSeveralSizeSets) are numerics too: with
  # sanitized kernels they took over 15 minutes here; TailsSegmentsAndTheUnfusedPlan still runs every
  # example's sanitized kernels (segments, merges, the unfused plan).
  # LeakSanitizer's tracer crashes (signal 11) at the exit of a process that loaded PoCL, among its
  # threads (seen 2026-12-01 on this machine, in a different set of OpenCL tests from run to run;
  # the tests pass, the leak check cannot run). So the leak check runs for every test but those that
  # may load an OpenCL driver: the tests named OpenCL*, and the stages (ctest labels) whose tests run
  # `--target opencl` among others (tile, codegen, driver, cli); those run under ASan and UBSan
  # without it.
  pocl_stages="^(tile|codegen|driver|cli)\$"
  # CpuBackend.AmxEmulatedTileGemmsAgainstTheReference (the AMX GEMMs on the software model of the
  # tiles, through five JIT-compiled examples) took 192 s here with sanitized kernels (2 s in the
  # first pass with the JIT cache warm, plus five kernel builds when cold): numerics too; the AMX
  # code's reads and writes at buffer ends are checked against guard pages by
  # SimdKernels.AmxEmulatedPathMatchesReference, which runs in both passes.
  # GemmSumTiles.AgreeWithTheReference* and TileGemmColumnSplit (weight GEMMs at several sizes through
  # the JIT) are numerics as well; the sanitized kernels of rmsnorm_gemm and quant_gemm_int8, with the
  # GEMM-fed sums in tiles, still run in CpuExamples.TailsSegmentsAndTheUnfusedPlan.
  excluded="OpenCLExamples|OpenCLBackend|CudaCubins|CudaGemmEmulated|CudaGemmDevice|CudaEmulat|PlannerChosen|SelectionTies|StabilityInputs|CpuExamples.SizeSetsAgainstTheReference|CpuExamples.EveryFloatDtype|PlanEqualsReferenceAtSeveralSizeSets|AmxEmulatedTileGemms|GemmSumTiles.AgreeWithTheReference|TileGemmColumnSplit"
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -j "$jobs" -LE "$pocl_stages" -E "$excluded|OpenCL"
  ASAN_OPTIONS=detect_leaks=0 ctest --test-dir build-asan --output-on-failure -j "$jobs" -LE "$pocl_stages" -R "OpenCL" -E "$excluded"
  ASAN_OPTIONS=detect_leaks=0 ctest --test-dir build-asan --output-on-failure -j "$jobs" -L "$pocl_stages" -E "$excluded"
fi
