#!/usr/bin/env bash
# run-dsh.sh DSH_DIR — the whole system on one machine (`make run-dsh`), the way a person's own DSH
# runs it: a DeepSeek Harness with dshloop's plugin and no dshloop to connect to, so the plugin starts
# the profile's own dshloop (API, panel, scheduler: dsh-plugin/src/own-dshloop.ts), its data in the
# profile, its token made in DSH and handed over on a pipe. This script installs, prints the admin
# line the first time, waits until DSH, dshloop and `self` answer, and prints the URLs. Ctrl-C (or
# SIGTERM to this script) stops DSH, which stops its dshloop.
#
# Env: DSHLOOP_VAR_DIR (default var), DSHLOOP_PORT (8000: the profile's dshloop's port, fixed here so
# the panel's URL stays put), DSH_PORT (3080), DSH_HOME (default $DSHLOOP_VAR_DIR/dsh-home; dshloop's
# data is then in $DSH_HOME/profiles/web/dshloop), DSHLOOP_DSH_CWD (the workspace of `new` and `self`
# sessions, default $DSHLOOP_VAR_DIR/dsh-work), DEEPSEEK_API_KEY (the model's key; without it DSH's
# turns end in MISSING_CREDENTIAL), DEEPSEEK_BASE_URL (another endpoint, e.g. a stub).
set -euo pipefail
cd "$(dirname "$0")/.."
DSH_DIR=${1:?usage: run-dsh.sh DSH_DIR}
PY=$(pwd)/.venv/bin/python
VAR_DIR=${DSHLOOP_VAR_DIR:-var}
DSHLOOP_PORT=${DSHLOOP_PORT:-8000}
DSH_PORT=${DSH_PORT:-3080}
mkdir -p -m 700 "$VAR_DIR"
VAR_DIR=$(cd "$VAR_DIR" && pwd)
DSH_HOME=${DSH_HOME:-$VAR_DIR/dsh-home}
WORK=${DSHLOOP_DSH_CWD:-$VAR_DIR/dsh-work}
mkdir -p "$DSH_HOME" "$WORK"
DSH_HOME=$(cd "$DSH_HOME" && pwd)
WORK=$(cd "$WORK" && pwd)
DSHLOOP_URL="http://127.0.0.1:$DSHLOOP_PORT"
DSH_URL="http://127.0.0.1:$DSH_PORT"
DATA_DIR=$DSH_HOME/profiles/web/dshloop

# 1. DSH (installed once, ~30 s) with the plugin in this home's web profile.
scripts/install-dsh.sh "$DSH_DIR" >/dev/null
DSH_DIR=$(cd "$DSH_DIR" && pwd)
scripts/install-dsh-plugin.sh "$DSH_DIR" "$DSH_HOME" >/dev/null

# 2. The `dshloop` command the plugin runs: this clone's (an installed dshloop is on PATH instead).
#    The profile's dshloop keeps its own database and key, so nothing here points it elsewhere.
mkdir -p "$VAR_DIR/bin"
printf '#!/bin/sh\nexec %q -m dshloop "$@"\n' "$PY" >"$VAR_DIR/bin/dshloop"
chmod +x "$VAR_DIR/bin/dshloop"
export -n DSHLOOP_URL DSHLOOP_PORT 2>/dev/null || true
unset DSHLOOP_TOKEN DSHLOOP_TOKEN_FD DSHLOOP_HOST DSHLOOP_DSH_URL DSHLOOP_VAR_DIR DATABASE_URL DJANGO_SECRET_KEY
# The admin line, the first time, before DSH starts: the plugin's own bootstrap keeps no output.
mkdir -p -m 700 "$DATA_DIR"
DSHLOOP_VAR_DIR=$DATA_DIR "$VAR_DIR/bin/dshloop" migrate --noinput -v 0
DSHLOOP_VAR_DIR=$DATA_DIR "$VAR_DIR/bin/dshloop" bootstrap --without-host --url "$DSHLOOP_URL" |
  { grep -v '^API token created' || true; } # for curl: `dshloop create_api_token` makes one

dsh_pid=
stop() {
  trap - INT TERM EXIT
  # DSH stops its dshloop on the way out. 15 s, then SIGKILL (by PID: ours only); a killed DSH's
  # dshloop stops by itself (serve --exit-with-stdin).
  if [ -n "$dsh_pid" ]; then
    kill -TERM "$dsh_pid" 2>/dev/null || true
    for _ in $(seq 1 60); do kill -0 "$dsh_pid" 2>/dev/null || break; sleep 0.25; done
    kill -KILL "$dsh_pid" 2>/dev/null || true
  fi
  wait 2>/dev/null || true
  for _ in $(seq 1 80); do curl -fsS -m 1 -o /dev/null "$DSHLOOP_URL/api/health" 2>/dev/null || break; sleep 0.25; done
  echo "stopped DSH and dshloop"
}
trap stop INT TERM EXIT

# 3. DSH, with nothing of dshloop's in its environment but where its dshloop goes: the command, the
#    port and the workspace of the sessions dshloop makes.
echo "starting DSH on $DSH_URL (log: $DSH_HOME/dsh.log; its dshloop's: $DATA_DIR/dshloop.log)"
(
  cd "$DSH_HOME"
  export PATH="$DSH_DIR/tools/node_modules/.bin:$PATH" DSH_HOME DSH_TELEMETRY_DISABLED=1
  DSHLOOP_COMMAND=$VAR_DIR/bin/dshloop DSHLOOP_PORT=$DSHLOOP_PORT DSHLOOP_DSH_CWD=$WORK exec node \
    "$DSH_DIR/app/node_modules/@deepseek-ai/dsh/lib/bin.js" web --patch "$DSH_DIR/hmr.patch.yml" \
    --no-open --host 127.0.0.1 --port "$DSH_PORT" >"$DSH_HOME/dsh.log" 2>&1 </dev/null
) &
dsh_pid=$!

# `dsh web: URL` is printed before boot finishes (DSH-HOST.md §0.3): ask host.describe; then dshloop's
# health, then the global interface session (`self`) the plugin's bootstrap makes, with its first turn.
rpc() { curl -fsS -m 5 -H 'Content-Type: application/json' -d "{\"type\":\"client-request\",\"rpcId\":\"ready\",\"method\":\"$1\",\"payload\":{}}" "$DSH_URL/api/$1" 2>/dev/null; }
global_made='import json, sys; s = {i["sessionId"]: i for i in json.load(sys.stdin)["result"]["value"]["items"]}; sys.exit(s.get("dshloop-global", {}).get("blank") is not False)'
ready=
for _ in $(seq 1 240); do
  kill -0 "$dsh_pid" 2>/dev/null || {
    echo "DSH exited during boot:" >&2
    tail -20 "$DSH_HOME/dsh.log" >&2
    exit 1
  }
  if rpc host.describe | grep -q '"ok":true' &&
    curl -sS -m 2 -o /dev/null -w '%{http_code}' "$DSHLOOP_URL/api/health" 2>/dev/null | grep -q '^[25]' &&
    rpc session.list | "$PY" -c "$global_made" 2>/dev/null; then
    ready=1
    break
  fi
  sleep 0.5
done
[ -n "$ready" ] || {
  echo "DSH or its dshloop did not come up within 120 s; DSH's log ($DSH_HOME/dsh.log) says:" >&2
  grep dshloop "$DSH_HOME/dsh.log" | tail -5 >&2
  exit 1
}

if [ -n "${DEEPSEEK_BASE_URL:-}" ]; then
  model="agents answer with the model at DEEPSEEK_BASE_URL ($DEEPSEEK_BASE_URL)"
elif [ -n "${DEEPSEEK_API_KEY:-}" ]; then
  model="DEEPSEEK_API_KEY is set: agents answer with DeepSeek's model"
else
  model="no DEEPSEEK_API_KEY: DSH's turns end in MISSING_CREDENTIAL (loops are delivered, their
            runs record the failure, five in a row pause a loop); for real answers stop, then:
            DEEPSEEK_API_KEY=sk-... make run-dsh"
fi
cat <<EOF

  DSH Web:  $DSH_URL   the loop tools in every agent, each conversation's loops in its composer and Loops tab, every loop under Loops in the sidebar
  dshloop:  $DSHLOOP_URL/panel/   run by DSH for its profile (data in $DATA_DIR); sign in with the admin user printed the first time
  model:    $model
  Ctrl-C stops both.

EOF
wait "$dsh_pid" || true
