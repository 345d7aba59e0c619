#!/usr/bin/env bash
# Runs the lab / page_views benchmark on Apache Spark 3.5.1 (local[2]) and
# prints the same JSON fields as weir-bench. A tool for people, not CI.
#   scripts/spark_bench.sh lab
#   scripts/spark_bench.sh page_views
#   KAFKA_TOPIC=<clicks topic> scripts/spark_bench.sh kafka   # the seed's Kafka
#     pipeline (see spark_bench.py; scripts/kafka_bench.sh runs it after weir
#     on the same topic when WEIR_BENCH_SPARK=1)
# Then compare with: cargo run --release -p weir-bench -- lab
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${WEIR_SPARK_VENV:-$HOME/.cache/weir-spark-venv}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q pyspark==3.5.1
fi
command -v java >/dev/null || { echo "Spark needs Java 17 (java not found)" >&2; exit 1; }
exec "$venv/bin/python" "$here/spark_bench.py" "${1:-lab}"
