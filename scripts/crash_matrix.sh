#!/usr/bin/env bash
# The whole crash-injection matrix (issue 10): every failpoint x batch x
# sink/output-mode pair, each run killed with SIGKILL at its point, restarted
# (some killed again during the replay), run to the end and compared with an
# uninterrupted run on a fresh backend. Starts Kafka, PostgreSQL and Redis on
# 127.0.0.1 as scripts/test.sh does. CI runs a seeded sample of it as part of
# the test suite (tests/it/crash_matrix.rs).
#
#   bash scripts/crash_matrix.sh            # all runs (several hundred; ~20-40 min on 2 cores)
#   WEIR_CRASH_RUNS=50 WEIR_CRASH_SEED=7 bash scripts/crash_matrix.sh   # a sample
set -euo pipefail
cd "$(dirname "$0")/.."
export WEIR_CRASH_RUNS="${WEIR_CRASH_RUNS:-all}"
exec bash scripts/test.sh --test it -- --exact \
  crash_matrix::kill_at_every_step_matches_an_uninterrupted_run --nocapture
