#!/usr/bin/env bash
# A local single-node Apache Kafka broker (KRaft, broker + controller in one
# JVM) for weir's Kafka tests and examples, bound to 127.0.0.1 only.
#
#   bash scripts/kafka.sh start    # fetch jars (once), format, start, wait; prints the bootstrap address
#   bash scripts/kafka.sh status   # prints the address and exits 0 if it answers, else exits 1
#   bash scripts/kafka.sh stop     # stops the broker this script started
#
# The broker's runtime classpath (org.apache.kafka:kafka_2.13) is resolved by
# Maven into ~/.m2 (outside the clone; fetched once). Its data, log and pid
# file live under $WEIR_KAFKA_HOME (default ~/.cache/weir-kafka). `start` is
# idempotent: a broker that already answers is reused. A fresh start formats
# a new, empty log dir (set WEIR_KAFKA_KEEP_DATA=1 to keep the old one).
#
# Settings (environment):
#   WEIR_KAFKA_VERSION  the Kafka version (default 4.1.1)
#   WEIR_KAFKA_PORT     the client port (default 39092); the controller uses port + 1
#   WEIR_KAFKA_HOME     state directory (default ~/.cache/weir-kafka)
#   WEIR_KAFKA_HEAP     JVM heap (default 512m)
set -euo pipefail

VERSION="${WEIR_KAFKA_VERSION:-4.1.1}"
LOG4J_VERSION="2.24.3"
PORT="${WEIR_KAFKA_PORT:-39092}"
CPORT=$((PORT + 1))
HOME_DIR="${WEIR_KAFKA_HOME:-${HOME:-/root}/.cache/weir-kafka}"
HEAP="${WEIR_KAFKA_HEAP:-512m}"
ADDR="127.0.0.1:${PORT}"
RUN_DIR="$HOME_DIR/run-$PORT"
PID_FILE="$RUN_DIR/broker.pid"
LOG_FILE="$RUN_DIR/server.log"
DATA_DIR="$RUN_DIR/data"
CP_DIR="$HOME_DIR/classpath-$VERSION"

log() { echo "kafka.sh: $*" >&2; }
# port_open, our_pid, stop_server
source "$(dirname "${BASH_SOURCE[0]}")/server_lib.sh"

answers() {
  # The broker is up when its client port accepts connections and it has
  # logged that it started (the port opens a moment before it serves).
  port_open "$PORT" && grep -q "Kafka Server started\|\[KafkaRaftServer nodeId=1\] Kafka Server started" "$LOG_FILE" 2>/dev/null
}

classpath() {
  if [[ -s "$CP_DIR/classpath.txt" ]]; then
    # Re-resolve if a jar was removed from the local repository.
    local missing=0 jar
    while IFS= read -r jar; do
      [[ -f "$jar" ]] || { missing=1; break; }
    done < <(tr ':' '\n' < "$CP_DIR/classpath.txt")
    [[ $missing == 0 ]] && { cat "$CP_DIR/classpath.txt"; return; }
  fi
  command -v mvn >/dev/null 2>&1 || { log "Maven (mvn) is needed to fetch the broker's jars: apt-get install -y maven"; exit 1; }
  command -v java >/dev/null 2>&1 || { log "Java 17+ is needed: apt-get install -y openjdk-17-jre-headless"; exit 1; }
  mkdir -p "$CP_DIR"
  cat > "$CP_DIR/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>weir.local</groupId>
  <artifactId>kafka-broker-classpath</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$VERSION</version></dependency>
    <!-- Kafka logs through slf4j 1.x; this routes it to log4j2 (as the Kafka distribution does). -->
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>$LOG4J_VERSION</version></dependency>
  </dependencies>
</project>
EOF
  log "resolving org.apache.kafka:kafka_2.13:$VERSION with Maven (once; jars go to ~/.m2)"
  if ! mvn -B -q -f "$CP_DIR/pom.xml" dependency:build-classpath \
      -Dmdep.outputFile="$CP_DIR/classpath.tmp" -Dmdep.includeScope=runtime >"$CP_DIR/mvn.log" 2>&1; then
    log "Maven could not resolve the broker's classpath; see $CP_DIR/mvn.log"
    tail -20 "$CP_DIR/mvn.log" >&2
    exit 1
  fi
  mv "$CP_DIR/classpath.tmp" "$CP_DIR/classpath.txt"
  cat "$CP_DIR/classpath.txt"
}

write_config() {
  mkdir -p "$RUN_DIR"
  cat > "$RUN_DIR/server.properties" <<EOF
# Written by scripts/kafka.sh: one KRaft node, broker and controller, loopback only.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CPORT
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CPORT
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$DATA_DIR
num.partitions=1
auto.create.topics.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
# The node's broker holds a lease from its controller (the same JVM),
# renewed by a heartbeat every 2 s. Starved of CPU (clients keeping both
# cores busy, as the scale-out bench's pinned processes do), the broker got
# no heartbeat through for 9 s, the default lease, and the controller fenced
# it (its log: "Exceptionally slow controller event ... took 2076 ms",
# "Unable to send a heartbeat because the RPC got timed out", then "not the
# current leader"): every partition leaderless for ~100 s, every client
# waiting. One node has no other broker to fail over to, so a longer lease
# only waits out such a stall.
broker.session.timeout.ms=30000
# Tests delete records and topics.
delete.topic.enable=true
# No time-based retention: records keep their producers' timestamps, which in
# tests and replays are often days old and would be deleted within seconds.
log.retention.ms=-1
log.retention.check.interval.ms=5000
EOF
  cat > "$RUN_DIR/log4j2.properties" <<EOF
status = error
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = out
logger.server.name = kafka.server
logger.server.level = INFO
EOF
}

start() {
  if answers; then
    echo "$ADDR"
    return 0
  fi
  if pid=$(our_pid); then
    log "a broker (pid $pid) is starting; waiting for it"
  else
    if port_open "$PORT"; then
      log "port $PORT is taken by another process; set WEIR_KAFKA_PORT to a free port"
      exit 1
    fi
    # A closed connection that had the port as its client port (one to a
    # local server, in TIME-WAIT for 60 s) keeps the broker from binding
    # it: wait for it to go.
    if ss -Htan "sport = :$PORT" 2>/dev/null | grep -q .; then
      log "port $PORT is held by closing connections; waiting for them (up to 70 s)"
      for _ in $(seq 1 70); do
        ss -Htan "sport = :$PORT" 2>/dev/null | grep -q . || break
        sleep 1
      done
    fi
    local cp
    cp=$(classpath)
    write_config
    if [[ "${WEIR_KAFKA_KEEP_DATA:-0}" != 1 || ! -f "$DATA_DIR/meta.properties" ]]; then
      rm -rf "$DATA_DIR"
      local jopts=(-Xmx256m -Dlog4j2.configurationFile="$RUN_DIR/log4j2.properties")
      local cluster_id
      cluster_id=$(java "${jopts[@]}" -cp "$cp" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)
      java "${jopts[@]}" -cp "$cp" kafka.tools.StorageTool format -t "$cluster_id" \
        -c "$RUN_DIR/server.properties" >"$RUN_DIR/format.log" 2>&1 || {
        log "formatting the log dir failed:"; cat "$RUN_DIR/format.log" >&2; exit 1; }
    fi
    : > "$LOG_FILE"
    # setsid: the broker outlives this script and is not hit by its terminal's signals.
    setsid java -Xms"$HEAP" -Xmx"$HEAP" -XX:+UseG1GC -Djava.awt.headless=true \
      -Dlog4j2.configurationFile="$RUN_DIR/log4j2.properties" \
      -cp "$cp" kafka.Kafka "$RUN_DIR/server.properties" >>"$LOG_FILE" 2>&1 < /dev/null &
    echo $! > "$PID_FILE"
    pid=$!
    log "started broker pid $pid (log: $LOG_FILE)"
  fi
  for _ in $(seq 1 120); do
    if answers; then
      echo "$ADDR"
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      log "the broker exited; its log:"
      tail -40 "$LOG_FILE" >&2
      rm -f "$PID_FILE"
      exit 1
    fi
    sleep 1
  done
  log "the broker did not answer within 120 s; its log: $LOG_FILE"
  exit 1
}

stop() {
  stop_server 30
}

status() {
  if answers; then
    echo "$ADDR"
    return 0
  fi
  log "not running (no broker answers on $ADDR)"
  return 1
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
