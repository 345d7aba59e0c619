#!/usr/bin/env bash
# The whole test suite: what the README names and what CI runs.
#   unit tests, the Spark conformance scenarios (memory and RocksDB state),
#   the integration tests, the trybuild compile-fail cases and the doctests,
#   with every feature on: the Kafka tests run against a real broker and the
#   PostgreSQL/Redis sink tests against real servers, and the object-storage
#   tests against a real S3 API server (moto), all on 127.0.0.1.
# Servers: when KAFKA_BOOTSTRAP / WEIR_POSTGRES_URL / WEIR_REDIS_URL /
# WEIR_S3_ENDPOINT are unset, scripts/kafka.sh, scripts/services.sh and
# scripts/s3.sh start them (and they are stopped afterwards). The S3 tests'
# AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_REGION / AWS_ALLOW_HTTP
# default to test / test / us-east-1 / true when unset. It first installs what
# a fresh machine lacks (scripts/setup.sh: librocksdb-dev libclang-dev
# postgresql redis-server, Maven and Java 17 for the broker, python3-venv for
# moto) when run as root, and otherwise says exactly what to install.
# Extra arguments go to `cargo test` (e.g. `--test it -- kafka::`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
started_kafka=""
started_services=""
started_s3=""
cleanup() {
  [[ -z "$started_s3" ]] || bash scripts/s3.sh stop >/dev/null 2>&1 || true
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
if [[ -z "${WEIR_S3_ENDPOINT:-}" ]]; then
  if ! WEIR_S3_ENDPOINT=$(bash scripts/s3.sh status 2>/dev/null); then
    WEIR_S3_ENDPOINT=$(bash scripts/s3.sh start)
    started_s3=1
  fi
fi
export WEIR_S3_ENDPOINT
export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-test}"
export AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-test}"
export AWS_REGION="${AWS_REGION:-us-east-1}"
export AWS_ALLOW_HTTP="${AWS_ALLOW_HTTP:-true}"
cargo test --workspace --all-features "$@"
