#!/bin/sh
# Runs the end-to-end tests (ctest label e2e).  Installs the npm clients on
# first use (npm ci from package-lock.json).  KILN_BIN names the kiln binary.
set -eu
cd "$(dirname "$0")"
if ! command -v node >/dev/null 2>&1; then
  echo "e2e: node is not installed (scripts/deps.sh installs it)" >&2
  exit 1
fi
if [ ! -d node_modules ]; then
  if [ -f package-lock.json ]; then npm ci --no-audit --no-fund; else npm install --no-audit --no-fund; fi
fi
exec node --test --test-concurrency=1 ./*.test.mjs
