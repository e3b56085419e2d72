#!/usr/bin/env bash
# The repository must stand alone: no file may cite a document that lives outside it (the design
# brief, the workloads list or the research notes the project was started from), and every relative
# link of a Markdown file must point at a file or folder that exists. What those documents said that
# the code relies on is in docs/ (docs/cli.md, docs/language.md, docs/design.md, docs/workloads.md).
#
# Usage: scripts/check_self_contained_docs.sh [SOURCE_DIR]     (exit 0: clean, 1: findings listed)
# Run by CTest as `self_contained_docs` (tests/CMakeLists.txt).
#
# Files checked: what git tracks plus untracked files it does not ignore (so build folders, .venv/
# and the like are skipped); outside a git checkout, every file except build*/, .git/, .venv/ and
# .cache/. Binary files are skipped.
set -uo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 2

# Citations of outside documents. Each pattern is written so that it does not match this file.
patterns=(
  'brief[ ]§'                      # a section citation
  'brief[.]md'
  '[Tt]he brief([^a-z]|$)'         # the document by name, or its possessive
  'brief[’'"'"']s'
  '[.][.]/shared([/ ]|$)'          # the shared folder beside the project
  'shared/(brief|workloads|research|seeds|bench-baselines|hooks)'
  'research/(anchors|paper|aesthetics|toolchain|python-training)'
  'seeds/00[0-9]_'
)

list_files() {
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -z --cached --others --exclude-standard
  else
    find . \( -name .git -o -name '.venv' -o -name '.cache' -o -name 'build*' \) -prune -o -type f -print0 |
      sed -z 's|^\./||'
  fi
}

status=0
files=()
while IFS= read -r -d '' f; do
  [[ -f "$f" ]] && files+=("$f")
done < <(list_files)

# 1. Citations.
joined=$(IFS='|'; echo "${patterns[*]}")
if ((${#files[@]})); then
  hits=$(printf '%s\0' "${files[@]}" | xargs -0 grep -nIE -- "$joined" 2>/dev/null)
  if [[ -n "$hits" ]]; then
    echo "Files cite documents outside the repository (fold the content into docs/ and cite that):"
    echo "$hits"
    status=1
  fi
fi

# 2. Relative links of every Markdown file: [text](target) and ![alt](target).
for md in "${files[@]}"; do
  [[ "$md" == *.md ]] || continue
  dir=$(dirname "$md")
  # Drop fenced code blocks and inline code spans, where ](...) is not a link.
  while IFS= read -r target; do
    target=${target#*](}
    target=${target%)}
    target=${target%% *}          # a title: (file "title")
    target=${target#<}
    target=${target%>}
    case "$target" in
      ''|'#'*|http://*|https://*|mailto:*|ftp://*) continue ;;
    esac
    path=${target%%#*}
    [[ -z "$path" ]] && continue
    if [[ "$path" == /* ]]; then resolved=".$path"; else resolved="$dir/$path"; fi
    if [[ ! -e "$resolved" ]]; then
      echo "$md: broken link ($target): $resolved does not exist"
      status=1
    fi
  done < <(awk '/^[[:space:]]*```/ { fence = !fence; next } !fence' "$md" | sed 's/`[^`]*`//g' |
           grep -oE '\]\([^)[:space:]]+( "[^"]*")?\)')
done

if ((status == 0)); then
  echo "self-contained: ${#files[@]} files cite nothing outside the repository; every Markdown link resolves"
fi
exit $status
