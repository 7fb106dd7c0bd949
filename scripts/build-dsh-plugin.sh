#!/usr/bin/env bash
# build-dsh-plugin.sh DSH_DIR [build|check|lint|test] — build dsh-plugin/ with the Node 22 and pnpm
# that scripts/install-dsh.sh put in DSH_DIR: dependencies from the lockfile, then lib/ when a source
# is newer than it (`build`, the default).
# lib/ is committed, as DSH plugins ship (`dsh plugin add` of a clone, a tag or the copy inside the
# Python package needs no build), so `check` builds into a temporary directory and fails when that
# differs from lib/: a source changed without its bundle. `lint` checks and type-checks (tsc;
# `make lint`); `test` builds and runs the unit tests of the pure parts (node --test; `make test`).
# Without DSH's Node 22, every mode but `build` says so and skips, except under CI=true, where it fails.
# Idempotent and quiet when there is nothing to do; concurrent runs serialise on a lock.
set -euo pipefail

DSH_DIR=${1:?usage: build-dsh-plugin.sh DSH_DIR [build|check|lint|test]}
MODE=${2:-build}
PLUGIN_DIR=$(cd "$(dirname "$0")/../dsh-plugin" && pwd)
if [ ! -x "$DSH_DIR/tools/node_modules/.bin/node" ] || [ ! -x "$DSH_DIR/tools/node_modules/.bin/pnpm" ]; then
  message="no Node 22/pnpm in $DSH_DIR/tools: run scripts/install-dsh.sh $DSH_DIR (or make dsh) first"
  if [ "$MODE" != build ] && [ "${CI:-}" != true ]; then
    echo "dsh-plugin $MODE skipped: $message" >&2
    exit 0
  fi
  echo "$message" >&2
  exit 1
fi
export PATH="$DSH_DIR/tools/node_modules/.bin:$PATH"
export npm_config_update_notifier=false
cd "$PLUGIN_DIR"
exec 9>"$PLUGIN_DIR/.build.lock"
flock 9

# The store sits beside DSH's install, outside the clone: hard links need one file system, and a
# second clone reuses the downloads.
STAMP=node_modules/.lockfile-installed
if [ ! -f "$STAMP" ] || [ pnpm-lock.yaml -nt "$STAMP" ] || [ package.json -nt "$STAMP" ]; then
  pnpm install --frozen-lockfile --store-dir "$DSH_DIR/cache/plugin-store" --reporter=silent
  touch "$STAMP"
fi

# The committed bundle against what the sources build now, byte for byte.
check() {
  local out
  out=$(mktemp -d)
  trap 'rm -rf "$out"' RETURN
  node scripts/build.mjs "$out/lib"
  if ! diff -r -q lib "$out/lib" >&2; then
    echo "dsh-plugin/lib/ is not what dsh-plugin/src builds: run scripts/build-dsh-plugin.sh $DSH_DIR and commit dsh-plugin/lib/ with the sources" >&2
    return 1
  fi
}

# Only when a source is newer than the bundle: a fresh clone whose checkout dated them either way
# rebuilds the same bytes (scripts/build.mjs), so its tree stays clean.
build_when_stale() {
  local newest_source
  newest_source=$(find src scripts package.json -type f -newer lib/client.js 2>/dev/null | head -1 || true)
  if [ ! -f lib/index.js ] || [ ! -f lib/client.js ] || [ -n "$newest_source" ]; then
    node scripts/build.mjs
  fi
}

case "$MODE" in
  build) build_when_stale ;;
  check) check ;;
  lint)
    check
    pnpm --silent typecheck
    ;;
  test)
    build_when_stale
    node --test --test-reporter=dot 'test/*.test.ts'
    ;;
  *)
    echo "unknown mode $MODE: build, check, lint or test" >&2
    exit 2
    ;;
esac
