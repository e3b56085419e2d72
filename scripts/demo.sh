#!/usr/bin/env bash
# Sets up and runs the main job: analyzes every example, runs it through the plan interpreter,
# through the CPU backend (generated C++, JIT-compiled) and through the GPU kernels (OpenCL C on
# PoCL; CUDA too where an NVIDIA driver is present), each checked against the float64 reference.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
venv=$(scripts/python_setup.sh | tail -1)   # the Python package, in the project's venv
status=0
for spec in examples/*.rf; do
  echo "================ $spec"
  build/redfuse analyze "$spec" || status=1
  build/redfuse run "$spec" --target interp --check || status=1
  build/redfuse run "$spec" --target cpu --check || status=1
  build/redfuse run "$spec" --target opencl --check || status=1
  if [ -e /dev/nvidiactl ]; then build/redfuse run "$spec" --target cuda --check || status=1; fi
done
echo "================ the Python API (examples/python/softmax_numpy.py)"
"$venv/bin/python" examples/python/softmax_numpy.py || status=1
exit $status
