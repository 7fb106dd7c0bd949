#!/usr/bin/env bash
# install-dsh-plugin.sh DSH_DIR DSH_HOME — add dshloop's DSH plugin (dsh-plugin/) to the `web` profile
# under DSH_HOME of the DSH installed in DSH_DIR by scripts/install-dsh.sh (contract §13).
#
# 1. Builds the plugin when needed, with the Node 22 and pnpm of DSH_DIR: its dependencies from
#    dsh-plugin/pnpm-lock.yaml (--frozen-lockfile), then lib/ by esbuild when a source is newer.
# 2. `dsh plugin --profile web add <dsh-plugin>`: pnpm links the package into the profile (a symlink,
#    so a rebuild needs no reinstall) and DSH adds it to the profile's bundles.
# Idempotent: a second run finds the build and the profile's link and does nothing. Exits non-zero
# with a message when it cannot. The running DSH picks the plugin up at its next start.
#
# At its next start DSH runs the profile's own dshloop (the `dshloop` command on its PATH, or
# DSHLOOP_COMMAND); or, with DSHLOOP_URL in its environment, connects to that dshloop, whose token
# a launcher hands over on a file descriptor named by DSHLOOP_TOKEN_FD (docs/dsh.md).
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: install-dsh-plugin.sh DSH_DIR DSH_HOME" >&2
  exit 2
fi
DSH_DIR=$(cd "$1" 2>/dev/null && pwd) || {
  echo "no DSH install at $1: run scripts/install-dsh.sh $1 first" >&2
  exit 1
}
mkdir -p "$2"
DSH_HOME=$(cd "$2" && pwd)
PLUGIN_DIR=$(cd "$(dirname "$0")/../dsh-plugin" && pwd)
BIN_JS="$DSH_DIR/app/node_modules/@deepseek-ai/dsh/lib/bin.js"
if [ ! -f "$BIN_JS" ] || [ ! -x "$DSH_DIR/tools/node_modules/.bin/node" ]; then
  echo "no DSH install at $DSH_DIR: run scripts/install-dsh.sh $DSH_DIR first" >&2
  exit 1
fi
export PATH="$DSH_DIR/tools/node_modules/.bin:$PATH"
export npm_config_update_notifier=false

"$(dirname "$0")/build-dsh-plugin.sh" "$DSH_DIR"

PROFILE="$DSH_HOME/profiles/web"
LINK="$PROFILE/node_modules/@dshloop/dsh-plugin"
if [ -L "$LINK" ] && [ "$(readlink -f "$LINK")" = "$PLUGIN_DIR" ] &&
  grep -q '"@dshloop/dsh-plugin"' "$PROFILE/package.json" 2>/dev/null &&
  node -e 'const p = require(process.argv[1]); process.exit(p.dsh?.profile?.bundles?.includes("@dshloop/dsh-plugin") ? 0 : 1)' \
    "$PROFILE/package.json"; then
  echo "dshloop plugin already in $PROFILE"
  exit 0
fi
# Any bin.js call writes under $DSH_HOME: it is always set here.
DSH_HOME="$DSH_HOME" DSH_TELEMETRY_DISABLED=1 node "$BIN_JS" plugin --profile web add "$PLUGIN_DIR"
echo "dshloop plugin added to $PROFILE (restart DSH to load it)"
