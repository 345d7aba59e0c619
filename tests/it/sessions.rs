//! Session windows: per-key sessions that merge when events bridge them,
//! emitted once the watermark passes their end (append), kept across restarts.

use serde_json::json;
use weir::functions::{col, count_star, session_window, sum};
use weir::plan::{DataType, Field, OutputMode};
use weir::sink::MemorySink;
use weir::source::MemoryStream;
use weir::{Session, SessionConfig, WeirError};

use crate::common::rows_json;

fn fields() -> Vec<Field> {
    vec![
        Field::new("ts", DataType::Timestamp),
        Field::new("user", DataType::String),
        Field::new("n", DataType::Int64),
    ]
}

fn start(
    stream: &MemoryStream,
    chk: &std::path::Path,
    sink: MemorySink,
    mode: OutputMode,
) -> Result<weir::StreamingQuery, WeirError> {
    start_on(stream, chk, sink, mode, 1, 1)
}

/// The sessions query with its state over `partitions` state partitions,
/// run by `workers` threads.
fn start_on(
    stream: &MemoryStream,
    chk: &std::path::Path,
    sink: MemorySink,
    mode: OutputMode,
    partitions: usize,
    workers: usize,
) -> Result<weir::StreamingQuery, WeirError> {
    let mut conf = SessionConfig {
        fsync_checkpoint: false,
        ..SessionConfig::default()
    };
    conf.set("spark.sql.shuffle.partitions", &partitions.to_string())?;
    conf.set("weir.workerThreads", &workers.to_string())?;
    Session::with_config(conf)
        .read_stream(stream.clone())
        .with_watermark("ts", "1 minute")
        .group_by(vec![session_window("ts", "5 minutes"), col("user")])
        .agg(vec![count_star("events"), sum("n", "total")])
        .write_stream()
        .output_mode(mode)
        .sink(sink)
        .checkpoint_location(chk.to_str().unwrap())
        .start()
}

fn ev(ts: &str, user: &str, n: i64) -> serde_json::Value {
    json!({"ts": ts, "user": user, "n": n})
}

#[test]
fn sessions_merge_close_on_the_watermark_and_survive_a_restart() {
    sessions_merge_and_close_on(1, 1);
}

/// The same sessions with their state split over 2, 3 and 8 partitions
/// (each user's sessions merge and close in their key's partition, as tasks
/// on 1 or 4 workers): the same rows, in the same order.
#[test]
fn sessions_merge_and_close_alike_on_every_partition_count() {
    for partitions in [2, 3, 8] {
        for workers in [1, 4] {
            sessions_merge_and_close_on(partitions, workers);
        }
    }
}

fn sessions_merge_and_close_on(partitions: usize, workers: usize) {
    let start = |stream: &MemoryStream, chk: &std::path::Path, sink, mode| {
        start_on(stream, chk, sink, mode, partitions, workers)
    };
    let dir = tempfile::tempdir().unwrap();
    let stream = MemoryStream::new(&fields());
    let all = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = || {
        let s = MemorySink::new("");
        (s.table(), s)
    };
    let (t1, s1) = sink();
    let q = start(&stream, dir.path(), s1, OutputMode::Append).unwrap();
    stream
        .add_json(&[
            ev("2024-01-01T12:00:00Z", "a", 1),
            ev("2024-01-01T12:03:00Z", "a", 2),
            ev("2024-01-01T12:01:00Z", "b", 5),
        ])
        .unwrap();
    q.process_all_available().unwrap();
    // 12:06 bridges a's session [12:00, 12:08) and extends it to 12:11.
    stream
        .add_json(&[ev("2024-01-01T12:06:00Z", "a", 3)])
        .unwrap();
    q.process_all_available().unwrap();
    q.stop().unwrap();
    all.lock()
        .unwrap()
        .extend(t1.batches().iter().flat_map(|(_, b)| rows_json(b)));
    assert!(
        all.lock().unwrap().is_empty(),
        "nothing closed yet ({partitions} partitions, {workers} workers): {:?}",
        all.lock().unwrap()
    );
    // Restart: the open sessions come back from the checkpoint.
    let (t2, s2) = sink();
    let q = start(&stream, dir.path(), s2, OutputMode::Append).unwrap();
    stream
        .add_json(&[ev("2024-01-01T12:30:00Z", "c", 1)])
        .unwrap();
    q.process_all_available().unwrap();
    q.stop().unwrap();
    let rows: Vec<_> = t2
        .batches()
        .iter()
        .flat_map(|(_, b)| rows_json(b))
        .collect();
    assert_eq!(
        rows,
        vec![
            json!({"session_window": {"start": "2024-01-01T12:00:00Z", "end": "2024-01-01T12:11:00Z"}, "user": "a", "events": 3, "total": 6}),
            json!({"session_window": {"start": "2024-01-01T12:01:00Z", "end": "2024-01-01T12:06:00Z"}, "user": "b", "events": 1, "total": 5}),
        ],
        "{partitions} partitions, {workers} workers"
    );
}

#[test]
fn update_mode_and_global_sessions_are_refused_as_by_spark() {
    let dir = tempfile::tempdir().unwrap();
    let stream = MemoryStream::new(&fields());
    let err = start(&stream, dir.path(), MemorySink::new(""), OutputMode::Update)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("Update output mode is not supported for session windows"),
        "{err}"
    );
    let err = Session::new()
        .read_stream(stream)
        .with_watermark("ts", "1 minute")
        .group_by(vec![session_window("ts", "5 minutes")])
        .agg(vec![count_star("n")])
        .write_stream()
        .sink(MemorySink::new(""))
        .start()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("Global aggregation with session window"),
        "{err}"
    );
}
