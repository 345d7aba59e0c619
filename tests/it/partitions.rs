//! Partitioned execution gives the single-partition answer: for random
//! inputs (keys, event times out of order, rows behind the watermark), a
//! query whose state is split over several partitions and run by several
//! workers emits, batch for batch, exactly what one partition on one worker
//! emits (issue 11). Aggregations, dedup, session windows and
//! stream-stream joins (inner, left outer, and a join on a time range
//! only, which keeps its state in one partition).

use proptest::prelude::*;
use serde_json::Value;
use weir::dataset::JoinOn;
use weir::functions::{col, count_star, max, session_window, sum, window};
use weir::plan::{JoinType, OutputMode};
use weir::sink::MemorySink;
use weir::source::MemoryStream;
use weir::{DataStream, Session, SessionConfig};

use crate::common::{disordered_batches, event, fields, rows_json};

/// A session with `partitions` state partitions (unset: a new checkpoint
/// takes the available cores, an existing one keeps its count) and
/// `workers` threads; batches run only when asked.
fn session_with(partitions: Option<usize>, workers: usize) -> Session {
    let mut conf = SessionConfig {
        fsync_checkpoint: false,
        polling_delay: std::time::Duration::from_secs(3600),
        ..SessionConfig::default()
    };
    if let Some(partitions) = partitions {
        conf.set("spark.sql.shuffle.partitions", &partitions.to_string())
            .unwrap();
    }
    conf.set("weir.workerThreads", &workers.to_string())
        .unwrap();
    Session::with_config(conf)
}

/// What a query does to the stream.
#[derive(Debug, Clone, Copy)]
enum Shape {
    /// 10-minute windows per key: count, sum, max.
    WindowAgg(OutputMode),
    /// 20-minute windows sliding by 5 minutes, per key.
    Sliding,
    /// A global count and sum (one group).
    Global,
    /// dropDuplicates(key, value) with a watermark.
    Dedup,
    /// 5-minute-gap session windows per key: count, sum.
    Sessions(OutputMode),
    /// A stream-stream join of even-valued events (left) with odd-valued
    /// ones (right) on the key, the right's time within 10 minutes after the
    /// left's.
    Join(JoinType),
    /// The same join on the time range only (no equi-join key).
    TimeRangeJoin,
}

impl Shape {
    /// A stream-stream join: the input is split over two streams.
    fn is_join(self) -> bool {
        matches!(self, Shape::Join(_) | Shape::TimeRangeJoin)
    }
}

/// A stream-stream join of `left` and `right` (even and odd values).
fn join(
    s: &Session,
    left: &MemoryStream,
    right: &MemoryStream,
    how: JoinType,
    on_key: bool,
) -> DataStream {
    let side = |stream: &MemoryStream, p: &str| {
        s.read_stream(stream.clone())
            .with_watermark("ts", "10 minutes")
            .select(vec![
                ("key", &format!("{p}key")),
                ("ts", &format!("{p}ts")),
                ("value", &format!("{p}value")),
            ])
    };
    let range = "r_ts >= l_ts AND r_ts <= l_ts + INTERVAL '10 minutes'";
    let on = if on_key {
        format!("l_key = r_key AND {range}")
    } else {
        range.to_string()
    };
    side(left, "l_").join(side(right, "r_"), JoinOn::Expr(on), how)
}

fn build(
    s: &Session,
    stream: &MemoryStream,
    right: &MemoryStream,
    shape: Shape,
) -> (DataStream, OutputMode) {
    match shape {
        Shape::Join(how) => return (join(s, stream, right, how, true), OutputMode::Append),
        Shape::TimeRangeJoin => {
            return (
                join(s, stream, right, JoinType::Inner, false),
                OutputMode::Append,
            )
        }
        _ => {}
    }
    let d = s
        .read_stream(stream.clone())
        .with_watermark("ts", "10 minutes");
    match shape {
        Shape::WindowAgg(mode) => (
            d.group_by(vec![window("ts", "10 minutes"), col("key")])
                .agg(vec![
                    count_star("n"),
                    sum("value", "total"),
                    max("value", "top"),
                ]),
            mode,
        ),
        Shape::Sliding => (
            d.group_by(vec![
                weir::functions::sliding_window("ts", "20 minutes", "5 minutes"),
                col("key"),
            ])
            .agg(vec![count_star("n")]),
            OutputMode::Update,
        ),
        Shape::Global => (
            d.group_by(vec![])
                .agg(vec![count_star("n"), sum("value", "total")]),
            OutputMode::Update,
        ),
        Shape::Dedup => (d.drop_duplicates(&["key", "value"]), OutputMode::Append),
        Shape::Sessions(mode) => (
            d.group_by(vec![session_window("ts", "5 minutes"), col("key")])
                .agg(vec![count_star("n"), sum("value", "total")]),
            mode,
        ),
        Shape::Join(_) | Shape::TimeRangeJoin => unreachable!("built above"),
    }
}

/// One micro-batch a run emitted: its id, its output rows (as JSON, in
/// output order) and its stateful operator's metrics, summed over the
/// partitions: `[numRowsTotal, numRowsUpdated, numRowsRemoved,
/// numRowsDroppedByWatermark]`.
type Batch = (i64, Vec<Value>, Vec<i64>);

/// Runs `inputs` through the query, one micro-batch per input, and returns
/// every batch it emitted.
fn run(shape: Shape, inputs: &[Vec<Value>], partitions: usize, workers: usize) -> Vec<Batch> {
    let chk = tempfile::tempdir().unwrap();
    run_on(shape, inputs, Some(partitions), workers, chk.path())
}

/// Runs `inputs` through the query on checkpoint `chk` (a new one, or one a
/// run before left), one micro-batch per input, and returns the batches
/// this run emits. A join's left stream gets the
/// even-valued events, its right stream the odd ones; another query's one
/// stream gets them all.
fn run_on(
    shape: Shape,
    inputs: &[Vec<Value>],
    partitions: Option<usize>,
    workers: usize,
    chk: &std::path::Path,
) -> Vec<Batch> {
    run_from(shape, &[], inputs, partitions, workers, chk).0
}

/// As [`run_on`], with `before` added to the streams first without running
/// a batch: the inputs a stopped run on `chk` already read, so the offsets
/// it logged point past them. Also returns, per input, the last batch id
/// run once it was processed.
fn run_from(
    shape: Shape,
    before: &[Vec<Value>],
    inputs: &[Vec<Value>],
    partitions: Option<usize>,
    workers: usize,
    chk: &std::path::Path,
) -> (Vec<Batch>, Vec<Option<i64>>) {
    run_in(
        &session_with(partitions, workers),
        shape,
        before,
        inputs,
        chk,
    )
}

/// As [`run_from`], in session `s` (which other queries may share).
fn run_in(
    s: &Session,
    shape: Shape,
    before: &[Vec<Value>],
    inputs: &[Vec<Value>],
    chk: &std::path::Path,
) -> (Vec<Batch>, Vec<Option<i64>>) {
    let stream = MemoryStream::new(&fields());
    let right = MemoryStream::new(&fields());
    let add = |input: &[Value]| {
        if shape.is_join() {
            add_even_odd(&stream, &right, input);
        } else {
            stream.add_json(input).unwrap();
        }
    };
    for input in before {
        add(input);
    }
    let (d, mode) = build(s, &stream, &right, shape);
    let sink = MemorySink::new("");
    let table = sink.table();
    let q = d
        .write_stream()
        .output_mode(mode)
        .sink(sink)
        .checkpoint_location(chk.to_str().unwrap())
        .start()
        .unwrap();
    // The query's first look for data is done before a join's two streams
    // get their rows: no batch sees one stream's rows without the other's.
    q.process_all_available().unwrap();
    let mut last_batch = Vec::new();
    for input in inputs {
        add(input);
        q.process_all_available().unwrap();
        last_batch.push(q.last_progress().map(|p| p.batch_id));
    }
    q.stop().unwrap();
    assert!(q.exception().is_none(), "{:?}", q.exception());
    let metrics: std::collections::BTreeMap<i64, Vec<i64>> = q
        .recent_progress()
        .iter()
        .map(|p| {
            let op = &p.state_operators[0];
            let m = [
                op.num_rows_total,
                op.num_rows_updated,
                op.num_rows_removed,
                op.num_rows_dropped_by_watermark,
            ];
            (p.batch_id, m.to_vec())
        })
        .collect();
    let mut out: Vec<Batch> = table
        .batches()
        .into_iter()
        .map(|(id, b)| {
            let mut rows = rows_json(&b);
            // Dedup keeps input rows and a join pairs them, in an order
            // across partitions Spark does not promise; aggregations and
            // sessions emit in key order.
            if matches!(shape, Shape::Dedup) || shape.is_join() {
                rows.sort_by_key(|r| r.to_string());
            }
            (id, rows, metrics.get(&id).cloned().unwrap_or_default())
        })
        .collect();
    out.sort_by_key(|(id, ..)| *id);
    (out, last_batch)
}

#[test]
fn queries_sharing_a_pool_of_one_worker_each_finish_with_their_own_output() {
    // Three stateful queries at once in one session whose pool has one
    // worker. Each batch's state partitions commit in their task once the
    // batch's `offsets/N` is written, itself a task on that pool: the one
    // worker must never hold a batch's partitions while its write waits
    // behind them, nor another query's. Each query emits what it emits
    // alone.
    let inputs = fixed_inputs();
    let shapes = [
        Shape::WindowAgg(OutputMode::Update),
        Shape::Sessions(OutputMode::Append),
        Shape::Join(JoinType::Inner),
    ];
    let s = session_with(Some(2), 1);
    let (done, finished) = std::sync::mpsc::channel();
    for (i, shape) in shapes.into_iter().enumerate() {
        let (s, inputs, done) = (s.clone(), inputs.clone(), done.clone());
        std::thread::spawn(move || {
            let chk = tempfile::tempdir().unwrap();
            let out = run_in(&s, shape, &[], &inputs, chk.path()).0;
            done.send((i, out)).unwrap();
        });
    }
    let mut outs: Vec<Option<Vec<Batch>>> = vec![None, None, None];
    for _ in &shapes {
        let (i, out) = finished
            .recv_timeout(std::time::Duration::from_secs(120))
            .expect("queries sharing one worker stopped making progress");
        outs[i] = Some(out);
    }
    for (shape, out) in shapes.into_iter().zip(outs) {
        let alone = run(shape, &inputs, 2, 1);
        assert!(!alone.is_empty(), "{shape:?}");
        assert_eq!(out.unwrap(), alone, "{shape:?}");
    }
}

/// Adds `input`'s even-valued events to `left`, its odd-valued ones to
/// `right` (a join's two sides).
fn add_even_odd(left: &MemoryStream, right: &MemoryStream, input: &[Value]) {
    let (l, r): (Vec<Value>, Vec<Value>) = input
        .iter()
        .cloned()
        .partition(|e| e["value"].as_i64().unwrap() % 2 == 0);
    left.add_json(&l).unwrap();
    right.add_json(&r).unwrap();
}

fn shapes() -> impl Strategy<Value = Shape> {
    prop_oneof![
        Just(Shape::WindowAgg(OutputMode::Append)),
        Just(Shape::WindowAgg(OutputMode::Update)),
        Just(Shape::WindowAgg(OutputMode::Complete)),
        Just(Shape::Sliding),
        Just(Shape::Global),
        Just(Shape::Dedup),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn partitioned_output_equals_single_partition_output(shape in shapes(), inputs in disordered_batches(1)) {
        let one = run(shape, &inputs, 1, 1);
        for (partitions, workers) in [(3, 4), (8, 2)] {
            let many = run(shape, &inputs, partitions, workers);
            prop_assert_eq!(&many, &one, "{:?} on {} partitions, {} workers", shape, partitions, workers);
        }
    }
}

fn stateful_shapes() -> impl Strategy<Value = Shape> {
    prop_oneof![
        Just(Shape::Sessions(OutputMode::Append)),
        Just(Shape::Sessions(OutputMode::Complete)),
        Just(Shape::Join(JoinType::Inner)),
        Just(Shape::Join(JoinType::LeftOuter)),
        Just(Shape::TimeRangeJoin),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Session windows and stream-stream joins: each state partition merges
    /// and closes its keys' sessions, or joins and evicts its keys' rows of
    /// both sides, and the union is the single partition's output.
    #[test]
    fn partitioned_sessions_and_joins_equal_single_partition_output(shape in stateful_shapes(), inputs in disordered_batches(1)) {
        let one = run(shape, &inputs, 1, 1);
        for (partitions, workers) in [(3, 4), (8, 2)] {
            let many = run(shape, &inputs, partitions, workers);
            prop_assert_eq!(&many, &one, "{:?} on {} partitions, {} workers", shape, partitions, workers);
        }
    }
}

/// Fixed inputs: 8 batches of events around each batch's own time, some
/// far behind it, over 5 keys.
fn fixed_inputs() -> Vec<Vec<Value>> {
    (0..8i64)
        .map(|b| {
            (0..12i64)
                .map(|i| {
                    let dt = (i * 7 + b * 3) % 40 - 28;
                    event(b * 12 + dt, ((i + b) % 5) as u8, (i * 5 + b) % 4)
                })
                .collect()
        })
        .collect()
}

/// A session-window query and a stream-stream left outer join stopped after
/// some batches keep their state in `state/<op>/<partition>/` (a join's
/// sides in `left/` and `right/`) and, restarted on a session that does not
/// set the partition count, take the checkpoint's (3, not this machine's
/// default) and emit what an uninterrupted run emits, batch for batch.
#[test]
fn sessions_and_joins_restart_on_the_recorded_partition_count() {
    let inputs = fixed_inputs();
    for shape in [
        Shape::Sessions(OutputMode::Append),
        Shape::Join(JoinType::LeftOuter),
    ] {
        let whole = tempfile::tempdir().unwrap();
        let want = run_on(shape, &inputs, Some(3), 2, whole.path());
        assert!(
            want.iter().map(|(_, rows, _)| rows.len()).sum::<usize>() > 5,
            "{shape:?}: the inputs exercise the operator: {want:?}"
        );
        let chk = tempfile::tempdir().unwrap();
        let (first, rest) = inputs.split_at(4);
        let mut got = run_on(shape, first, Some(3), 2, chk.path());
        let state = chk.path().join("state").join("0");
        for p in 0..3 {
            let dir = state.join(p.to_string());
            if shape.is_join() {
                assert!(
                    dir.join("left").is_dir() && dir.join("right").is_dir(),
                    "{}",
                    dir.display()
                );
            } else {
                assert!(dir.is_dir(), "{}", dir.display());
            }
        }
        assert!(!state.join("3").exists());
        got.extend(run_from(shape, first, rest, None, 2, chk.path()).0);
        assert!(!state.join("3").exists());
        assert_eq!(got, want, "{shape:?} stopped after 4 batches and restarted");
    }
}

/// The shapes the kill test runs, by name (for its child process).
const KILLED: [(&str, Shape, u32); 2] = [
    // The one store's first partition committed, the others not.
    ("sessions", Shape::Sessions(OutputMode::Append), 1),
    // The left side's partitions all committed, the right's first only.
    ("join", Shape::Join(JoinType::LeftOuter), 2),
];

/// The input whose batch the kill test kills.
const KILLED_INPUT: usize = 4;

/// A process killed (SIGKILL) between two state partitions' commits of a
/// batch, for a session-window query and for a stream-stream left outer
/// join on 3 partitions: restarted, it re-runs that batch from the logged
/// offsets and the partitions' last committed versions, and emits from it
/// on exactly what an uninterrupted run emits.
#[test]
fn a_kill_between_partition_commits_of_sessions_and_joins_recovers_exactly() {
    const NAME: &str =
        "partitions::a_kill_between_partition_commits_of_sessions_and_joins_recovers_exactly";
    let inputs = fixed_inputs();
    if let (Ok(dir), Ok(which)) = (
        std::env::var("WEIR_CRASH_TEST_DIR"),
        std::env::var("WEIR_CRASH_SHAPE"),
    ) {
        // The child: runs until its failpoint kills it.
        let (_, shape, _) = KILLED.iter().find(|k| k.0 == which).unwrap();
        run_on(
            *shape,
            &inputs,
            Some(3),
            2,
            &std::path::Path::new(&dir).join("chk"),
        );
        return;
    }
    for (which, shape, nth) in KILLED {
        let whole = tempfile::tempdir().unwrap();
        let (want, last_batch) = run_from(shape, &[], &inputs, Some(3), 2, whole.path());
        // The batch that reads input KILLED_INPUT.
        let victim = last_batch[KILLED_INPUT - 1].unwrap() + 1;
        let dir = tempfile::tempdir().unwrap();
        crate::common::run_child_killed_at_failpoint(
            NAME,
            &[
                ("WEIR_CRASH_TEST_DIR", dir.path().display().to_string()),
                ("WEIR_CRASH_SHAPE", which.to_string()),
                (
                    "WEIR_FAILPOINT",
                    format!("between_state_partitions:{victim}:{nth}"),
                ),
            ],
        );
        let chk = dir.path().join("chk");
        assert!(chk.join("offsets").join(victim.to_string()).exists());
        assert!(!chk.join("commits").join(victim.to_string()).exists());
        let (got, _) = run_from(
            shape,
            &inputs[..=KILLED_INPUT],
            &inputs[KILLED_INPUT + 1..],
            None,
            2,
            &chk,
        );
        let tail: Vec<Batch> = want.into_iter().filter(|b| b.0 >= victim).collect();
        assert!(
            tail.iter().map(|b| b.1.len()).sum::<usize>() > 0,
            "{which}: rows after the kill"
        );
        assert_eq!(got, tail, "{which} killed in batch {victim}");
    }
}

/// A batch larger than one task's slice (at most 64k rows) is aggregated in
/// parallel slices and merged: every window's count, sum and max equal a
/// plain fold over the rows, on one partition and on several.
#[test]
fn a_batch_split_into_parallel_tasks_aggregates_like_a_fold() {
    use std::collections::BTreeMap;
    let events: Vec<(i64, u8, i64)> = (0..100_000i64)
        .map(|i| ((i * 7) % 50, (i % 13) as u8, (i * 31) % 1000))
        .collect();
    let input: Vec<Value> = events.iter().map(|(m, k, v)| event(*m, *k, *v)).collect();
    // The oracle: (window start minute, key) -> (count, sum, max).
    let mut fold: BTreeMap<(i64, String), (i64, i64, i64)> = BTreeMap::new();
    for (m, k, v) in &events {
        let e = fold
            .entry((m - m % 10, format!("k{k}")))
            .or_insert((0, 0, i64::MIN));
        e.0 += 1;
        e.1 += v;
        e.2 = e.2.max(*v);
    }
    for (partitions, workers) in [(1, 1), (3, 4)] {
        let out = run(
            Shape::WindowAgg(OutputMode::Update),
            std::slice::from_ref(&input),
            partitions,
            workers,
        );
        let got: BTreeMap<(i64, String), (i64, i64, i64)> = out[0]
            .1
            .iter()
            .map(|r| {
                let start = crate::common::iso_ms(r["window"]["start"].as_str().unwrap());
                let minute = (start / 1000 - 1_704_110_400) / 60;
                (
                    (minute, r["key"].as_str().unwrap().to_string()),
                    (
                        r["n"].as_i64().unwrap(),
                        r["total"].as_i64().unwrap(),
                        r["top"].as_i64().unwrap(),
                    ),
                )
            })
            .collect();
        assert_eq!(got, fold, "{partitions} partitions, {workers} workers");
    }
}

/// A batch of many tasks' rows (five slices of 60k: three waves of tasks at
/// one worker; at four workers, which share a count's rows a morsel at a
/// time, one shared slice) with rows outside any representable window
/// in the first slice and in the last: every partition and worker count
/// gives the same groups, in the same order, and counts every lost row.
#[test]
fn a_batch_of_many_tasks_gives_the_same_groups_and_lost_rows_at_any_worker_count() {
    use std::sync::Arc;
    use weir::arrow::array::{StringArray, TimestampMicrosecondArray};
    use weir::arrow::record_batch::RecordBatch;
    use weir::plan::{DataType, Field};

    let rows = 300_000usize;
    let lost_at = [7usize, 59_999, 299_990, 299_999];
    let ts: Vec<i64> = (0..rows)
        .map(|i| {
            if lost_at.contains(&i) {
                if i % 2 == 0 {
                    i64::MIN
                } else {
                    i64::MAX
                }
            } else {
                // Out of order over 50 one-minute windows.
                ((i * 7919) % 3_000) as i64 * 1_000_000
            }
        })
        .collect();
    let keys: Vec<String> = (0..rows).map(|i| format!("k{}", (i * 31) % 97)).collect();
    let schema = [
        Field::new("key", DataType::String),
        Field::new("ts", DataType::Timestamp),
    ];
    let batch = RecordBatch::try_new(
        weir::row::arrow_schema(&schema),
        vec![
            Arc::new(StringArray::from(keys)),
            Arc::new(TimestampMicrosecondArray::from(ts).with_timezone("UTC")),
        ],
    )
    .unwrap();
    let run = |partitions: usize, workers: usize| {
        let stream = MemoryStream::new(&schema);
        let sink = MemorySink::new("");
        let table = sink.table();
        let q = session_with(Some(partitions), workers)
            .read_stream(stream.clone())
            .group_by(vec![window("ts", "1 minute"), col("key")])
            .agg(vec![count_star("n")])
            .write_stream()
            .output_mode(OutputMode::Update)
            .sink(sink)
            .start()
            .unwrap();
        stream.add_batch(batch.clone()).unwrap();
        q.process_all_available().unwrap();
        let lost = q.last_progress().unwrap().state_operators[0].custom_metrics
            ["numRowsOutsideRepresentableWindows"];
        q.stop().unwrap();
        let out = rows_json(&table.rows());
        (out, lost)
    };
    let (one, lost) = run(1, 1);
    assert_eq!(lost, lost_at.len() as i64);
    let groups = one.len();
    assert_eq!(groups, 50 * 97, "every (window, key) seen");
    let counted: i64 = one.iter().map(|r| r["n"].as_i64().unwrap()).sum();
    assert_eq!(counted, (rows - lost_at.len()) as i64);
    for (partitions, workers) in [(3, 1), (3, 4), (1, 4)] {
        let (got, got_lost) = run(partitions, workers);
        assert_eq!(got_lost, lost, "{partitions} partitions, {workers} workers");
        assert_eq!(got, one, "{partitions} partitions, {workers} workers");
    }
}

/// A data batch's input rows and event-time statistics.
type DataBatchTimes = (i64, std::collections::BTreeMap<String, String>);

/// `build` over a memory stream of `schema` with a `delay` watermark on
/// `ts`, in update mode, fed `micro_batches` one at a time: each micro-batch's
/// new output rows, and each data batch's input rows and event-time
/// statistics (min, avg, max, watermark).
fn run_micro_batches(
    schema: &[weir::plan::Field],
    build: impl Fn(DataStream) -> DataStream,
    delay: &str,
    micro_batches: &[Vec<weir::arrow::record_batch::RecordBatch>],
    partitions: usize,
    workers: usize,
) -> (Vec<Vec<Value>>, Vec<DataBatchTimes>) {
    let stream = MemoryStream::new(schema);
    let sink = MemorySink::new("");
    let table = sink.table();
    let q = build(
        session_with(Some(partitions), workers)
            .read_stream(stream.clone())
            .with_watermark("ts", delay),
    )
    .write_stream()
    .output_mode(OutputMode::Update)
    .sink(sink)
    .start()
    .unwrap();
    let mut out = vec![];
    for batches in micro_batches {
        let before = table.rows().len();
        for b in batches {
            stream.add_batch(b.clone()).unwrap();
        }
        q.process_all_available().unwrap();
        out.push(rows_json(&table.rows()[before..]));
    }
    let times = q
        .recent_progress()
        .into_iter()
        .filter(|p| p.num_input_rows > 0)
        .map(|p| (p.num_input_rows, p.event_time))
        .collect();
    q.stop().unwrap();
    (out, times)
}

/// Counts and integer sums (order-free) behind only a watermark: at more
/// than one worker each slice is shared among the free workers a morsel at
/// a time (`ops::morsels`), so which rows a task groups depends on timing.
/// Two batches of 600k rows (three shared slices each at two workers), out
/// of order, with short and long keys and rows behind the watermark in the
/// second: every worker and partition count emits what a plain fold over
/// the rows gives, with the same event-time statistics and watermarks.
#[test]
fn an_order_free_aggregation_shared_among_workers_equals_a_fold() {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use weir::arrow::array::{Int64Array, StringArray, TimestampMicrosecondArray};
    use weir::arrow::record_batch::RecordBatch;
    use weir::plan::{DataType, Field};

    let rows = 600_000usize;
    let schema = [
        Field::new("key", DataType::String),
        Field::new("ts", DataType::Timestamp),
        Field::new("v", DataType::Int64),
    ];
    // Batch `b`: minutes out of order over an hour from minute `30 * b`
    // (the second batch's windows that end by minute 49, its watermark, are
    // behind it), keys of 2 to 3 bytes and of 30 (beyond the 15 bytes kept
    // in place).
    let event = |b: usize, i: usize| -> (String, i64, i64) {
        let minute = (b * 30 + (i * 7919) % 60) as i64;
        let key = match i % 5 {
            0 => format!("a-rather-long-key-number-{:05}", i % 31),
            _ => format!("k{}", i % 23),
        };
        (key, minute, (i % 1000) as i64 - 300)
    };
    let batches: Vec<RecordBatch> = (0..2)
        .map(|b| {
            let evs: Vec<_> = (0..rows).map(|i| event(b, i)).collect();
            RecordBatch::try_new(
                weir::row::arrow_schema(&schema),
                vec![
                    Arc::new(StringArray::from_iter_values(
                        evs.iter().map(|e| e.0.clone()),
                    )),
                    Arc::new(
                        TimestampMicrosecondArray::from_iter_values(
                            evs.iter().map(|e| e.1 * 60_000_000),
                        )
                        .with_timezone("UTC"),
                    ),
                    Arc::new(Int64Array::from_iter_values(evs.iter().map(|e| e.2))),
                ],
            )
            .unwrap()
        })
        .collect();
    // The oracle, batch by batch: (window start minute, key) -> (count,
    // sum) of the rows not behind the watermark (update mode).
    let mut fold: Vec<BTreeMap<(i64, String), (i64, i64)>> = vec![BTreeMap::new(); 2];
    let mut totals: BTreeMap<(i64, String), (i64, i64)> = BTreeMap::new();
    for (b, out) in fold.iter_mut().enumerate() {
        let watermark = if b == 0 { i64::MIN } else { 59 - 10 };
        for i in 0..rows {
            let (key, minute, v) = event(b, i);
            let start = minute - minute % 10;
            if start + 10 <= watermark {
                continue;
            }
            let t = totals.entry((start, key.clone())).or_insert((0, 0));
            t.0 += 1;
            t.1 += v;
            out.insert((start, key), *t);
        }
    }
    let micro_batches: Vec<Vec<RecordBatch>> = batches.into_iter().map(|b| vec![b]).collect();
    let run = |partitions: usize, workers: usize| {
        let (out, times) = run_micro_batches(
            &schema,
            |d| {
                d.group_by(vec![window("ts", "10 minutes"), col("key")])
                    .agg(vec![count_star("n"), sum("v", "total")])
            },
            "10 minutes",
            &micro_batches,
            partitions,
            workers,
        );
        let out: Vec<BTreeMap<(i64, String), (i64, i64)>> = out
            .iter()
            .map(|rows| {
                rows.iter()
                    .map(|r| {
                        let start = crate::common::iso_ms(r["window"]["start"].as_str().unwrap());
                        (
                            (start / 60_000, r["key"].as_str().unwrap().to_string()),
                            (r["n"].as_i64().unwrap(), r["total"].as_i64().unwrap()),
                        )
                    })
                    .collect()
            })
            .collect();
        (out, times)
    };
    let (one, times) = run(1, 1);
    assert_eq!(one, fold, "one worker against the fold");
    assert_eq!(times.len(), 2);
    assert!(
        times.iter().all(|(_, t)| t.contains_key("avg")),
        "{times:?}"
    );
    for (partitions, workers) in [(2, 2), (3, 4)] {
        let (got, got_times) = run(partitions, workers);
        assert_eq!(got, fold, "{partitions} partitions, {workers} workers");
        assert_eq!(
            got_times, times,
            "{partitions} partitions, {workers} workers"
        );
    }
}

/// More order-free shapes, shared among 2 and 4 workers against one: a
/// count per window alone (runs of one window), sliding windows per key,
/// `min`/`max` of floats (-0.0 and 0.0 among them) and strings with
/// `approx_count_distinct`, and a global count and sum; each over three
/// micro-batches (one 300k-row batch; 40 batches of 3000 rows, a morsel
/// apiece; a slice of a whole wave at two workers, then 5000 rows, the
/// last wave one morsel, and an empty batch), with null event times.
/// Output, batch for batch, and every data batch's event-time statistics
/// (min, avg, max, watermark) equal one worker's.
#[test]
fn order_free_shapes_shared_among_workers_equal_one_worker() {
    use std::sync::Arc;
    use weir::arrow::array::{Float64Array, Int64Array, StringArray, TimestampMicrosecondArray};
    use weir::arrow::record_batch::RecordBatch;
    use weir::functions::{approx_count_distinct, min, sliding_window};
    use weir::plan::{DataType, Field};

    let schema = [
        Field::new("key", DataType::String),
        Field::new("ts", DataType::Timestamp),
        Field::new("v", DataType::Int64),
        Field::new("f", DataType::Float64),
    ];
    // Rows `from..from + rows`: minutes out of order over two hours, every
    // 97th time null; for every third key, `f` only -0.0 and 0.0.
    let batch = |from: usize, rows: usize| {
        let ts = (from..from + rows)
            .map(|i| (i % 97 != 0).then_some(((i * 7919) % 120) as i64 * 60_000_000 + i as i64));
        RecordBatch::try_new(
            weir::row::arrow_schema(&schema),
            vec![
                Arc::new(StringArray::from_iter_values(
                    (from..from + rows).map(|i| format!("k{}", i % 41)),
                )),
                Arc::new(TimestampMicrosecondArray::from_iter(ts).with_timezone("UTC")),
                Arc::new(Int64Array::from_iter_values(
                    (from..from + rows).map(|i| (i % 1000) as i64 - 400),
                )),
                Arc::new(Float64Array::from_iter_values((from..from + rows).map(
                    |i| match (i % 41 % 3, i % 2) {
                        (0, 0) => 0.0,
                        (0, _) => -0.0,
                        _ => (i % 7) as f64 - 3.5,
                    },
                ))),
            ],
        )
        .unwrap()
    };
    // A large batch; 40 small ones (waves of small slices, a morsel each);
    // a wave's rows at two workers (one full slice) then 5000 rows (the
    // last wave one morsel) and an empty batch.
    let micro_batches: Vec<Vec<RecordBatch>> = vec![
        vec![batch(0, 300_000)],
        (0..40).map(|k| batch(300_000 + k * 3000, 3000)).collect(),
        vec![batch(420_000, 262_144), batch(682_144, 5000), batch(0, 0)],
    ];
    type Build = fn(DataStream) -> DataStream;
    let shapes: [(&str, Build); 4] = [
        ("window alone", |d| {
            d.group_by(vec![window("ts", "10 minutes")])
                .agg(vec![count_star("n")])
        }),
        ("sliding per key", |d| {
            d.group_by(vec![
                sliding_window("ts", "20 minutes", "5 minutes"),
                col("key"),
            ])
            .agg(vec![count_star("n"), sum("v", "total")])
        }),
        ("min, max, approx distinct", |d| {
            d.group_by(vec![window("ts", "10 minutes"), col("key")])
                .agg(vec![
                    count_star("n"),
                    min("f", "lo"),
                    max("f", "hi"),
                    max("key", "top"),
                    approx_count_distinct("v", "d"),
                ])
        }),
        ("global", |d| {
            d.group_by(vec![])
                .agg(vec![count_star("n"), sum("v", "total")])
        }),
    ];
    for (name, build) in shapes {
        let run = |partitions: usize, workers: usize| {
            let (out, times) = run_micro_batches(
                &schema,
                build,
                "30 minutes",
                &micro_batches,
                partitions,
                workers,
            );
            // Rows in no particular order within a batch: sorted.
            let out: Vec<Vec<String>> = out
                .iter()
                .map(|rows| {
                    let mut rows: Vec<String> = rows.iter().map(|r| r.to_string()).collect();
                    rows.sort();
                    rows
                })
                .collect();
            (out, times)
        };
        let (one, times) = run(1, 1);
        assert_eq!(times.len(), 3, "{name}: one batch per input");
        assert!(
            times.iter().all(|(_, t)| t.contains_key("avg")),
            "{name}: {times:?}"
        );
        assert!(one.iter().all(|rows| !rows.is_empty()), "{name}");
        for (partitions, workers) in [(2, 2), (3, 4)] {
            let (got, got_times) = run(partitions, workers);
            assert_eq!(
                got, one,
                "{name}: {partitions} partitions, {workers} workers"
            );
            assert_eq!(
                got_times, times,
                "{name}: {partitions} partitions, {workers} workers"
            );
        }
    }
}

/// Events for the steps-before-an-operator tests: 300k rows (five tasks)
/// over an hour, moving forward with ten minutes of disorder (so each task
/// sees other times), every tenth in the year 2100 (`value % 10 = 0`, which
/// the queries filter out); then 1000 rows, half behind the watermark
/// (minute 1) and half ahead of it (minute 55).
fn events_with_a_far_future() -> [Vec<(String, i64, i64)>; 2] {
    let noon_us = 1_704_110_400i64 * 1_000_000;
    let far_future_us = 4_102_444_800i64 * 1_000_000; // 2100-01-01
    let first = (0..300_000i64)
        .map(|i| {
            let ts = if i % 10 == 0 {
                far_future_us + i
            } else {
                noon_us + (i / 100 + (i * 7919) % 600) * 1_000_000
            };
            (format!("k{}", i % 7), ts, i)
        })
        .collect();
    let second = (0..1_000i64)
        .map(|i| {
            let minute = if i % 2 == 0 { 1 } else { 55 };
            (
                format!("k{}", i % 7),
                noon_us + minute * 60_000_000,
                2 * i + 1,
            )
        })
        .collect();
    [first, second]
}

/// The (key, time) of the rows the filter keeps.
fn kept(rows: &[(String, i64, i64)]) -> Vec<(String, i64)> {
    rows.iter()
        .filter(|(_, _, v)| v % 10 != 0)
        .map(|(k, t, _)| (k.clone(), *t))
        .collect()
}

/// Runs [`events_with_a_far_future`] through a filter (`value % 10 <> 0`),
/// a projection (`key`, `ts AS et`), a watermark (`et`, 10 minutes) and then
/// `op`, on 3 state partitions and `workers` workers, with or without a
/// late-rows side output: the rows emitted by each batch (by batch id),
/// each data batch's event-time statistics, and how many rows were sent
/// aside as late.
#[allow(clippy::type_complexity)]
fn run_steps_then(
    op: impl Fn(DataStream) -> DataStream,
    mode: OutputMode,
    workers: usize,
    late_aside: bool,
) -> (
    Vec<(i64, Vec<Value>)>,
    Vec<std::collections::BTreeMap<String, String>>,
    usize,
) {
    use std::sync::Arc;
    use weir::arrow::array::{Int64Array, StringArray, TimestampMicrosecondArray};
    use weir::arrow::record_batch::RecordBatch;
    use weir::plan::{DataType, Field};

    let schema = [
        Field::new("key", DataType::String),
        Field::new("ts", DataType::Timestamp),
        Field::new("value", DataType::Int64),
    ];
    let batch_of = |rows: &[(String, i64, i64)]| {
        RecordBatch::try_new(
            weir::row::arrow_schema(&schema),
            vec![
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| &r.0))),
                Arc::new(
                    TimestampMicrosecondArray::from_iter_values(rows.iter().map(|r| r.1))
                        .with_timezone("UTC"),
                ),
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.2))),
            ],
        )
        .unwrap()
    };
    let stream = MemoryStream::new(&schema);
    let sink = MemorySink::new("");
    let table = sink.table();
    let late = MemorySink::new("late");
    let late_table = late.table();
    let steps = session_with(Some(3), workers)
        .read_stream(stream.clone())
        .filter("value % 10 <> 0")
        .select(vec![("key", "key"), ("ts", "et")])
        .with_watermark("et", "10 minutes");
    let mut w = op(steps).write_stream().output_mode(mode).sink(sink);
    if late_aside {
        w = w.late_rows_to(late);
    }
    let q = w.start().unwrap();
    for rows in events_with_a_far_future() {
        stream.add_batch(batch_of(&rows)).unwrap();
        q.process_all_available().unwrap();
    }
    q.stop().unwrap();
    // Each data batch's event times (no-data batches run between).
    let seen: Vec<_> = q
        .recent_progress()
        .into_iter()
        .filter(|p| p.num_input_rows > 0)
        .map(|p| p.event_time)
        .collect();
    assert_eq!(seen.len(), 2);
    let out = table
        .batches()
        .iter()
        .map(|(id, b)| (*id, rows_json(b)))
        .collect();
    (out, seen, rows_json(&late_table.rows()).len())
}

/// Checks what every operator after [`run_steps_then`]'s steps must give:
/// the event times of the kept rows only (the year 2100 moves no
/// watermark), and the same rows, statistics and late rows at 1 and 4
/// workers, with a late-rows side output (the steps then run as tasks of
/// their own first) or without (inside the operator's tasks), with `late`
/// rows sent aside when given. Returns the rows each batch emitted.
fn same_with_steps_inside_or_before(
    op: impl Fn(DataStream) -> DataStream + Copy,
    mode: OutputMode,
    late: Option<usize>,
) -> Vec<(i64, Vec<Value>)> {
    let (out, seen, _) = run_steps_then(op, mode, 1, false);
    let [first, _] = events_with_a_far_future();
    let first_ms: Vec<i64> = kept(&first).iter().map(|(_, t)| t / 1000).collect();
    let max_ms = *first_ms.iter().max().unwrap();
    assert_eq!(crate::common::iso_ms(&seen[0]["max"]), max_ms);
    assert_eq!(
        crate::common::iso_ms(&seen[0]["min"]),
        *first_ms.iter().min().unwrap()
    );
    assert_eq!(
        crate::common::iso_ms(&seen[1]["watermark"]),
        max_ms - 600_000
    );
    for (workers, late_aside) in [(4, false), (1, true), (4, true)] {
        let (o, s, aside) = run_steps_then(op, mode, workers, late_aside);
        let case = format!("{workers} workers, late rows aside: {late_aside}");
        assert_eq!(o, out, "{case}");
        assert_eq!(s, seen, "{case}");
        if let (true, Some(late)) = (late_aside, late) {
            assert_eq!(aside, late, "{case}");
        }
    }
    out
}

/// Filters, a projection and a watermark before an aggregation run inside
/// the aggregation's tasks: a row the filter drops moves neither a count
/// nor the watermark, whatever the worker count and whether late rows are
/// sent aside.
#[test]
fn steps_before_an_aggregation_see_only_the_rows_they_pass_in_its_tasks() {
    use std::collections::BTreeMap;
    let out = same_with_steps_inside_or_before(
        |s| {
            s.group_by(vec![window("et", "10 minutes"), col("key")])
                .agg(vec![count_star("n")])
        },
        OutputMode::Update,
        // The 500 rows of minute 1, whose window had closed.
        Some(500),
    );
    // The first batch's counts are those of the rows the filter kept.
    let [first, _] = events_with_a_far_future();
    let mut fold: BTreeMap<(i64, String), i64> = BTreeMap::new();
    for (k, t) in kept(&first) {
        let start_ms = (t / 1000).div_euclid(600_000) * 600_000;
        *fold.entry((start_ms, k)).or_default() += 1;
    }
    assert_eq!(out[0].0, 0);
    assert_eq!(out[0].1.len(), fold.len(), "one row per group");
    let got: BTreeMap<(i64, String), i64> = out[0]
        .1
        .iter()
        .map(|r| {
            let start = crate::common::iso_ms(r["window"]["start"].as_str().unwrap());
            (
                (start, r["key"].as_str().unwrap().to_string()),
                r["n"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, fold);
}

/// The same steps before a deduplication run inside the tasks that encode
/// its keys: it keeps the first of each (key, time) among the rows the
/// filter passed, in input order.
#[test]
fn steps_before_a_deduplication_see_only_the_rows_they_pass_in_its_tasks() {
    let out = same_with_steps_inside_or_before(
        |s| s.drop_duplicates(&["key", "et"]),
        OutputMode::Append,
        // The 500 rows of minute 1, behind the watermark.
        Some(500),
    );
    let [first, second] = events_with_a_far_future();
    let mut seen = std::collections::HashSet::new();
    let want: Vec<(String, i64)> = kept(&first)
        .into_iter()
        .chain(
            // Of the second batch, only the rows ahead of the watermark.
            kept(&second)
                .into_iter()
                .filter(|(_, t)| *t > 1_704_110_400_000_000 + 120 * 1_000_000),
        )
        .filter(|r| seen.insert(r.clone()))
        .collect();
    let got: Vec<(String, i64)> = out
        .iter()
        .flat_map(|(_, rows)| rows)
        .map(|r| {
            (
                r["key"].as_str().unwrap().to_string(),
                crate::common::iso_ms(r["et"].as_str().unwrap()) * 1000,
            )
        })
        .collect();
    assert_eq!(got, want);
}

/// The same steps before session windows run inside the tasks that route
/// their events: the first batch's sessions hold every row the filter
/// kept, and none of the year 2100.
#[test]
fn steps_before_session_windows_see_only_the_rows_they_pass_in_its_tasks() {
    let out = same_with_steps_inside_or_before(
        |s| {
            s.group_by(vec![session_window("et", "5 minutes"), col("key")])
                .agg(vec![count_star("n")])
        },
        // (Session windows run in append or complete mode; complete emits
        // every session each batch, and moves no watermark between
        // batches, so nothing is late there.)
        OutputMode::Complete,
        Some(0),
    );
    let [first, _] = events_with_a_far_future();
    assert_eq!(out[0].0, 0);
    let counted: i64 = out[0].1.iter().map(|r| r["n"].as_i64().unwrap()).sum();
    assert_eq!(counted, kept(&first).len() as i64);
    let latest = out[0]
        .1
        .iter()
        .map(|r| crate::common::iso_ms(r["session_window"]["end"].as_str().unwrap()))
        .max()
        .unwrap();
    assert!(
        latest < 1_704_110_400_000 + 2 * 3_600_000,
        "no session in 2100"
    );
}

/// Session windows send the rows they drop as late to the late-rows side
/// output, as the aggregation and the deduplication do: in append mode the
/// second batch's rows of minute 1 (their one-event sessions end at minute
/// 6, long before the watermark) go aside, and the metric counts them.
#[test]
fn session_windows_send_their_late_rows_aside() {
    let session = |s: DataStream| {
        s.group_by(vec![session_window("et", "5 minutes"), col("key")])
            .agg(vec![count_star("n")])
    };
    for workers in [1, 4] {
        let (_, _, aside) = run_steps_then(session, OutputMode::Append, workers, true);
        assert_eq!(aside, 500, "{workers} workers");
    }
}

/// The state files of version `version` under `chk`'s `state/` directory
/// (every operator, partition and store).
fn state_versions_written(chk: &std::path::Path, version: i64) -> usize {
    fn walk(dir: &std::path::Path, name: &str, n: &mut usize) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, name, n);
            } else if e.file_name().to_str() == Some(name) {
                *n += 1;
            }
        }
    }
    let mut n = 0;
    walk(&chk.join("state"), &format!("{version}.delta"), &mut n);
    n
}

/// When the sink sees batch N, how many of state version N+1's files
/// exist, per batch; and how many once the query stopped.
fn state_files_when_the_sink_runs(shape: Shape) -> (Vec<usize>, Vec<usize>) {
    let chk = tempfile::tempdir().unwrap();
    let path = chk.path().to_path_buf();
    let s = session_with(Some(3), 2);
    let stream = MemoryStream::new(&fields());
    let right = MemoryStream::new(&fields());
    let (d, mode) = build(&s, &stream, &right, shape);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen_by_sink = seen.clone();
    let q = d
        .write_stream()
        .output_mode(mode)
        .checkpoint_location(path.to_str().unwrap())
        .foreach_batch(move |id, _| {
            let n = state_versions_written(&path, id + 1);
            seen_by_sink.lock().unwrap().push(n);
            Ok(())
        })
        .start()
        .unwrap();
    q.process_all_available().unwrap();
    for input in fixed_inputs().iter().take(3) {
        add_even_odd(&stream, &right, input);
        q.process_all_available().unwrap();
    }
    q.stop().unwrap();
    assert!(q.exception().is_none(), "{:?}", q.exception());
    let seen = seen.lock().unwrap().clone();
    let after = (0..seen.len() as i64)
        .map(|b| state_versions_written(chk.path(), b + 1))
        .collect();
    (seen, after)
}

/// An aggregation's state partitions commit in their own tasks, as Spark's
/// tasks commit their state stores: every partition's version is written
/// before the sink sees the batch. A stream-stream join (whose partition
/// task changes both sides' stores) commits after the sink. Either way
/// every version is written by the time the batch is done.
#[test]
fn an_aggregation_commits_its_state_in_its_tasks_and_a_join_after_the_sink() {
    let (agg_seen, agg_after) =
        state_files_when_the_sink_runs(Shape::WindowAgg(OutputMode::Update));
    assert!(!agg_seen.is_empty());
    assert!(agg_seen.iter().all(|&n| n == 3), "{agg_seen:?}");
    assert_eq!(agg_seen, agg_after);
    let (join_seen, join_after) = state_files_when_the_sink_runs(Shape::Join(JoinType::Inner));
    assert!(!join_seen.is_empty());
    assert!(join_seen.iter().all(|&n| n == 0), "{join_seen:?}");
    assert!(join_after.iter().all(|&n| n > 0), "{join_after:?}");
}
