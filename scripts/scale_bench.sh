#!/usr/bin/env bash
# Scale-out throughput (#14): the seed's page views over Kafka run by 1, 2
# and 3 processes of one consumer group (one worker thread each), on the same
# input. Prints one JSON line per run, then a summary line per configuration.
#
#   bash scripts/scale_bench.sh [EVENTS] [MAX_OFFSETS_PER_TRIGGER]   # defaults 3000000, 50000
#
# The input is produced once (examples/click_generator: EVENTS clicks keyed by
# user into a topic of $WEIR_SCALE_PARTITIONS partitions, default 6). Each run
# starts N processes of examples/page_views with
#   --scale-out <new group> --checkpoint <new shared dir> --trigger default
#   --conf weir.workerThreads=1 --sink kafka (exactly once) --group-by key|page
# and ends when the processes' batches have read the whole input (and, for
# `page`, the whole repartition topic): each process keeps a one-line JSON
# summary of its batches in a --stats-file, which this script polls (a
# scale-out query runs until stopped; a process that left early would hand
# its partitions to the others and start a rebalance in the middle of the
# measurement, so the end is decided here, for all processes at once).
# Then every process gets SIGINT and stops cleanly.
#
# Per run: events/s = EVENTS / (end of the last batch that read rows - launch
# of the processes), so process start, joining the group and the first
# rebalance count; `span_s` is the same from the first batch's start (what
# the processes themselves took); `first_busy_s`, per process, when its first
# batch that read rows started (the first process to join the group runs
# every partition until the others' joins rebalance it: the gap is that
# pause); each process's CPU seconds (user + system, /proc/<pid>/stat when
# the input was done) and events per CPU second; the broker's CPU seconds
# over the same span (`broker_cpu_s`, when the broker is scripts/kafka.sh's:
# it shares the machine's cores); the ratio to the mean of the 1-process
# runs of the same variant.
#
# Variants (WEIR_SCALE_VARIANTS, default "key page"):
#   key   views per minute and message key (the user): each input partition's
#         task aggregates on its own (no repartition topic)
#   page  the declared page views (per minute and page): a first stage per
#         input partition writes rows to a repartition topic keyed by page,
#         a second stage per repartition partition aggregates
# WEIR_SCALE_PIN=1 confines process i to core i mod N (N = the cores this
# script may use; the affinity is set before it starts; the broker is left
# free, so it shares those cores): each process then has one core, as
# `--executor-cores 1`, instead of one process spreading
# its task threads and its Kafka clients' threads over every core (one
# unpinned process already uses more than one core here, so on two cores two
# unpinned processes cannot reach twice its rate however well they scale).
# WEIR_SCALE_KEEP=1 keeps the work dir (each process's log and stats file,
# and with the local store the checkpoints) and prints where it is.
# Other settings: WEIR_SCALE_PROCS (default "1 2 3"), WEIR_SCALE_REPEAT (runs
# of each configuration, default 2, interleaved), WEIR_SCALE_ARGS (more
# page_views arguments for every process), WEIR_SCALE_TIMEOUT (s per
# run, default 600), WEIR_SCALE_CHECKPOINT=local (default: a temp dir shared
# by the processes) or s3 (s3://$WEIR_SCALE_BUCKET/..., default bucket
# weir-scale-bench, at $WEIR_S3_ENDPOINT, e.g. scripts/s3.sh's
# http://127.0.0.1:39900, credentials test/test unless AWS_* are set).
#
# Uses the broker at $KAFKA_BOOTSTRAP, or starts one with scripts/kafka.sh
# (and stops it afterwards). The broker keeps every record (no retention
# limit) and each run leaves its topics: the input, each run's output and
# repartition topics take ~1 GB per run at 3M events, so restart the broker
# (`bash scripts/kafka.sh stop; bash scripts/kafka.sh start` starts empty)
# between rounds, or the disk fills. Builds the examples with the `kafka-bench`
# profile (as scripts/kafka_bench.sh); WEIR_BENCH_PROFILE and WEIR_BENCH_BIN
# as there.
set -euo pipefail
cd "$(dirname "$0")/.."
EVENTS="${1:-3000000}"
MAX_OFFSETS="${2:-50000}"
PROFILE="${WEIR_BENCH_PROFILE:-kafka-bench}"
TARGET="${CARGO_TARGET_DIR:-target}"
PARTITIONS="${WEIR_SCALE_PARTITIONS:-6}"
export WEIR_SCALE_PARTITIONS="$PARTITIONS"
VARIANTS="${WEIR_SCALE_VARIANTS:-key page}"
PROCS="${WEIR_SCALE_PROCS:-1 2 3}"
REPEAT="${WEIR_SCALE_REPEAT:-2}"
TIMEOUT="${WEIR_SCALE_TIMEOUT:-600}"
STORE="${WEIR_SCALE_CHECKPOINT:-local}"

started=""
if [[ -z "${KAFKA_BOOTSTRAP:-}" ]]; then
  if ! KAFKA_BOOTSTRAP=$(bash scripts/kafka.sh status 2>/dev/null); then
    KAFKA_BOOTSTRAP=$(bash scripts/kafka.sh start)
    started=1
  fi
fi
export KAFKA_BOOTSTRAP
work=$(mktemp -d)
# WEIR_SCALE_KEEP (see above): anything but empty or 0 keeps the work dir.
trap '[[ "${WEIR_SCALE_KEEP:-0}" != 0 ]] && echo "== kept $work" >&2 || rm -rf "$work"; [[ -z "$started" ]] || bash scripts/kafka.sh stop' EXIT

if [[ -n "${WEIR_BENCH_BIN:-}" ]]; then
  dir="$WEIR_BENCH_BIN"
else
  cargo build --profile "$PROFILE" --features kafka --example page_views --example click_generator >&2
  dir="$TARGET/$PROFILE/examples"
  [[ "$PROFILE" == dev ]] && dir="$TARGET/debug/examples"
fi

confs=(--conf weir.workerThreads=1)
# Extra arguments for every process (e.g. WEIR_SCALE_ARGS="--source-option
# kafka.compression.type=lz4"), split on spaces.
read -r -a extra <<<"${WEIR_SCALE_ARGS:-}"
confs+=(${extra[@]+"${extra[@]}"})
if [[ "$STORE" == s3 ]]; then
  : "${WEIR_S3_ENDPOINT:?WEIR_SCALE_CHECKPOINT=s3 needs WEIR_S3_ENDPOINT (bash scripts/s3.sh start)}"
  export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-test}" AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-test}"
  export AWS_REGION="${AWS_REGION:-us-east-1}"
  bucket="${WEIR_SCALE_BUCKET:-weir-scale-bench}"
  # moto keeps buckets in memory: create it (an existing one answers 409).
  curl -s -o /dev/null -X PUT "$WEIR_S3_ENDPOINT/$bucket" || true
  confs+=(--conf "spark.hadoop.fs.s3a.endpoint=$WEIR_S3_ENDPOINT"
    --conf "spark.hadoop.fs.s3a.access.key=$AWS_ACCESS_KEY_ID"
    --conf "spark.hadoop.fs.s3a.secret.key=$AWS_SECRET_ACCESS_KEY"
    --conf "spark.hadoop.fs.s3a.endpoint.region=$AWS_REGION"
    --conf weir.s3.allowHttp=true)
  chk_root="s3://$bucket/scale-bench-$(date +%s)-$$"
else
  chk_root="$work"
fi

run="$(date +%s)-$$"
topic="scale-clicks-$run"
echo "== producing $EVENTS clicks into $topic ($PARTITIONS partitions, keyed by user, 1000 pages)" >&2
"$dir/click_generator" --topic "$topic" --partitions "$PARTITIONS" --rate 0 --event-rate 2000 \
  --count "$EVENTS" >&2
echo "== page views over $PARTITIONS partitions: processes [$PROCS] x variants [$VARIANTS] x $REPEAT, maxOffsetsPerTrigger $MAX_OFFSETS per task, checkpoint $STORE, profile $PROFILE" >&2

# The broker's pid when it is scripts/kafka.sh's (its CPU is reported per run).
broker_pid_file="${WEIR_KAFKA_HOME:-${HOME:-/root}/.cache/weir-kafka}/run-${WEIR_KAFKA_PORT:-39092}/broker.pid"
WEIR_SCALE_BROKER_PID=$(cat "$broker_pid_file" 2>/dev/null || true)
export WEIR_SCALE_BROKER_PID

python3 - "$dir/page_views" "$topic" "$EVENTS" "$MAX_OFFSETS" "$VARIANTS" "$PROCS" "$REPEAT" \
  "$TIMEOUT" "$work" "$chk_root" "$STORE" "$run" "${confs[@]}" <<'EOF'
import json, os, signal, subprocess, sys, time

(binary, topic, events, max_offsets, variants, procs, repeat, timeout, work,
 chk_root, store, run) = sys.argv[1:13]
confs = sys.argv[13:]
events, repeat, timeout = int(events), int(repeat), float(timeout)
variants, procs = variants.split(), [int(p) for p in procs.split()]
tck = os.sysconf("SC_CLK_TCK")
pin = os.environ.get("WEIR_SCALE_PIN", "") not in ("", "0")
cores = sorted(os.sched_getaffinity(0))
broker = os.environ.get("WEIR_SCALE_BROKER_PID", "").strip()

def cpu_s(pid):
    """User + system CPU seconds of a running process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tck
    except (OSError, IndexError, ValueError):
        return None

def stats(path):
    try:
        with open(path) as f:
            return json.loads(f.read())
    except (OSError, ValueError):
        return None

def one_run(variant, n, rep):
    name = f"{variant}-{n}p-{rep}"
    group = f"scale-bench-{run}-{name}"
    chk = f"{chk_root}/chk-{name}"
    out = f"scale-views-{run}-{name}"
    files = [f"{work}/stats-{name}-{i}.json" for i in range(n)]
    logs = [open(f"{work}/log-{name}-{i}.txt", "w") for i in range(n)]
    load = os.getloadavg()[0]
    broker_start = cpu_s(broker) if broker else None
    t0 = time.time()
    ps = [subprocess.Popen(
        [binary, "--topic", topic, "--starting-offsets", "earliest", "--trigger", "default",
         "--max-offsets", max_offsets, "--sink", "kafka", "--out-topic", out,
         "--checkpoint", chk, "--scale-out", group, "--group-by", variant,
         "--stats-file", files[i], *confs],
        stdout=logs[i], stderr=subprocess.STDOUT,
        preexec_fn=(lambda c=cores[i % len(cores)]: os.sched_setaffinity(0, {c})) if pin else None)
        for i in range(n)]
    cpu = [0.0] * n
    complete, idle_end, error = False, False, None
    while True:
        time.sleep(0.1)
        for i, p in enumerate(ps):
            c = cpu_s(p.pid)
            if c is not None:
                cpu[i] = c
        st = [stats(f) or {} for f in files]
        inp = sum(s.get("input_events", 0) for s in st)
        rep_rows = sum(s.get("repartition_events", 0) for s in st)
        last = max([s["last_busy_ms"] for s in st if s.get("last_busy_ms")] or [0]) / 1000
        dead = [i for i, p in enumerate(ps) if p.poll() is not None]
        if dead:
            error = f"process {dead[0]} ended early (exit {ps[dead[0]].returncode}); see its log"
            break
        if inp >= events and (variant == "key" or rep_rows >= events):
            complete = True
            break
        # The whole input read but fewer repartitioned rows than events, and
        # nothing busy for 5 s: take it as done, and say so.
        if inp >= events and time.time() - last > 5:
            idle_end = True
            break
        if time.time() - t0 > timeout:
            error = f"timeout after {timeout:.0f} s ({inp} of {events} events read)"
            break
    broker_end = cpu_s(broker) if broker else None
    for p in ps:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    for p in ps:
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    for l in logs:
        l.close()
    st = [stats(f) or {} for f in files]
    first = min([s["first_busy_ms"] for s in st if s.get("first_busy_ms")] or [t0 * 1000]) / 1000
    last = max([s["last_busy_ms"] for s in st if s.get("last_busy_ms")] or [time.time() * 1000]) / 1000
    wall = last - t0
    phases = {}
    for s in st:
        for stage in ("input_phases", "repartition_phases"):
            for k, v in (s.get(stage) or {}).items():
                phases.setdefault(stage.split("_")[0], {}).setdefault(k, 0)
                phases[stage.split("_")[0]][k] += v
    r = {
        "bench": "scale_out_page_views", "variant": variant, "processes": n, "run": rep,
        "events": events, "partitions": int(os.environ.get("WEIR_SCALE_PARTITIONS", "6")), "checkpoint": store,
        "max_offsets_per_trigger": int(max_offsets), "worker_threads": 1,
        "pinned_cores": [cores[i % len(cores)] for i in range(n)] if pin else None,
        "wall_s": round(wall, 3), "span_s": round(last - first, 3),
        "startup_s": round(first - t0, 3),
        "first_busy_s": [round(s["first_busy_ms"] / 1000 - t0, 2) if s.get("first_busy_ms") else None
                         for s in st],

        "events_per_s": round(events / wall) if wall > 0 else None,
        "cpu_s": [round(c, 2) for c in cpu], "cpu_total_s": round(sum(cpu), 2),
        "events_per_cpu_s": round(events / sum(cpu)) if sum(cpu) > 0 else None,
        "broker_cpu_s": (round(broker_end - broker_start, 2)
                         if broker_start is not None and broker_end is not None else None),
        "input_events": [s.get("input_events", 0) for s in st],
        "repartition_events": [s.get("repartition_events", 0) for s in st],
        "batches": [s.get("input_batches", 0) + s.get("repartition_batches", 0) for s in st],
        "tasks": [len(s.get("tasks", [])) for s in st],
        "phases_ms": phases, "load_before": round(load, 2),
        "complete": complete, "ended_idle": idle_end, "error": error,
    }
    return r

results = []
for rep in range(1, repeat + 1):
    for variant in variants:
        for n in procs:
            r = one_run(variant, n, rep)
            ones = [x["events_per_s"] for x in results + [r]
                    if x["variant"] == variant and x["processes"] == 1 and x["events_per_s"]]
            base = sum(ones) / len(ones) if ones else None
            r["ratio_to_1"] = round(r["events_per_s"] / base, 2) if base and r["events_per_s"] else None
            results.append(r)
            print(json.dumps(r), flush=True)

# Ranges, ratios against the mean of all 1-process runs of the variant.
for variant in variants:
    ones = [x["events_per_s"] for x in results
            if x["variant"] == variant and x["processes"] == 1 and x["events_per_s"]]
    base = sum(ones) / len(ones) if ones else None
    for n in procs:
        rs = [x for x in results if x["variant"] == variant and x["processes"] == n and x["events_per_s"]]
        if not rs:
            continue
        eps = [x["events_per_s"] for x in rs]
        print(json.dumps({
            "bench": "scale_out_page_views_summary", "variant": variant, "processes": n,
            "runs": len(rs), "pinned": pin, "events_per_s_min": min(eps), "events_per_s_max": max(eps),
            "ratio_to_1_min": round(min(eps) / base, 2) if base else None,
            "ratio_to_1_max": round(max(eps) / base, 2) if base else None,
            "events_per_cpu_s_min": min(x["events_per_cpu_s"] or 0 for x in rs),
            "events_per_cpu_s_max": max(x["events_per_cpu_s"] or 0 for x in rs),
            "load_before_max": max(x["load_before"] for x in rs),
            "cpu_total_s_min": min(x["cpu_total_s"] for x in rs),
            "cpu_total_s_max": max(x["cpu_total_s"] for x in rs),
            "broker_cpu_s": [x["broker_cpu_s"] for x in rs],
            "all_complete": all(x["complete"] for x in rs),
        }), flush=True)
EOF
