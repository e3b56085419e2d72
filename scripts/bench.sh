#!/usr/bin/env bash
# The CPU benchmark in one command (issue 3, item 8; method: docs/design.md §8):
#   1. the project's venv (scripts/python_setup.sh: pinned torch/numpy, python/requirements-test.txt)
#      with redfuse's wheel built and installed into it, plus the benchmark's extras (matplotlib,
#      apache-tvm: bench/requirements*.txt); bench/machine/machine_limits
#   2. measures the machine's limits (memory bandwidth, FP32 FMA / bf16 / int8 peaks, AMX tiles)
#      (and the bandwidth again after the workloads: the floors take the larger of the two)
#   3. runs every workload of docs/workloads.md for redfuse (its Python API) and its peers, in one
#      process on the same inputs (bench/peers.py)
#   4. writes bench/results/<date>-<host>[-quick]/{machine.json,results.json,table.md,chart.png}
#
# Usage: scripts/bench.sh [--quick] [--out DIR] [--no-install] [--no-build] [-- PEERS_ARGS...]
#   --quick       small sizes and short budgets (a few minutes; checks that everything runs)
#   --out DIR     output directory (default bench/results/<date>-<host>[-quick])
#   --no-install  use the venv as it is (no registry; the venv must exist)
#   --no-build    do not build redfuse's wheel (the redfuse column then uses the redfuse the venv's
#                 python imports: the installed wheel, or python/ with PYTHONPATH=python)
#   PEERS_ARGS    passed to bench/peers.py, e.g. -- --only softmax,attention --budget 1
# Environment: PYTHON (interpreter the venv is made with, default python3), REDFUSE_BENCH_VENV (a venv
# instead of scripts/python_setup.sh's), CXX (default g++).
set -euo pipefail
cd "$(dirname "$0")/.."

QUICK=0; OUT=""; INSTALL=1; BUILD=1; PEERS_ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --out) OUT=$2; shift ;;
    --no-install) INSTALL=0 ;;
    --no-build) BUILD=0 ;;
    --) shift; PEERS_ARGS=("$@"); break ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

CXX=${CXX:-g++}
HOST=$(hostname -s 2>/dev/null || hostname)
if [ -z "$OUT" ]; then
  OUT="bench/results/$(date +%Y-%m-%d)-$HOST"
  [ $QUICK -eq 1 ] && OUT="$OUT-quick"
fi
mkdir -p "$OUT"
T0=$(date +%s)

# ---------------------------------------------------------------------------- 1. the venv, redfuse
# One venv for the tests and the benchmark (one torch): python_setup.sh's, keyed by the pinned test
# requirements; REDFUSE_BENCH_VENV overrides it (python_setup.sh then sets that one up).
[ -n "${REDFUSE_BENCH_VENV:-}" ] && export REDFUSE_VENV=$REDFUSE_BENCH_VENV
VENV=$(scripts/python_setup.sh --print-venv)
if [ $INSTALL -eq 0 ] && [ ! -x "$VENV/bin/python" ]; then
  echo "bench.sh: no virtual environment at $VENV (run without --no-install)" >&2
  exit 1
fi
if [ $BUILD -eq 1 ]; then
  # The wheel compiles the C++ library (minutes on 2 cores); a venv that exists is not reinstalled.
  echo "== building redfuse's wheel into $VENV (scripts/python_setup.sh; log: $OUT/build.log)"
  scripts/python_setup.sh > /dev/null 2> "$OUT/build.log" || echo "== redfuse did not build (see" \
    "$OUT/build.log): the redfuse column measures whatever redfuse the venv imports, if any"
elif [ $INSTALL -eq 1 ]; then
  scripts/python_setup.sh --no-wheel > /dev/null
fi
if [ $INSTALL -eq 1 ]; then
  STAMP="$VENV/.redfuse-bench-requirements"
  WANT=$(cat bench/requirements.txt bench/requirements-tvm.txt | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
    # Constrained by the test requirements: the extras never move the pinned torch or numpy.
    echo "== installing the benchmark's extras into $VENV (matplotlib, apache-tvm)"
    PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check -c python/requirements-test.txt)
    "${PIP[@]}" -r bench/requirements.txt
    rm -f "$VENV/.tvm-install.log"
    if ! "${PIP[@]}" -r bench/requirements-tvm.txt > "$VENV/.tvm-install.log" 2>&1; then
      echo "== apache-tvm did not install: the TVM column will say why ($VENV/.tvm-install.log)"
    fi
    echo "$WANT" > "$STAMP"
  fi
fi
"$VENV/bin/python" -c "import torch, numpy" 2>/dev/null || {
  echo "bench.sh: torch/numpy do not import from $VENV; rerun without --no-install" >&2; exit 1; }

mkdir -p build/bench
ML=build/bench/machine_limits
if [ ! -x $ML ] || [ bench/machine/machine_limits.cpp -nt $ML ]; then
  echo "== building $ML"
  "$CXX" -std=c++17 -O3 -march=native -fopenmp bench/machine/machine_limits.cpp -o $ML
fi

# ---------------------------------------------------------------------------- 2. machine limits
echo "== measuring the machine's limits ($ML)"
ML_ARGS=(); [ $QUICK -eq 1 ] && ML_ARGS+=(--quick)
$ML "${ML_ARGS[@]}" > "$OUT/machine.json"
"$VENV/bin/python" - "$OUT/machine.json" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
l = m["limits"]
print("   %s: memory %s GB/s (one core %s; reads alone %s), fp32 FMA %s GFLOP/s, bf16 %s GFLOP/s (%s), int8 %s GOP/s (%s); AMX: %s"
      % (m.get("cpu"), l["mem_GBps"], l["mem_GBps_one_core"], l.get("mem_read_GBps"), l["fp32_GFLOPs"], l["bf16_GFLOPs"], l.get("bf16_unit"),
         l["int8_GOPs"], l.get("int8_unit"), m.get("amx_permission", "not probed")))
EOF

# ---------------------------------------------------------------------------- 3. redfuse and the peers
LOAD=$(cut -d' ' -f1 /proc/loadavg)
echo "== running the workloads (bench/peers.py; load average now $LOAD on $(nproc) cores)"
P_ARGS=(--out "$OUT" --machine "$OUT/machine.json" --tvm-install-log "$VENV/.tvm-install.log")
[ $QUICK -eq 1 ] && P_ARGS+=(--quick)
set +e
"$VENV/bin/python" -u bench/peers.py "${P_ARGS[@]}" "${PEERS_ARGS[@]}" 2>&1 \
  | grep --line-buffered -v -e 'llvm_instance.cc' -e 'No CUDA runtime is found' | tee "$OUT/run.log"
rc=${PIPESTATUS[0]}
set -e
[ "$rc" -eq 0 ] || { echo "bench.sh: peers.py failed (exit $rc)" >&2; exit "$rc"; }

# ---------------------------------------------------------------------------- 3b. the bandwidth again
# The memory speed of a shared host drifts from minute to minute: the floors take the larger of the
# two measurements (bench/model.py merge_bandwidth) and every record is rederived against it.
echo "== measuring the machine's limits again, after the workloads"
$ML "${ML_ARGS[@]}" > "$OUT/machine_after.json"
"$VENV/bin/python" bench/remeasure.py "$OUT/machine_after.json" "$OUT"

# ---------------------------------------------------------------------------- 4. summary
echo
cat "$OUT/table.md"
echo
echo "== done in $(( $(date +%s) - T0 )) s: $OUT/{machine.json,results.json,table.md,chart.png}"
