#!/usr/bin/env bash
# Writes every example's generated sources (emit --target cpu|opencl|cuda, analyze --emit tile) into
# DIR, so two builds of redfuse can be compared byte for byte (refactorings must not change them):
#   scripts/snapshot_sources.sh /tmp/before; ...change...; scripts/snapshot_sources.sh /tmp/after
#   diff -r /tmp/before /tmp/after
# Usage: scripts/snapshot_sources.sh DIR [REDFUSE_BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/snapshot_sources.sh DIR [REDFUSE_BINARY]}
bin=${2:-build/redfuse}
mkdir -p "$out"
# Fixed sizes and threads: the CPU schedule depends on the machine description, which is pinned here.
for spec in examples/*.rf; do
  name=$(basename "$spec" .rf)
  for t in cpu opencl cuda; do
    "$bin" emit "$spec" --target "$t" -o "$out/$name.$t" --name k >/dev/null 2>"$out/$name.$t.err" || true
  done
  "$bin" analyze "$spec" --emit tile >"$out/$name.tile" 2>&1 || true
  # analyze_ms is a timing: left out so that two runs compare equal.
  "$bin" analyze "$spec" --json 2>&1 | grep -v '"analyze_ms"' >"$out/$name.json" || true
done
echo "wrote $(find "$out" -type f | wc -l) files to $out"
