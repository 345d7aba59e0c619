#!/usr/bin/env bash
# Installs what the test suite needs and a fresh Debian machine lacks:
#   librocksdb-dev  (the `rocksdb` feature links it instead of compiling RocksDB's C++)
#   libclang-dev    (bindgen, for RocksDB's and librdkafka's bindings)
#   postgresql, redis-server (the exactly-once sink tests run against real servers)
#   maven, openjdk-17-jre-headless (scripts/kafka.sh runs Apache Kafka from Maven Central)
#   python3, python3-venv (scripts/s3.sh installs moto, the S3 API server, from PyPI)
#   chromium        (the Streaming page is tested in headless Chromium)
# As root it installs them with apt-get; otherwise it prints the exact command
# to run and exits 1. Nothing is done when everything is present.
#
#   bash scripts/setup.sh           # what scripts/test.sh and .ci/run call first
set -euo pipefail

need=()
for p in librocksdb-dev libclang-dev postgresql redis-server; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
command -v mvn >/dev/null 2>&1 || need+=(maven)
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
command -v python3 >/dev/null 2>&1 || need+=(python3)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
command -v chromium >/dev/null 2>&1 || [[ -n "${WEIR_CHROMIUM:-}" ]] || need+=(chromium)
(( ${#need[@]} )) || exit 0

if [[ $(id -u) != 0 ]]; then
  echo "setup.sh: missing Debian packages: ${need[*]}" >&2
  echo "setup.sh: install them first, as root:" >&2
  echo "  apt-get update && apt-get install -y ${need[*]}" >&2
  exit 1
fi
echo "setup.sh: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq "${need[@]}" >/dev/null
