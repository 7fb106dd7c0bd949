#!/usr/bin/env bash
# build-dsh-plugin.sh DSH_DIR [build|lint|test] — build dsh-plugin/ with the Node 22 and pnpm that
# scripts/install-dsh.sh put in DSH_DIR: dependencies from the lockfile, then lib/ when a source is
# newer than it (`build`, the default). `lint` also type-checks (tsc; `make lint`), `test` also runs
# the unit tests of the pure parts (node --test; `make test`).
# Without DSH's Node 22, `lint` and `test` say so and skip, except under CI=true, where they fail.
# Idempotent and quiet when there is nothing to do; concurrent runs serialise on a lock.
set -euo pipefail

DSH_DIR=${1:?usage: build-dsh-plugin.sh DSH_DIR [build|lint|test]}
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

newest_source=$(find src scripts package.json -type f -newer lib/client.js 2>/dev/null | head -1 || true)
if [ ! -f lib/index.js ] || [ ! -f lib/client.js ] || [ -n "$newest_source" ]; then
  node scripts/build.mjs
fi

case "$MODE" in
  build) ;;
  lint) pnpm --silent typecheck ;;
  test) node --test --test-reporter=dot 'test/*.test.ts' ;;
  *)
    echo "unknown mode $MODE: build, lint or test" >&2
    exit 2
    ;;
esac
