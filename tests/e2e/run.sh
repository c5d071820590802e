#!/bin/sh
# Runs the end-to-end tests (ctest label e2e).  Installs the npm clients on
# first use (npm ci from package-lock.json).  KILN_BIN names the kiln binary.
# KILN_E2E_ONLY="lifecycle load" runs only those files (NAME.test.mjs);
# KILN_E2E_SKIP="..." runs all but those.
set -eu
cd "$(dirname "$0")"
if ! command -v node >/dev/null 2>&1; then
  echo "e2e: node is not installed (scripts/deps.sh installs it)" >&2
  exit 1
fi
if [ ! -d node_modules ]; then
  if [ -f package-lock.json ]; then npm ci --no-audit --no-fund; else npm install --no-audit --no-fund; fi
fi
files=
for f in ./*.test.mjs; do
  name=$(basename "$f" .test.mjs)
  if [ -n "${KILN_E2E_ONLY:-}" ]; then
    case " $KILN_E2E_ONLY " in *" $name "*) ;; *) continue ;; esac
  fi
  case " ${KILN_E2E_SKIP:-} " in *" $name "*) continue ;; esac
  files="$files $f"
done
if [ -z "$files" ]; then
  echo "e2e: no test file left (KILN_E2E_ONLY='${KILN_E2E_ONLY:-}', KILN_E2E_SKIP='${KILN_E2E_SKIP:-}')" >&2
  exit 1
fi
# shellcheck disable=SC2086
exec node --test --test-concurrency=1 $files
