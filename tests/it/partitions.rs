//! Partitioned execution gives the single-partition answer: for random
//! inputs (keys, event times out of order, rows behind the watermark), a
//! query whose state is split over several partitions and run by several
//! workers emits, batch for batch, exactly what one partition on one worker
//! emits (issue 11).

use proptest::prelude::*;
use serde_json::{json, Value};
use weir::functions::{col, count_star, max, sum, window};
use weir::plan::OutputMode;
use weir::sink::MemorySink;
use weir::source::MemoryStream;
use weir::{DataStream, Session, SessionConfig};

use crate::common::{fields, iso, rows_json};

/// A session with `partitions` state partitions and `workers` threads; batches
/// run only when asked.
fn session(partitions: usize, workers: usize) -> Session {
    let mut conf = SessionConfig {
        fsync_checkpoint: false,
        polling_delay: std::time::Duration::from_secs(3600),
        ..SessionConfig::default()
    };
    conf.set("spark.sql.shuffle.partitions", &partitions.to_string())
        .unwrap();
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
}

fn build(s: &Session, stream: &MemoryStream, shape: Shape) -> (DataStream, OutputMode) {
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
    }
}

/// Runs `inputs` through the query, one micro-batch per input, and returns
/// every batch's output rows (batch id, rows as JSON in output order).
fn run(
    shape: Shape,
    inputs: &[Vec<Value>],
    partitions: usize,
    workers: usize,
) -> Vec<(i64, Vec<Value>)> {
    let s = session(partitions, workers);
    let stream = MemoryStream::new(&fields());
    let (d, mode) = build(&s, &stream, shape);
    let sink = MemorySink::new("");
    let table = sink.table();
    let chk = tempfile::tempdir().unwrap();
    let q = d
        .write_stream()
        .output_mode(mode)
        .sink(sink)
        .checkpoint_location(chk.path().to_str().unwrap())
        .start()
        .unwrap();
    for input in inputs {
        stream.add_json(input).unwrap();
        q.process_all_available().unwrap();
    }
    q.stop().unwrap();
    let mut out: Vec<(i64, Vec<Value>)> = table
        .batches()
        .into_iter()
        .map(|(id, b)| {
            let mut rows = rows_json(&b);
            // Dedup keeps input rows, whose order across partitions Spark
            // does not promise; aggregations emit in key order.
            if matches!(shape, Shape::Dedup) {
                rows.sort_by_key(|r| r.to_string());
            }
            (id, rows)
        })
        .collect();
    out.sort_by_key(|(id, _)| *id);
    out
}

/// One event: minutes after 12:00, a key, a value.
fn event(minute: i64, key: u8, value: i64) -> Value {
    json!({
        "ts": iso((1_704_110_400 + minute * 60) * 1_000_000),
        "key": format!("k{key}"),
        "value": value,
    })
}

/// Batches of events moving forward in time with disorder: each batch's
/// events lie around its own time, some far behind (late).
fn inputs() -> impl Strategy<Value = Vec<Vec<Value>>> {
    prop::collection::vec(
        prop::collection::vec((-30i64..15, 0u8..6, 0i64..4), 0..25),
        1..6,
    )
    .prop_map(|batches| {
        batches
            .into_iter()
            .enumerate()
            .map(|(b, evs)| {
                evs.into_iter()
                    .map(|(dt, k, v)| event(b as i64 * 12 + dt, k, v))
                    .collect()
            })
            .collect()
    })
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
    fn partitioned_output_equals_single_partition_output(shape in shapes(), inputs in inputs()) {
        let one = run(shape, &inputs, 1, 1);
        for (partitions, workers) in [(3, 4), (8, 2)] {
            let many = run(shape, &inputs, partitions, workers);
            prop_assert_eq!(&many, &one, "{:?} on {} partitions, {} workers", shape, partitions, workers);
        }
    }
}

/// A batch larger than one task's slice (32k rows) is aggregated in
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
