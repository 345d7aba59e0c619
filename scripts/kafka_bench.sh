#!/usr/bin/env bash
# Throughput of the seed's pipeline end to end: Kafka (clicks, JSON) ->
# from_json -> 2-minute watermark -> 1-minute window count per page (update
# mode) -> Kafka (exactly once, one transaction per batch). Prints events/s.
#
#   bash scripts/kafka_bench.sh [EVENTS] [MAX_OFFSETS_PER_TRIGGER]   # defaults 1000000, 200000
#
# Uses the broker at $KAFKA_BOOTSTRAP, or starts one with scripts/kafka.sh
# (and stops it afterwards). Builds the examples with the `kafka-bench`
# profile (Cargo.toml: weir, rdkafka and Arrow optimized, DataFusion not).
# Set WEIR_BENCH_PROFILE=dev for the plain debug build, or release; set
# WEIR_BENCH_BIN=DIR to run page_views and click_generator from DIR instead
# (e.g. a copy of an earlier build, to compare two builds one after the other).
# Prints the pipeline's own figures, then its CPU time and peak RSS. With
# WEIR_BENCH_SPARK=1, Spark 3.5.1 then runs the same pipeline on the same
# topic (scripts/spark_bench.sh kafka; its Kafka sink is at least once).
# Each run leaves its topics on the broker (1M clicks: ~150 MB): the
# broker keeps every record (no retention limit), so restart it
# (`bash scripts/kafka.sh stop; bash scripts/kafka.sh start` starts empty)
# after many runs.
set -euo pipefail
cd "$(dirname "$0")/.."
EVENTS="${1:-1000000}"
MAX_OFFSETS="${2:-200000}"
PROFILE="${WEIR_BENCH_PROFILE:-kafka-bench}"
TARGET="${CARGO_TARGET_DIR:-target}"

started=""
if [[ -z "${KAFKA_BOOTSTRAP:-}" ]]; then
  if ! KAFKA_BOOTSTRAP=$(bash scripts/kafka.sh status 2>/dev/null); then
    KAFKA_BOOTSTRAP=$(bash scripts/kafka.sh start)
    started=1
  fi
fi
export KAFKA_BOOTSTRAP
trap '[[ -z "$started" ]] || bash scripts/kafka.sh stop' EXIT

if [[ -n "${WEIR_BENCH_BIN:-}" ]]; then
  dir="$WEIR_BENCH_BIN"
else
  cargo build --profile "$PROFILE" --features kafka --example page_views --example click_generator
  dir="$TARGET/$PROFILE/examples"
  [[ "$PROFILE" == dev ]] && dir="$TARGET/debug/examples"
fi
run="$(date +%s)-$$"
chk=$(mktemp -d)
echo "== producing $EVENTS clicks (4 partitions, 1000 pages, event time 2000 clicks/s, 20 s disorder, 0.5% late)"
"$dir/click_generator" --topic "bench-clicks-$run" --partitions 4 --rate 0 --event-rate 2000 --count "$EVENTS"
echo "== page views: Kafka -> window(1 min) x page count -> Kafka (exactly once), maxOffsetsPerTrigger $MAX_OFFSETS, profile $PROFILE"
timed=()
if [[ -x /usr/bin/time ]]; then
  timed=(/usr/bin/time -f "process: %U s user + %S s system CPU, %e s wall, peak RSS %M KB")
fi
"${timed[@]}" "$dir/page_views" --topic "bench-clicks-$run" --starting-offsets earliest --available-now \
  --max-offsets "$MAX_OFFSETS" --sink kafka --out-topic "bench-views-$run" --checkpoint "$chk/chk"
rm -rf "$chk"
if [[ "${WEIR_BENCH_SPARK:-0}" == 1 ]]; then
  echo "== Spark 3.5.1 (local[2]) on the same topic, maxOffsetsPerTrigger $MAX_OFFSETS"
  KAFKA_TOPIC="bench-clicks-$run" KAFKA_OUT_TOPIC="bench-spark-views-$run" MAX_OFFSETS="$MAX_OFFSETS" \
    bash scripts/spark_bench.sh kafka
fi
