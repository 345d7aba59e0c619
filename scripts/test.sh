#!/usr/bin/env bash
# The whole test suite: what the README names and what CI runs.
#   unit tests, the Spark conformance scenarios (memory and RocksDB state),
#   the integration tests, the trybuild compile-fail cases and the doctests,
#   with every feature on: the Kafka tests run against a real broker and the
#   PostgreSQL/Redis sink tests against real servers, all on 127.0.0.1.
# Servers: when KAFKA_BOOTSTRAP / WEIR_POSTGRES_URL / WEIR_REDIS_URL are unset,
# scripts/kafka.sh and scripts/services.sh start them (and they are stopped
# afterwards). It first installs what a fresh machine lacks (scripts/setup.sh:
# librocksdb-dev libclang-dev postgresql redis-server, Maven and Java 17 for the
# broker) when run as root, and otherwise says exactly what to install.
# Extra arguments go to `cargo test` (e.g. `--test it -- kafka::`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
started_kafka=""
started_services=""
cleanup() {
  [[ -z "$started_kafka" ]] || bash scripts/kafka.sh stop >/dev/null 2>&1 || true
  [[ -z "$started_services" ]] || bash scripts/services.sh stop >/dev/null 2>&1 || true
}
trap cleanup EXIT
if [[ -z "${KAFKA_BOOTSTRAP:-}" ]]; then
  if ! KAFKA_BOOTSTRAP=$(bash scripts/kafka.sh status 2>/dev/null); then
    KAFKA_BOOTSTRAP=$(bash scripts/kafka.sh start)
    started_kafka=1
  fi
fi
export KAFKA_BOOTSTRAP
if [[ -z "${WEIR_POSTGRES_URL:-}" || -z "${WEIR_REDIS_URL:-}" ]]; then
  if ! services=$(bash scripts/services.sh status 2>/dev/null); then
    services=$(bash scripts/services.sh start)
    started_services=1
  fi
  eval "$services"
fi
cargo test --workspace --all-features "$@"
