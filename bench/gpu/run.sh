#!/usr/bin/env bash
# bench/gpu/run.sh — the one-shot GPU validation and benchmark of redfuse (an H200, for minutes).
# Run from the repository root, after bench/gpu/prepare.sh has filled .gpu-carry/ (here):
#
#   bash bench/gpu/run.sh                          # on the device machine: --target cuda, $OUT set
#   bash bench/gpu/run.sh --target cpu --quick     # here, no GPU: every code path against the CPU backend
#   bash bench/gpu/run.sh --target opencl --quick  # here: the GPU kernels (OpenCL C on PoCL) through the same script
#
#   a. unpacks the carried .deb files (.gpu-carry/debs) into a private prefix (dpkg -x, never into /),
#      configures and builds redfuse (CMake + Ninja, -DREDFUSE_TESTS=OFF, Release, all cores)
#   b. prints nvidia-smi (clocks, power), nvcc and torch versions
#   c. check:   redfuse run SPEC --target T --check --json, every examples/*.rf at 3 size sets
#   d. compare: redfuse run --save at realistic sizes, compared with torch float64 on the saved inputs
#   f. python:  the extension built against the device's python (nanobind from .gpu-carry/wheels), then
#               bench/gpu/python_cuda.py: the Python API on CUDA tensors, and its call overhead
#   e. bench:   measured limits (copy bandwidth, bf16/fp8 matrix rates), then redfuse bench and the
#               torch peers per case (bench/gpu/gpu_bench.py); then the report
#   g. host AMX: where the host CPU has AMX, the AMX tile GEMMs against the reference and bench/micro
#               with and without them ($OUT/host_micro_{amx,noamx}.txt), in the time left
#   Writes $OUT/{run.log,build.log,gpu_results.json,table.md}; keeps going past failures.
#
# Options: --target cuda|cpu (default cuda)  --quick (tiny bench sizes)  --build-dir DIR (default
#   build-bench)  --no-build  --time-limit S (whole run; default 440 on cuda, 1800 on cpu)
#   --phases check,compare,python,bench (default: all)  --only W1,W2 (bench workloads)  --jobs N  --keep-work
# Environment: OUT (default out/gpu-<target>), PYTHON (the interpreter with torch).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
ROOT=$(pwd)

TARGET=cuda; QUICK=0; BUILD_DIR=build-bench; BUILD=1; TIME_LIMIT=""; PHASES=check,compare,python,bench
ONLY=""; JOBS=""; KEEP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --target) TARGET=$2; shift ;;
    --quick) QUICK=1 ;;
    --build-dir) BUILD_DIR=$2; shift ;;
    --no-build) BUILD=0 ;;
    --time-limit) TIME_LIMIT=$2; shift ;;
    --phases) PHASES=$2; shift ;;
    --only) ONLY=$2; shift ;;
    --jobs) JOBS=$2; shift ;;
    --keep-work) KEEP=1 ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
case "$TARGET" in cuda|cpu|opencl) ;; *) echo "run.sh: --target cuda|cpu|opencl" >&2; exit 2 ;; esac
[ -n "$TIME_LIMIT" ] || { [ "$TARGET" = cuda ] && TIME_LIMIT=440 || TIME_LIMIT=1800; }

OUT=${OUT:-$ROOT/out/gpu-$TARGET}
mkdir -p "$OUT"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/redfuse-gpu.XXXXXX")
T0NS=$(date +%s%N)
export GPU_BENCH_T0="${T0NS:0:-9}.${T0NS: -9}"
export PYTHONUNBUFFERED=1
T0S=${GPU_BENCH_T0%.*}
DEADLINE=$((T0S + TIME_LIMIT))

log() { local d=$(( ($(date +%s%N) - T0NS) / 100000000 ))
        printf '[%8s %s] %s\n' "$((d / 10)).$((d % 10))s" "$(date +%H:%M:%S)" "$*"; }
now() { date +%s; }
left() { echo $((DEADLINE - $(now))); }
PHASE_TIMES=()
phase_done() { PHASE_TIMES+=("\"$1\": $(( $(now) - $2 ))"); }
has_phase() { case ",$PHASES," in *",$1,"*) return 0 ;; esac; return 1; }

# g. The host CPU's AMX tiles (the device machine's host may be an AMX Xeon; development machines so
# far were not): when /proc/cpuinfo has amx_tile, the AMX GEMMs (redfuse_simd_amx.h) run against the
# reference (the simd test's driver, -march=native), and bench/micro runs with and without them.
# Compiled in the background after the build; run at the end, in what time is left.
AMX_PID=""
host_amx_start() {
  grep -q ' amx_tile' /proc/cpuinfo 2>/dev/null || { log "g. host AMX: the host CPU has no AMX"; return; }
  local cxx=${CXX:-c++}
  ( timeout -k 5 240 "$cxx" -std=c++17 -O2 -DRFK_SIMD_DRIVER -pthread -Isrc -march=native \
      tests/unit/runtime/simd_kernels_test.cpp -o "$WORK/simd_amx_check" &&
    timeout -k 5 240 "$cxx" -std=c++17 -O3 -march=native -fopenmp bench/micro/simd_bench.cpp -o "$WORK/simd_bench_amx" &&
    timeout -k 5 240 "$cxx" -std=c++17 -O3 -march=native -fopenmp -DRFK_NO_AMX bench/micro/simd_bench.cpp \
      -o "$WORK/simd_bench_noamx" ) > "$OUT/host_amx_build.log" 2>&1 &
  AMX_PID=$!
  log "g. host AMX: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); building the AMX checks (pid $AMX_PID)"
}
host_amx_check() {
  [ -n "$AMX_PID" ] || return
  wait "$AMX_PID" || { log "g. host AMX: build failed ($(tail -3 "$OUT/host_amx_build.log" | tr '\n' ' '))"; AMX_PID=""; return; }
  log "g. host AMX: the AMX GEMMs against the reference: $(timeout 60 "$WORK/simd_amx_check" 2>&1 | tail -3 | tr '\n' ' ')"
}
host_amx_micro() {
  [ -n "$AMX_PID" ] || return
  for v in amx noamx; do
    [ $(left) -gt 12 ] || { log "g. host AMX: no time left for bench/micro ($v)"; break; }
    timeout $(( $(left) - 10 < 20 ? $(left) - 10 : 20 )) "$WORK/simd_bench_$v" --seconds 0.05 > "$OUT/host_micro_$v.txt" 2>&1
    log "g. host AMX: bench/micro ($v) -> $OUT/host_micro_$v.txt"
  done
}

# Builds redfuse._redfuse for the device's python (nanobind: the carried wheel, or one installed) in
# the same build folder, then runs bench/gpu/python_cuda.py on the target's tensors.
python_phase() {
  local py=$1 deps="$ROOT/$BUILD_DIR/pydeps" wheels=("$ROOT"/.gpu-carry/wheels/*.whl)
  if ! "$py" -c 'import nanobind' 2>/dev/null && [ -e "${wheels[0]}" ]; then
    rm -rf "$deps"; "$py" -m pip install -q --no-index --no-deps --target "$deps" "${wheels[@]}" >> "$OUT/build.log" 2>&1 \
      || log "f. could not install the carried wheels"
  fi
  export PYTHONPATH="$ROOT/python:$deps${PYTHONPATH:+:$PYTHONPATH}"
  log "f. python: building the extension (nanobind $("$py" -c 'import nanobind; print(nanobind.__version__)' 2>&1 | tail -1))"
  if timeout 120 cmake -S . -B "$BUILD_DIR" -DREDFUSE_PYTHON=ON -DPython_EXECUTABLE="$(command -v "$py" || echo "$py")" >> "$OUT/build.log" 2>&1 \
     && timeout 240 cmake --build "$BUILD_DIR" --target _redfuse -j "$(nproc)" >> "$OUT/build.log" 2>&1; then
    cp "$BUILD_DIR"/_redfuse*.so "$ROOT/python/redfuse/"
    local dev=cuda; [ "$TARGET" = cuda ] || dev=cpu
    timeout -k 5 $(( $(left) - 90 > 30 ? $(left) - 90 : 30 )) "$py" "$ROOT/bench/gpu/python_cuda.py" --out "$OUT" --device $dev \
      || log "f. python_cuda.py exited $?"
  else
    log "f. python: the extension did not build: $(grep -m1 -iE 'error' "$OUT/build.log" | cut -c1-200)"
  fi
}

main() {
  log "== redfuse GPU validation + benchmark: target $TARGET$([ $QUICK = 1 ] && echo ' (quick)'), limit ${TIME_LIMIT}s, out $OUT"
  log "   repo $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?') ($(git -C "$ROOT" status --porcelain 2>/dev/null | wc -l) changed files), host $(hostname 2>/dev/null || cat /proc/sys/kernel/hostname), $(nproc) cores"

  # ------------------------------------------------------------------------------ tools
  [ -d /opt/torch/.venv/bin ] && export PATH="$PATH:/opt/torch/.venv/bin"   # pip's cmake and ninja
  local py=${PYTHON:-}
  if [ -z "$py" ]; then
    if [ "$TARGET" != cuda ] && [ -x "$ROOT/.venv/bin/python" ]; then py="$ROOT/.venv/bin/python"; else py=python3; fi
  fi
  if ! "$py" -c 'import torch, numpy' 2>/dev/null; then
    for c in /opt/torch/.venv/bin/python3 "$ROOT/.venv/bin/python" python3; do
      if "$c" -c 'import torch, numpy' 2>/dev/null; then py=$c; break; fi
    done
  fi
  log "   python: $py ($("$py" -c 'import torch, numpy; print("torch", torch.__version__, "numpy", numpy.__version__)' 2>&1 | tail -1))"
  local gb=("$py" "$ROOT/bench/gpu/gpu_bench.py")

  if [ "$TARGET" = cuda ]; then
    if [ -z "${CUDA_HOME:-}" ]; then
      if command -v nvcc >/dev/null; then CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
      elif [ -d /usr/local/cuda ]; then CUDA_HOME=/usr/local/cuda; fi
      [ -n "${CUDA_HOME:-}" ] && export CUDA_HOME
    fi
    log "   CUDA_HOME=${CUDA_HOME:-unset}; nvcc: $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo 'not found')"
  fi

  # ------------------------------------------------------------------------------ a. build
  local REDFUSE="$ROOT/$BUILD_DIR/redfuse" t=$(now) status=skipped reason=""
  if [ $BUILD -eq 1 ]; then
    local cmake_args=(-DREDFUSE_TESTS=OFF -DCMAKE_BUILD_TYPE=Release)
    local debs=("$ROOT"/.gpu-carry/debs/*.deb)
    if [ -e "${debs[0]}" ]; then
      local prefix="$ROOT/$BUILD_DIR/deps-prefix"
      rm -rf "$prefix"; mkdir -p "$prefix"
      for d in "${debs[@]}"; do
        if command -v dpkg >/dev/null; then dpkg -x "$d" "$prefix"
        else "$py" - "$d" "$prefix" <<'EOF'
import io, sys, tarfile
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"!<arch>\n", "not an ar archive"
pos = 8
while pos < len(data):
    name, size = data[pos:pos + 16].decode().strip().rstrip("/"), int(data[pos + 48:pos + 58])
    body = data[pos + 60:pos + 60 + size]
    if name.startswith("data.tar"):
        tarfile.open(fileobj=io.BytesIO(body), mode="r:*").extractall(sys.argv[2])
    pos += 60 + size + (size & 1)
EOF
        fi || log "   could not unpack $d"
      done
      cmake_args+=("-DCMAKE_PREFIX_PATH=$prefix/usr")
      for pc in nlohmann_json CLI11; do
        [ -d "$prefix/usr/share/cmake/$pc" ] && cmake_args+=("-D${pc}_DIR=$prefix/usr/share/cmake/$pc")
      done
      log "a. unpacked ${#debs[@]} carried packages into $prefix ($(ls "$ROOT"/.gpu-carry/debs | tr '\n' ' '))"
    else
      log "a. no .gpu-carry/debs/*.deb (run bench/gpu/prepare.sh here first); using the system's packages"
    fi
    local gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
    log "a. configuring $BUILD_DIR (cmake $(cmake --version 2>/dev/null | head -1 | awk '{print $3}'), $(${CXX:-c++} --version 2>/dev/null | head -1))"
    if [ -f "$BUILD_DIR/CMakeCache.txt" ] && ! grep -q "CMAKE_GENERATOR:INTERNAL=Ninja" "$BUILD_DIR/CMakeCache.txt" \
       && [ ${#gen[@]} -gt 0 ]; then rm -rf "$BUILD_DIR/CMakeCache.txt" "$BUILD_DIR/CMakeFiles"; fi
    if ! timeout 120 cmake -S . -B "$BUILD_DIR" "${gen[@]}" "${cmake_args[@]}" > "$OUT/build.log" 2>&1; then
      status=failed; reason="cmake configure failed: $(grep -m1 -i error "$OUT/build.log" | cut -c1-200)"
      tail -20 "$OUT/build.log"
    else
      log "a. building redfuse (-j$(nproc))"
      if timeout 300 cmake --build "$BUILD_DIR" --target redfuse -j "$(nproc)" >> "$OUT/build.log" 2>&1; then
        status=ok
      else
        status=failed; reason="build failed (exit $?): $(grep -m1 -E 'error|Error' "$OUT/build.log" | cut -c1-200)"
        grep -E -m 20 -B2 -A3 'error' "$OUT/build.log" | tail -40
      fi
    fi
  else
    [ -x "$REDFUSE" ] && status=prebuilt || { status=missing; reason="--no-build and no $BUILD_DIR/redfuse"; }
  fi
  log "a. redfuse build: $status$([ -n "$reason" ] && echo ": $reason") ($(( $(now) - t )) s)"
  printf '{"status": "%s", "seconds": %d, "reason": "%s", "build_dir": "%s"}\n' "$status" "$(( $(now) - t ))" \
    "$(echo "$reason" | tr '"\\' "''")" "$BUILD_DIR" > "$WORK/build.json"
  phase_done build "$t"
  host_amx_start
  local have_rf=1
  if [ "$status" = failed ] || [ "$status" = missing ] || [ ! -x "$REDFUSE" ]; then have_rf=0; fi

  # The CUDA backend loads NVRTC with dlopen: when ldconfig does not know it, run redfuse through a
  # wrapper that adds its folder (only for redfuse: torch keeps its own CUDA libraries).
  local RF="$REDFUSE"
  if [ "$TARGET" = cuda ] && [ $have_rf = 1 ]; then
    if ldconfig -p 2>/dev/null | grep -q 'libnvrtc\.so'; then
      log "   nvrtc: $(ldconfig -p | grep -m1 'libnvrtc\.so' | awk '{print $NF}') (ldconfig)"
    else
      local lib; lib=$(ls -1 "${CUDA_HOME:-/usr/local/cuda}"/lib64/libnvrtc.so* /usr/local/cuda*/lib64/libnvrtc.so* \
                      /usr/local/cuda*/targets/*/lib/libnvrtc.so* 2>/dev/null | head -1)
      [ -n "$lib" ] || lib=$("$py" -c 'import glob, site, os; print(next(iter(sorted(glob.glob(os.path.join(site.getsitepackages()[0], "nvidia", "*", "lib", "libnvrtc.so*")))), ""))' 2>/dev/null)
      if [ -n "$lib" ]; then
        RF="$WORK/redfuse"
        printf '#!/bin/sh\nexport LD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"\nexec "%s" "$@"\n' \
          "$(dirname "$lib")" "$REDFUSE" > "$RF"
        chmod +x "$RF"
        log "   nvrtc: $lib (not in ldconfig: redfuse runs with LD_LIBRARY_PATH=$(dirname "$lib"))"
      else
        log "   nvrtc: not found (the CUDA backend will say so)"
      fi
    fi
  fi

  # ------------------------------------------------------------------------------ b. the GPU
  t=$(now)
  if [ "$TARGET" = cuda ]; then
    log "b. GPU"
    nvidia-smi 2>&1 | head -20
    nvidia-smi --query-gpu=name,driver_version,pstate,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.draw,power.limit,temperature.gpu --format=csv 2>&1
    nvidia-smi -q -d CLOCK 2>/dev/null | sed -n '/Clocks$/,/Max Clocks/p' | head -30
  else
    log "b. CPU target: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores (no GPU info)"
  fi
  "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' 2>&1 | tail -1
  [ $have_rf = 1 ] && "$RF" run "$ROOT/examples/softmax.rf" --target "$TARGET" --json > "$WORK/probe.txt" 2>&1 \
    && log "b. redfuse run --target $TARGET works" || log "b. redfuse run --target $TARGET: $(grep -m1 -i error "$WORK/probe.txt" 2>/dev/null || head -1 "$WORK/probe.txt" 2>/dev/null)"
  phase_done info "$t"

  local common=(--target "$TARGET" --redfuse "$RF" --work "$WORK")
  [ -n "$JOBS" ] && common+=(--jobs "$JOBS")
  local check_s=90 compare_s=60
  [ "$TARGET" != cuda ] && { check_s=900; compare_s=300; }

  # ------------------------------------------------------------------------------ c. check
  if has_phase check && [ $have_rf = 1 ]; then
    t=$(now)
    local dl=$(( $(now) + check_s )); [ $dl -gt $((DEADLINE - 60)) ] && dl=$((DEADLINE - 60))
    log "c. check: every example at 3 size sets (until +$((dl - T0S)) s)"
    timeout -k 10 $((dl - $(now) + 30)) "${gb[@]}" check "${common[@]}" --deadline "$dl" || log "c. check exited $?"
    phase_done check "$t"
  else
    log "c. check: skipped ($([ $have_rf = 1 ] && echo 'not in --phases' || echo 'no redfuse'))"
  fi

  # ------------------------------------------------------------------------------ d. compare
  if has_phase compare && [ $have_rf = 1 ]; then
    t=$(now)
    local dl=$(( $(now) + compare_s )); [ $dl -gt $((DEADLINE - 45)) ] && dl=$((DEADLINE - 45))
    log "d. compare: run --save + torch float64 (until +$((dl - T0S)) s)"
    timeout -k 10 $((dl - $(now) + 30)) "${gb[@]}" compare "${common[@]}" --deadline "$dl" || log "d. compare exited $?"
    phase_done compare "$t"
  else
    log "d. compare: skipped ($([ $have_rf = 1 ] && echo 'not in --phases' || echo 'no redfuse'))"
  fi

  # ------------------------------------------------------------------------------ f. python
  if has_phase python && [ $have_rf = 1 ] && [ $(left) -gt 150 ]; then
    t=$(now)
    python_phase "$py"
    phase_done python "$t"
  else
    log "f. python: skipped ($(has_phase python || echo 'not in --phases'; [ $have_rf = 1 ] || echo 'no redfuse'; [ $(left) -gt 150 ] || echo 'no time'))"
  fi

  t=$(now)
  host_amx_check
  phase_done host_amx "$t"

  # ------------------------------------------------------------------------------ e. bench
  if has_phase bench; then
    t=$(now)
    local dl=$((DEADLINE - 15)) extra=()
    [ -n "$AMX_PID" ] && dl=$((dl - 45))  # g's two bench/micro runs after it
    [ $QUICK = 1 ] && extra+=(--quick)
    [ -n "$ONLY" ] && extra+=(--only "$ONLY")
    log "e. bench: limits, then redfuse and the peers per case (until +$((dl - T0S)) s)"
    timeout -k 10 -s TERM $((dl - $(now) + 20)) "${gb[@]}" bench "${common[@]}" --deadline "$dl" "${extra[@]}" \
      || log "e. bench exited $?"
    phase_done bench "$t"
  fi

  host_amx_micro

  # ------------------------------------------------------------------------------ report
  (IFS=,; echo "{${PHASE_TIMES[*]}}") > "$WORK/phases.json"
  log "report: $OUT/gpu_results.json, $OUT/table.md"
  "${gb[@]}" report --target "$TARGET" --work "$WORK" --out "$OUT" || log "report exited $?"
  log "== done in $(( $(now) - T0S )) s (limit $TIME_LIMIT s); $OUT: $(ls "$OUT" | tr '\n' ' ')"
  if [ $KEEP = 1 ]; then log "   work folder kept: $WORK"; else rm -rf "$WORK"; fi
}

main 2>&1 | tee "$OUT/run.log"
exit "${PIPESTATUS[0]}"
