#!/usr/bin/env bash
# bench/gpu/prepare.sh — run HERE (with a package registry) before the device call: puts into
# .gpu-carry/ (git-ignored) what bench/gpu/run.sh needs on the device machine and cannot fetch there.
#
#   bash bench/gpu/prepare.sh
#
# What the device machine lacks: the Debian dev packages of the find_package() calls in CMakeLists.txt
# (nlohmann-json3-dev, libcli11-dev: header-only, with relocatable CMake package files; GTest is not
# needed, run.sh builds with -DREDFUSE_TESTS=OFF). They are fetched with `apt-get download` into
# .gpu-carry/debs/ and checked by unpacking them into a scratch folder. Everything else is there:
# g++, CMake and ninja (pip), CUDA 13 (nvcc, NVRTC), python3 with torch, triton and numpy.
# Then prints the size of what travels and the device call to make.
set -euo pipefail
cd "$(dirname "$0")/../.."
CARRY=.gpu-carry

# The line that keeps .gpu-carry/ out of git (it travels because the device call names it in carry).
grep -qxF '.gpu-carry/' .gitignore 2>/dev/null || { echo '.gpu-carry/' >> .gitignore; echo "== added .gpu-carry/ to .gitignore"; }

# find_package() names -> Debian packages. Names listed as 'none' need nothing on the device.
declare -A PKG=(
  [nlohmann_json]="nlohmann-json3-dev"
  [CLI11]="libcli11-dev"
  [GTest]="none (tests are off: -DREDFUSE_TESTS=OFF)"
  [Threads]="none (libc)"
  [OpenMP]="none (g++'s libgomp)"
  [CUDAToolkit]="none (CUDA 13 is on the device)"
  [OpenCL]="opencl-c-headers ocl-icd-opencl-dev ocl-icd-libopencl1"
  [Python]="none (the device's python3; only with -DREDFUSE_PYTHON=ON)"
  [nanobind]="none (the carried wheel, .gpu-carry/wheels)"
)
# (the top-level CMakeLists.txt and those under src/ and tools/; tests/ and fuzz/ are not built there)
mapfile -t names < <(grep -hE '^\s*find_package\(' CMakeLists.txt $(find src tools -name CMakeLists.txt 2>/dev/null) \
                     | sed -E 's/^\s*find_package\(\s*([A-Za-z0-9_]+).*/\1/' | sort -u)
want=()
for n in "${names[@]}"; do
  p=${PKG[$n]:-}
  if [ -z "$p" ]; then
    echo "prepare.sh: CMakeLists.txt calls find_package($n), which this script does not know: add its package to PKG" >&2
    exit 1
  fi
  case "$p" in none*) echo "== find_package($n): $p" ;; *) echo "== find_package($n): $p"; want+=($p) ;; esac
done

# Headers the sources include that a package provides (the OpenCL and CUDA runtimes dlopen their
# libraries and include no vendor header today; CUDA's headers are on the device anyway).
if grep -rqE '#\s*include\s*<CL/' src tools; then
  echo "== the sources include <CL/...>: opencl-c-headers"; want+=(opencl-c-headers)
fi

# Download into a fresh folder, then replace the old set (no stale versions travel).
mkdir -p "$CARRY"
tmp=$(mktemp -d "$CARRY/.dl.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if (cd "$tmp" && apt-get download "${want[@]}" 2>&1 | grep -v 'unsandboxed as root'); then :; fi
got=("$tmp"/*.deb)
if [ ! -e "${got[0]}" ] || [ ${#got[@]} -lt ${#want[@]} ]; then
  if ls "$CARRY"/debs/*.deb >/dev/null 2>&1; then
    echo "prepare.sh: apt-get download failed; keeping the .deb files already in $CARRY/debs" >&2
  else
    echo "prepare.sh: apt-get download ${want[*]} failed (try: apt-get update)" >&2
    exit 1
  fi
else
  rm -rf "$CARRY/debs"
  mkdir -p "$CARRY/debs"
  mv "$tmp"/*.deb "$CARRY/debs/"
fi

# Check: unpacked, they give the CMake package files run.sh points CMake at.
chk=$(mktemp -d)
for d in "$CARRY"/debs/*.deb; do dpkg -x "$d" "$chk"; done
for f in usr/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake usr/share/cmake/CLI11/CLI11Config.cmake \
         usr/include/nlohmann/json.hpp usr/include/CLI/CLI.hpp; do
  [ -f "$chk/$f" ] || { echo "prepare.sh: $f is not in the carried packages" >&2; rm -rf "$chk"; exit 1; }
done
rm -rf "$chk"

# The Python phase builds the extension on the device: nanobind (pure Python + its C++ sources) as a wheel.
mkdir -p "$CARRY/wheels"
if ! python3 -m pip download -q --disable-pip-version-check --no-deps -d "$CARRY/wheels" nanobind==2.4.0 2>&1 | tail -2; then
  echo "prepare.sh: could not download the nanobind wheel: the device's python phase will need nanobind installed" >&2
fi

# Manifest: what was carried, and from where.
{
  echo "# written by bench/gpu/prepare.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ) ($(. /etc/os-release; echo "$PRETTY_NAME"))"
  for d in "$CARRY"/debs/*.deb; do
    echo "$(dpkg-deb -f "$d" Package) $(dpkg-deb -f "$d" Version) $(sha256sum "$d" | cut -c1-16) $(basename "$d")"
  done
  for w in "$CARRY"/wheels/*.whl; do [ -e "$w" ] && echo "wheel $(sha256sum "$w" | cut -c1-16) $(basename "$w")"; done
} > "$CARRY/MANIFEST"
cat "$CARRY/MANIFEST"

# Sizes: .gpu-carry, and everything that travels (tracked + untracked-not-ignored files + carry).
carry_b=$(du -sb "$CARRY" | cut -f1)
tree_b=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
shared_b=0; [ -d shared ] && shared_b=$(du -sb shared | cut -f1)
total=$((carry_b + tree_b + shared_b))
printf '== %s: %d KiB; the working tree that travels: about %.1f MiB of 64 MiB\n' "$CARRY" $((carry_b / 1024)) \
  "$(echo "$total / 1048576" | awk -F/ '{printf "%.1f", $1 / $2}')"
if [ "$total" -gt $((48 << 20)) ]; then
  echo "prepare.sh: the working tree plus $CARRY is over 48 MiB: the device call may be refused (64 MiB)" >&2
fi
cat <<'EOF'
== ready. The device call (one command, about 8 minutes of device time; the machine starts in a minute or two):
   run(command="bash bench/gpu/run.sh", carry=[".gpu-carry"], timeout_s=600)
   then give_back(); the results are $OUT/{table.md,gpu_results.json,run.log,build.log}
   (here, without a GPU: bash bench/gpu/run.sh --target cpu --quick)
EOF
