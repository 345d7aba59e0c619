#!/usr/bin/env bash
# Throwaway PostgreSQL and Redis servers for weir's external-sink tests and
# examples, bound to 127.0.0.1 only. Installs Debian's packages when missing.
#
#   eval "$(bash scripts/services.sh start)"   # install (once), start both, export their URLs
#   bash scripts/services.sh status            # prints the export lines; exits 1 if one is down
#   bash scripts/services.sh stop              # stops both and deletes their data
#
# `start` prints, on stdout and nothing else:
#   export WEIR_POSTGRES_URL=postgresql://postgres@127.0.0.1:5433/weir
#   export WEIR_REDIS_URL=redis://127.0.0.1:6380/0
# (other ports when those are taken by something else). It is idempotent:
# servers this script started and that still answer are reused.
#
# PostgreSQL: a new cluster (initdb, trust auth, no fsync: test data only) in
# $WEIR_SERVICES_HOME/postgres, run as the `postgres` system user (initdb and
# postgres refuse to run as root; Debian's package creates that user), with
# its socket in the same directory, database `weir`. Redis: redis-server with
# no persistence (--save '' --appendonly no).
#
# Settings (environment):
#   WEIR_POSTGRES_PORT   first port to try for PostgreSQL (default 5433)
#   WEIR_REDIS_PORT      first port to try for Redis (default 6380)
#   WEIR_SERVICES_HOME   state directory (default /tmp/weir-services)
set -euo pipefail

HOME_DIR="${WEIR_SERVICES_HOME:-/tmp/weir-services}"
PG_DIR="$HOME_DIR/postgres"
PG_DATA="$PG_DIR/data"
PG_LOG="$PG_DIR/server.log"
PG_PORT_FILE="$PG_DIR/port"
REDIS_DIR="$HOME_DIR/redis"
REDIS_PID="$REDIS_DIR/redis.pid"
REDIS_LOG="$REDIS_DIR/redis.log"
REDIS_PORT_FILE="$REDIS_DIR/port"
PG_USER=postgres

log() { echo "services.sh: $*" >&2; }

port_open() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# The first port from $1 on that nothing listens on.
free_port() {
  local p=$1
  for _ in $(seq 1 50); do
    if ! port_open "$p"; then
      echo "$p"
      return 0
    fi
    p=$((p + 1))
  done
  log "no free port in $1..$p"
  exit 1
}

apt_install() {
  if [[ $(id -u) != 0 ]]; then
    log "$* is missing; install it (as root: apt-get install -y $*)"
    exit 1
  fi
  log "installing $* with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -qq "$@" >/dev/null 2>&1; then
    apt-get update -qq >/dev/null
    apt-get install -y -qq "$@" >/dev/null
  fi
}

pg_bin() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
  if [[ -z "$d" || ! -x "$d/initdb" ]]; then
    apt_install postgresql >&2
    d=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  fi
  echo "$d"
}

# Runs a command as the postgres user (or as is, when not root).
as_pg() {
  if [[ $(id -u) == 0 ]]; then
    runuser -u "$PG_USER" -- "$@"
  else
    "$@"
  fi
}

pg_port() { cat "$PG_PORT_FILE" 2>/dev/null || true; }

pg_answers() {
  local bin port
  port=$(pg_port)
  [[ -n "$port" && -f "$PG_DATA/postmaster.pid" ]] || return 1
  bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [[ -n "$bin" ]] && "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" -d weir -U "$PG_USER"
}

start_postgres() {
  if pg_answers; then
    return 0
  fi
  local bin port
  bin=$(pg_bin)
  id "$PG_USER" >/dev/null 2>&1 || apt_install postgresql >&2
  if [[ -f "$PG_DATA/postmaster.pid" ]]; then
    as_pg "$bin/pg_ctl" -D "$PG_DATA" stop -m immediate >/dev/null 2>&1 || true
  fi
  rm -rf "$PG_DIR"
  mkdir -p "$PG_DIR"
  chmod 755 "$HOME_DIR"
  [[ $(id -u) == 0 ]] && chown "$PG_USER" "$PG_DIR"
  if ! as_pg test -w "$PG_DIR"; then
    log "the $PG_USER user cannot write $PG_DIR: set WEIR_SERVICES_HOME to a directory it can reach (default /tmp/weir-services)"
    exit 1
  fi
  port=$(free_port "${WEIR_POSTGRES_PORT:-5433}")
  if ! as_pg "$bin/initdb" -D "$PG_DATA" -U "$PG_USER" --auth=trust --encoding=UTF8 \
      --no-sync >"$PG_DIR/initdb.log" 2>&1; then
    log "initdb failed:"; cat "$PG_DIR/initdb.log" >&2; exit 1
  fi
  if ! as_pg "$bin/pg_ctl" -D "$PG_DATA" -l "$PG_LOG" -w -t 60 -o \
      "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$PG_DIR -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
      start >/dev/null; then
    log "PostgreSQL did not start; its log:"; tail -30 "$PG_LOG" >&2; exit 1
  fi
  echo "$port" > "$PG_PORT_FILE"
  as_pg "$bin/createdb" -h 127.0.0.1 -p "$port" -U "$PG_USER" weir
  log "PostgreSQL $(basename "$(dirname "$bin")") on 127.0.0.1:$port (data: $PG_DATA, log: $PG_LOG)"
}

stop_postgres() {
  local bin
  bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
  if [[ -n "$bin" && -f "$PG_DATA/postmaster.pid" ]]; then
    as_pg "$bin/pg_ctl" -D "$PG_DATA" stop -m fast -w >/dev/null 2>&1 || true
    log "PostgreSQL stopped"
  fi
  rm -rf "$PG_DIR"
}

redis_port() { cat "$REDIS_PORT_FILE" 2>/dev/null || true; }

redis_our_pid() {
  [[ -f "$REDIS_PID" ]] || return 1
  local pid
  pid=$(cat "$REDIS_PID")
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

redis_answers() {
  local port
  port=$(redis_port)
  [[ -n "$port" ]] && redis_our_pid >/dev/null &&
    [[ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" == PONG ]]
}

start_redis() {
  if redis_answers; then
    return 0
  fi
  command -v redis-server >/dev/null 2>&1 || apt_install redis-server >&2
  stop_redis 2>/dev/null
  mkdir -p "$REDIS_DIR"
  local port
  port=$(free_port "${WEIR_REDIS_PORT:-6380}")
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    --daemonize yes --pidfile "$REDIS_PID" --logfile "$REDIS_LOG" --dir "$REDIS_DIR" >/dev/null
  echo "$port" > "$REDIS_PORT_FILE"
  for _ in $(seq 1 50); do
    if redis_answers; then
      log "Redis $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') on 127.0.0.1:$port (log: $REDIS_LOG)"
      return 0
    fi
    sleep 0.2
  done
  log "redis-server did not answer; its log:"; tail -20 "$REDIS_LOG" >&2; exit 1
}

stop_redis() {
  local pid
  if pid=$(redis_our_pid); then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
    log "Redis stopped (pid $pid)"
  fi
  rm -rf "$REDIS_DIR"
}

print_env() {
  echo "export WEIR_POSTGRES_URL=postgresql://$PG_USER@127.0.0.1:$(pg_port)/weir"
  echo "export WEIR_REDIS_URL=redis://127.0.0.1:$(redis_port)/0"
}

case "${1:-}" in
  start)
    mkdir -p "$HOME_DIR"
    start_postgres
    start_redis
    print_env
    ;;
  status)
    ok=0
    pg_answers || { log "PostgreSQL is not running"; ok=1; }
    redis_answers || { log "Redis is not running"; ok=1; }
    [[ $ok == 0 ]] && print_env
    exit $ok
    ;;
  stop)
    stop_postgres
    stop_redis
    ;;
  *)
    echo "usage: $0 start|status|stop" >&2
    exit 2
    ;;
esac
