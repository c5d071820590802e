#!/usr/bin/env bash
# The C sources' layout, by .clang-format (see STYLE.md).
#   bash scripts/format.sh           format every C file that is not pending
#   bash scripts/format.sh --check   list the ones that are not formatted and fail (CI runs this)
#   bash scripts/format.sh --all     format every C file and empty the pending list (one commit)
# New files count before they are added to git.
# scripts/format-pending.txt lists the files written before the formatter:
# they are left as they are until --all; a file not on it stays formatted.
set -euo pipefail
cd "$(dirname "$0")/.."
fmt=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$fmt" ]; then echo "format: clang-format is not installed (scripts/deps.sh)" >&2; exit 1; fi
pending=scripts/format-pending.txt
mode=${1:-apply}
files=$(git ls-files --cached --others --exclude-standard '*.c' '*.h' | grep -v '^tests/e2e/node_modules/')
if [ "$mode" = "--all" ]; then
  printf '%s\n' $files | xargs "$fmt" -i
  : > "$pending"
  exit 0
fi
todo=$(printf '%s\n' $files | grep -vxF -f <(grep -v '^#' "$pending" 2>/dev/null || true) || true)
if [ "$mode" = "--check" ]; then
  bad=0
  for f in $todo; do
    if ! "$fmt" --dry-run -Werror "$f" >/dev/null 2>&1; then echo "format: $f is not formatted (bash scripts/format.sh)"; bad=1; fi
  done
  exit $bad
fi
printf '%s\n' $todo | xargs -r "$fmt" -i
