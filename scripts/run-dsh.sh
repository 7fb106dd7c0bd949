#!/usr/bin/env bash
# run-dsh.sh DSH_DIR — the whole system on one machine (`make run-dsh`): a DeepSeek Harness with
# dshloop's plugin, and dshloop (API, panel, scheduler) with DSHLOOP_HOST=dsh, both on loopback,
# a token wired between them. Ctrl-C (or SIGTERM to this script) stops both and waits for them.
#
# Env: DSHLOOP_VAR_DIR (default var), DSHLOOP_PORT (8000), DSH_PORT (3080), DSH_HOME (default
# $DSHLOOP_VAR_DIR/dsh-home), DSHLOOP_DSH_CWD (the workspace of `new` and `self` sessions, default
# $DSHLOOP_VAR_DIR/dsh-work), DEEPSEEK_API_KEY (the model's key; without it DSH's turns end in
# MISSING_CREDENTIAL), DEEPSEEK_BASE_URL (another endpoint, e.g. a stub).
set -euo pipefail
cd "$(dirname "$0")/.."
DSH_DIR=${1:?usage: run-dsh.sh DSH_DIR}
PY=.venv/bin/python
VAR_DIR=${DSHLOOP_VAR_DIR:-var}
DSHLOOP_PORT=${DSHLOOP_PORT:-8000}
DSH_PORT=${DSH_PORT:-3080}
mkdir -p -m 700 "$VAR_DIR"
VAR_DIR=$(cd "$VAR_DIR" && pwd)
export DSHLOOP_VAR_DIR=$VAR_DIR
DSH_HOME=${DSH_HOME:-$VAR_DIR/dsh-home}
WORK=${DSHLOOP_DSH_CWD:-$VAR_DIR/dsh-work}
mkdir -p "$DSH_HOME" "$WORK"
DSH_HOME=$(cd "$DSH_HOME" && pwd)
WORK=$(cd "$WORK" && pwd)
DSHLOOP_URL="http://127.0.0.1:$DSHLOOP_PORT"
DSH_URL="http://127.0.0.1:$DSH_PORT"

# 1. DSH (installed once, ~30 s) with the plugin in this home's web profile.
scripts/install-dsh.sh "$DSH_DIR" >/dev/null
DSH_DIR=$(cd "$DSH_DIR" && pwd)
scripts/install-dsh-plugin.sh "$DSH_DIR" "$DSH_HOME" >/dev/null

# 2. dshloop's database, its admin and token (printed the first time), and the plugin's token: a
#    fresh one for this launch (the earlier ones revoked), held in this shell only, never in a file
#    or an environment an agent could read (docs/dsh.md, "The plugin's token").
export DSHLOOP_HOST=dsh DSHLOOP_DSH_URL=$DSH_URL DSHLOOP_DSH_CWD=$WORK
unset DSHLOOP_TOKEN # an agent's bash could read it in DSH's environment: the descriptor below is the way
$PY manage.py migrate --noinput -v 0
# The admin line names the port served here; the global interface session is made below, once DSH answers.
$PY manage.py bootstrap --without-host --url "$DSHLOOP_URL"
rm -f "$VAR_DIR/dsh-plugin-token"      # where earlier versions kept it; its token is revoked now
plugin_token=$($PY manage.py dsh_plugin_token)
[ -n "$plugin_token" ] || {
  echo "manage.py dsh_plugin_token gave no token" >&2
  exit 1
}

dsh_pid=
serve_pid=
stop() {
  trap - INT TERM EXIT
  # Both ignore a second signal while they stop; each gets 15 s, then SIGKILL (by PID: ours only).
  for pid in $serve_pid $dsh_pid; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in $serve_pid $dsh_pid; do
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  echo "stopped DSH and dshloop"
}
trap stop INT TERM EXIT

# 3. DSH, with DSHLOOP_URL in its environment and the token on descriptor 3: a here-string is a
#    pipe (or an already-unlinked file) that the plugin reads to its end and closes at boot, before
#    any agent runs, so no agent's command inherits it (dsh-plugin/src/token.ts).
echo "starting DSH on $DSH_URL (log: $DSH_HOME/dsh.log)"
(
  cd "$DSH_HOME"
  export PATH="$DSH_DIR/tools/node_modules/.bin:$PATH" DSH_HOME DSH_TELEMETRY_DISABLED=1
  DSHLOOP_URL=$DSHLOOP_URL DSHLOOP_TOKEN_FD=3 exec node \
    "$DSH_DIR/app/node_modules/@deepseek-ai/dsh/lib/bin.js" web --patch "$DSH_DIR/hmr.patch.yml" \
    --no-open --host 127.0.0.1 --port "$DSH_PORT" >"$DSH_HOME/dsh.log" 2>&1 </dev/null 3<<<"$plugin_token"
) &
dsh_pid=$!
plugin_token=
ready=
for _ in $(seq 1 120); do
  kill -0 "$dsh_pid" 2>/dev/null || {
    echo "DSH exited during boot:" >&2
    tail -20 "$DSH_HOME/dsh.log" >&2
    exit 1
  }
  # `dsh web: URL` is printed before boot finishes (DSH-HOST.md §0.3): ask host.describe.
  if curl -fsS -m 2 -H 'Content-Type: application/json' \
    -d '{"type":"client-request","rpcId":"ready","method":"host.describe","payload":{}}' \
    "$DSH_URL/api/host.describe" 2>/dev/null | grep -q '"ok":true'; then
    ready=1
    break
  fi
  sleep 0.5
done
[ -n "$ready" ] || {
  echo "DSH did not answer on $DSH_URL within 60 s (log: $DSH_HOME/dsh.log)" >&2
  exit 1
}

# 4. dshloop on DSH: the global interface session (`self`), then the API, panel and scheduler.
$PY manage.py bootstrap
$PY manage.py serve "127.0.0.1:$DSHLOOP_PORT" &
serve_pid=$!

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
  dshloop:  $DSHLOOP_URL/panel/   sign in with the admin user printed the first time ($DSHLOOP_URL/admin/)
  model:    $model
  Ctrl-C stops both.

EOF
# Whichever stops first, the other follows (the trap).
wait -n "$dsh_pid" "$serve_pid" || true
