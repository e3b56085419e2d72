#!/usr/bin/env bash
# The CPU benchmark in one command (issue 3, item 8; method: docs/design.md §8):
#   1. creates or refreshes the peers' virtual environment (.venv/, pinned: bench/requirements*.txt)
#   2. builds redfuse (ninja -C build redfuse, or scripts/setup.sh) and bench/machine/machine_limits
#   3. measures the machine's limits (memory bandwidth, FP32 FMA / bf16 / int8 peaks)
#   4. runs every workload of docs/workloads.md for redfuse and its peers (bench/peers.py)
#   5. writes bench/results/<date>-<host>[-quick]/{machine.json,results.json,table.md,chart.png}
#
# Usage: scripts/bench.sh [--quick] [--out DIR] [--no-install] [--no-build] [-- PEERS_ARGS...]
#   --quick       small sizes and short budgets (a few minutes; checks that everything runs)
#   --out DIR     output directory (default bench/results/<date>-<host>[-quick])
#   --no-install  use .venv as it is (no pip)
#   --no-build    do not build redfuse (the redfuse column then uses whatever build/redfuse is)
#   PEERS_ARGS    passed to bench/peers.py, e.g. -- --only softmax,attention --budget 1
# Environment: PYTHON (interpreter for the venv, default python3), REDFUSE_BENCH_VENV (default .venv),
# CXX (default g++), REDFUSE (the redfuse executable, default build/redfuse).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

QUICK=0; OUT=""; INSTALL=1; BUILD=1; PEERS_ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --out) OUT=$2; shift ;;
    --no-install) INSTALL=0 ;;
    --no-build) BUILD=0 ;;
    --) shift; PEERS_ARGS=("$@"); break ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

PYTHON=${PYTHON:-python3}
VENV=${REDFUSE_BENCH_VENV:-$ROOT/.venv}
CXX=${CXX:-g++}
HOST=$(hostname -s 2>/dev/null || hostname)
if [ -z "$OUT" ]; then
  OUT="bench/results/$(date +%Y-%m-%d)-$HOST"
  [ $QUICK -eq 1 ] && OUT="$OUT-quick"
fi
mkdir -p "$OUT"
T0=$(date +%s)

# ---------------------------------------------------------------------------- 1. the venv
if [ $INSTALL -eq 1 ]; then
  if [ ! -x "$VENV/bin/python" ]; then
    echo "== creating $VENV ($($PYTHON --version 2>&1))"
    "$PYTHON" -m venv "$VENV"
  fi
  STAMP="$VENV/.redfuse-bench-requirements"
  WANT=$(cat bench/requirements.txt bench/requirements-tvm.txt | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
    echo "== installing the pinned peers into $VENV (torch's PyPI wheel brings ~4.5 GB of CUDA wheels; minutes)"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r bench/requirements.txt
    rm -f "$VENV/.tvm-install.log"
    if ! "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r bench/requirements-tvm.txt \
         > "$VENV/.tvm-install.log" 2>&1; then
      echo "== apache-tvm did not install: the TVM column will say why ($VENV/.tvm-install.log)"
    fi
    echo "$WANT" > "$STAMP"
  fi
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "bench.sh: no virtual environment at $VENV (run without --no-install)" >&2
  exit 1
fi
"$VENV/bin/python" -c "import torch, numpy" 2>/dev/null || {
  echo "bench.sh: torch/numpy do not import from $VENV; rerun without --no-install" >&2; exit 1; }

# ---------------------------------------------------------------------------- 2. builds
if [ $BUILD -eq 1 ]; then
  # Only the redfuse target (the tests are not needed here); scripts/setup.sh configures a fresh tree.
  if [ -f build/build.ninja ]; then
    echo "== building redfuse (ninja -C build redfuse)"
    ninja -C build redfuse > "$OUT/build.log" 2>&1 || echo "== redfuse did not build (see $OUT/build.log): its columns will say so"
  else
    echo "== configuring and building redfuse (scripts/setup.sh)"
    scripts/setup.sh > "$OUT/build.log" 2>&1 || echo "== redfuse did not build (see $OUT/build.log): its columns will say so"
  fi
fi
mkdir -p build/bench
ML=build/bench/machine_limits
if [ ! -x $ML ] || [ bench/machine/machine_limits.cpp -nt $ML ]; then
  echo "== building $ML"
  "$CXX" -std=c++17 -O3 -march=native -fopenmp bench/machine/machine_limits.cpp -o $ML
fi

# ---------------------------------------------------------------------------- 3. machine limits
echo "== measuring the machine's limits ($ML)"
ML_ARGS=(); [ $QUICK -eq 1 ] && ML_ARGS+=(--quick)
$ML "${ML_ARGS[@]}" > "$OUT/machine.json"
"$VENV/bin/python" - "$OUT/machine.json" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
l = m["limits"]
print("   memory %s GB/s (one core %s), fp32 FMA %s GFLOP/s, bf16 dot %s GFLOP/s, int8 dot %s GOP/s"
      % (l["mem_GBps"], l["mem_GBps_one_core"], l["fp32_GFLOPs"], l["bf16_GFLOPs"], l["int8_GOPs"]))
EOF

# ---------------------------------------------------------------------------- 4. the peers
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

# ---------------------------------------------------------------------------- 5. summary
echo
cat "$OUT/table.md"
echo
echo "== done in $(( $(date +%s) - T0 )) s: $OUT/{machine.json,results.json,table.md,chart.png}"
