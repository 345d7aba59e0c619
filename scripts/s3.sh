#!/usr/bin/env bash
# A local S3 API server (moto's server mode) for weir's object-storage tests
# and examples, bound to 127.0.0.1 only.
#
#   bash scripts/s3.sh start    # install moto (once), start, wait; prints the endpoint URL
#   bash scripts/s3.sh status   # prints the endpoint and exits 0 if it answers, else exits 1
#   bash scripts/s3.sh stop     # stops the server this script started
#
# moto answers a conditional create (`PutObject` with `If-None-Match: *`) on
# an existing key with 412 PreconditionFailed and keeps the old object, as
# AWS S3 does: weir's create-once checkpoint protocol is tested against it.
# It accepts any credentials (the tests use test/test) and keeps everything
# in memory: a fresh start has no buckets.
#
# moto is installed from PyPI into a virtualenv under $WEIR_S3_HOME (default
# /var/tmp/weir-s3), outside the clone, once. Its log and pid file live there
# too. `start` is idempotent: a server that already answers is reused.
#
# Settings (environment):
#   WEIR_S3_PORT   the port (default 39900)
#   WEIR_S3_HOME   state directory (default /var/tmp/weir-s3)
#   WEIR_S3_MOTO   the moto version (default 5.2.5)
set -euo pipefail

PORT="${WEIR_S3_PORT:-39900}"
HOME_DIR="${WEIR_S3_HOME:-/var/tmp/weir-s3}"
MOTO_VERSION="${WEIR_S3_MOTO:-5.2.5}"
ENDPOINT="http://127.0.0.1:${PORT}"
VENV="$HOME_DIR/venv"
RUN_DIR="$HOME_DIR/run-$PORT"
PID_FILE="$RUN_DIR/server.pid"
LOG_FILE="$RUN_DIR/server.log"

log() { echo "s3.sh: $*" >&2; }
# port_open, our_pid, stop_server
source "$(dirname "${BASH_SOURCE[0]}")/server_lib.sh"

answers() {
  # Up when a ListBuckets answers with S3's XML (not just an open port).
  port_open "$PORT" || return 1
  local body
  body=$(python3 - "$ENDPOINT" <<'EOF' 2>/dev/null
import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1] + "/", timeout=2) as r:
        print(r.read().decode("utf-8", "replace"))
except Exception:
    sys.exit(1)
EOF
) || return 1
  [[ "$body" == *ListAllMyBucketsResult* ]]
}

install() {
  if [[ -x "$VENV/bin/moto_server" && -f "$VENV/.moto-$MOTO_VERSION" ]]; then
    return 0
  fi
  command -v python3 >/dev/null 2>&1 || { log "python3 is needed: apt-get install -y python3 python3-venv"; exit 1; }
  python3 -c 'import venv, ensurepip' 2>/dev/null || { log "python3's venv module is needed: apt-get install -y python3-venv"; exit 1; }
  log "installing moto[server]==$MOTO_VERSION into $VENV (once)"
  mkdir -p "$HOME_DIR"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  if ! "$VENV/bin/pip" install -q "moto[server]==$MOTO_VERSION" >"$HOME_DIR/pip.log" 2>&1; then
    log "pip could not install moto[server]==$MOTO_VERSION; see $HOME_DIR/pip.log"
    tail -20 "$HOME_DIR/pip.log" >&2
    exit 1
  fi
  touch "$VENV/.moto-$MOTO_VERSION"
}

# Starts moto in the background; prints its pid.
launch() {
  : > "$LOG_FILE"
  # setsid: the server outlives this script and is not hit by its terminal's signals.
  setsid "$VENV/bin/moto_server" -H 127.0.0.1 -p "$PORT" >>"$LOG_FILE" 2>&1 < /dev/null &
  local pid=$!
  echo "$pid" > "$PID_FILE"
  log "started moto pid $pid (log: $LOG_FILE)"
  echo "$pid"
}

start() {
  if answers; then
    echo "$ENDPOINT"
    return 0
  fi
  local pid
  if pid=$(our_pid); then
    log "a server (pid $pid) is starting; waiting for it"
  else
    if port_open "$PORT"; then
      log "port $PORT is taken by another process; set WEIR_S3_PORT to a free port"
      exit 1
    fi
    install
    mkdir -p "$RUN_DIR"
    pid=$(launch)
  fi
  # A bind can fail for a moment with no listener on the port (seen right
  # after another server on it stopped, in CI): launched again, a few times.
  local binds=0
  for _ in $(seq 1 120); do
    if answers; then
      echo "$ENDPOINT"
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      if grep -q "Address already in use" "$LOG_FILE" && ((binds < 5)) && ! port_open "$PORT"; then
        binds=$((binds + 1))
        log "port $PORT could not be bound yet; starting again in 2 s ($binds of 5)"
        sleep 2
        pid=$(launch)
        continue
      fi
      log "the server exited; its log:"
      tail -40 "$LOG_FILE" >&2
      rm -f "$PID_FILE"
      exit 1
    fi
    sleep 0.5
  done
  log "the server did not answer within 60 s; its log: $LOG_FILE"
  exit 1
}

stop() {
  stop_server 10
}

status() {
  if answers; then
    echo "$ENDPOINT"
    return 0
  fi
  log "not running (no S3 server answers on $ENDPOINT)"
  return 1
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
