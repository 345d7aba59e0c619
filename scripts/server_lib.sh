# Shared by the scripts that run a local server in the background
# (kafka.sh, s3.sh): source it after setting PID_FILE and defining log().

# True when something accepts connections on 127.0.0.1:$1.
port_open() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# The pid in $PID_FILE when that process is alive; fails otherwise.
our_pid() {
  [[ -f "$PID_FILE" ]] || return 1
  local pid
  pid=$(cat "$PID_FILE")
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

# Stops the server in $PID_FILE: SIGTERM, then SIGKILL after $1 seconds.
stop_server() {
  local grace="$1" pid
  if ! pid=$(our_pid); then
    rm -f "$PID_FILE"
    log "not running"
    return 0
  fi
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 $((grace * 4))); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.25
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "pid $pid did not stop in $grace s; killing it"
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$PID_FILE"
  log "stopped (pid $pid)"
}
