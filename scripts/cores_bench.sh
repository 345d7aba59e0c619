#!/usr/bin/env bash
# How far 2 workers in one process are from what the machine gives two
# cores: per round, one 1-worker run alone, two 1-worker runs at once
# (separate processes: the hardware's ceiling for two cores), one 2-worker
# run, then one 1-worker run held to one core (`taskset -c 0`: its query
# thread shares the worker's core, as the 2-worker run's shares theirs);
# prints each in M rows/s and the ratios of the 2-worker run to the first
# and to the last.
#
#   cargo build --profile kafka-bench -p weir-bench
#   bash scripts/cores_bench.sh [scenario] [rounds] [extra weir-bench args...]
#   (default: page_views, 5 rounds, --batches 300)
#
# WEIR_BENCH_BIN: the weir-bench binary (default the kafka-bench profile's
# under CARGO_TARGET_DIR or target/). Checkpoints go under /dev/shm, not
# fsync'd: the engine is measured, not the disk.
set -euo pipefail
scenario=${1:-page_views}
rounds=${2:-5}
shift $(( $# < 2 ? $# : 2 ))
extra=("$@")
[ ${#extra[@]} -eq 0 ] && extra=(--batches 300)
bin=${WEIR_BENCH_BIN:-${CARGO_TARGET_DIR:-target}/kafka-bench/weir-bench}
[ -x "$bin" ] || { echo "no weir-bench at $bin: build it first (see the header)" >&2; exit 1; }
base=$(mktemp -d /dev/shm/weir-cores.XXXXXX)
trap 'rm -rf "$base"' EXIT
run() { # workers checkpoint-dir [pinning...] -> M rows/s
  local w=$1 dir=$2
  shift 2
  "$@" "$bin" "$scenario" --partitions 2 --workers "$w" --fsync false \
    --checkpoint "$base/$dir" "${extra[@]}" 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["rows_per_sec"]/1e6)'
}
for _ in $(seq "$rounds"); do
  one=$(run 1 a)
  run 1 b > "$base/b.out" &
  c=$(run 1 c)
  wait
  b=$(cat "$base/b.out")
  two=$(run 2 d)
  pinned=$(run 1 e taskset -c 0)
  echo "$one $b $c $two $pinned" | awk '{printf "1 worker %.1f | two 1-worker processes at once %.1f + %.1f = %.1f (%.2fx) | 2 workers %.1f (%.2fx) | 1 worker on one core %.1f (2 workers: %.2fx)\n", $1, $2, $3, $2+$3, ($2+$3)/$1, $4, $4/$1, $5, $4/$5}'
  rm -rf "$base"/[abcde]
done
