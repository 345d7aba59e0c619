//! Joins built with the run-time builder: stream-static with a table that
//! is re-read on a schedule, and stream-stream with watermarks and a time
//! range (outer rows emitted once the watermark guarantees no match).

use std::time::Duration;

use serde_json::json;
use weir::dataset::JoinOn;
use weir::functions::{col, count_star, window};
use weir::plan::{DataType, Field, JoinType};
use weir::sink::MemorySink;
use weir::source::{FileFormat, MemoryStream};
use weir::StaticTable;

use crate::common::rows_json;

use crate::common::session;

fn write_dims(path: &std::path::Path, name_of_a: &str) {
    let fields = vec![
        Field::new("key", DataType::String),
        Field::new("name", DataType::String),
    ];
    let batch = weir::row::batch_from_arrays(
        fields,
        vec![
            <String as weir::ArrowValue>::to_array(vec!["a".into(), "b".into()]),
            <String as weir::ArrowValue>::to_array(vec![name_of_a.into(), "Beta".into()]),
        ],
    )
    .unwrap();
    let tmp = path.with_extension("tmp");
    let f = std::fs::File::create(&tmp).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(f, batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    std::fs::rename(tmp, path).unwrap();
}

/// The `dims` table (`key`, `name`) of the Parquet files in `dir`.
fn dims_table(dir: &std::path::Path) -> StaticTable {
    StaticTable::files(
        dir,
        FileFormat::Parquet,
        vec![
            Field::new("key", DataType::String),
            Field::new("name", DataType::String),
        ],
    )
}

/// A stream of events (`key`, `value`).
fn events() -> MemoryStream {
    MemoryStream::new(&[
        Field::new("key", DataType::String),
        Field::new("value", DataType::Int64),
    ])
}

#[test]
fn stream_static_left_outer_join_rereads_a_slowly_changing_table() {
    let dir = tempfile::tempdir().unwrap();
    let dims_dir = dir.path().join("dims");
    std::fs::create_dir_all(&dims_dir).unwrap();
    write_dims(&dims_dir.join("dims.parquet"), "Alpha");
    let dims = dims_table(&dims_dir).refresh_every(Duration::from_millis(200));
    let events = events();
    let sink = MemorySink::new("");
    let table = sink.table();
    let q = session()
        .read_stream(events.clone())
        .join_static("dims", dims, ["key"], JoinType::LeftOuter)
        .write_stream()
        .sink(sink)
        .start()
        .unwrap();
    events
        .add_json(&[
            json!({"key": "a", "value": 1}),
            json!({"key": "z", "value": 2}),
        ])
        .unwrap();
    q.process_all_available().unwrap();
    write_dims(&dims_dir.join("dims.parquet"), "Alpha v2");
    std::thread::sleep(Duration::from_millis(300));
    events.add_json(&[json!({"key": "a", "value": 3})]).unwrap();
    q.process_all_available().unwrap();
    q.stop().unwrap();
    let batches = table.batches();
    let first: Vec<_> = rows_json(&batches[0].1);
    assert!(
        first.contains(&json!({"key": "a", "value": 1, "name": "Alpha"})),
        "{first:?}"
    );
    assert!(
        first.contains(&json!({"key": "z", "value": 2, "name": null})),
        "unmatched stream rows keep their nulls: {first:?}"
    );
    assert_eq!(
        rows_json(&batches[1].1),
        vec![json!({"key": "a", "value": 3, "name": "Alpha v2"})]
    );
}

#[test]
fn stream_static_left_anti_join_keeps_the_rows_without_a_match() {
    let dir = tempfile::tempdir().unwrap();
    let dims_dir = dir.path().join("dims");
    std::fs::create_dir_all(&dims_dir).unwrap();
    write_dims(&dims_dir.join("dims.parquet"), "Alpha");
    let dims = dims_table(&dims_dir);
    let events = events();
    let sink = MemorySink::new("");
    let table = sink.table();
    let q = session()
        .read_stream(events.clone())
        .join_static("dims", dims, ["key"], JoinType::LeftAnti)
        .write_stream()
        .sink(sink)
        .start()
        .unwrap();
    events
        .add_json(&[
            json!({"key": "a", "value": 1}),
            json!({"key": "z", "value": 2}),
            json!({"key": "b", "value": 3}),
            json!({"key": "y", "value": 4}),
        ])
        .unwrap();
    q.process_all_available().unwrap();
    q.stop().unwrap();
    let mut rows: Vec<_> = table
        .batches()
        .iter()
        .flat_map(|(_, b)| rows_json(b))
        .collect();
    rows.sort_by_key(|r| r["value"].as_i64());
    // The left's columns only, of the rows no table row matches.
    assert_eq!(
        rows,
        vec![
            json!({"key": "z", "value": 2}),
            json!({"key": "y", "value": 4}),
        ]
    );
}

#[test]
fn a_stream_stream_left_anti_join_is_refused_as_spark_refuses_it() {
    // Watermarks on both sides and a time bound: what a left outer join
    // needs. An anti join is refused all the same (a click may still come
    // for any impression the join has seen), at start, before any batch.
    let err = clicks_within_5_minutes(&imps(), &clicks(), JoinType::LeftAnti)
        .write_stream()
        .sink(MemorySink::new(""))
        .start()
        .expect_err("refused")
        .to_string();
    assert!(
        err.contains(
            "LeftAnti joins with a streaming DataFrame/Dataset on the right are not supported"
        ),
        "{err}"
    );
}

/// A stream of impressions (`imp_id`, `imp_ts`).
fn imps() -> MemoryStream {
    MemoryStream::new(&[
        Field::new("imp_id", DataType::Int64),
        Field::new("imp_ts", DataType::Timestamp),
    ])
}

/// A stream of clicks (`click_id`, `click_ts`).
fn clicks() -> MemoryStream {
    MemoryStream::new(&[
        Field::new("click_id", DataType::Int64),
        Field::new("click_ts", DataType::Timestamp),
    ])
}

/// Impressions joined with their clicks within 5 minutes, 10-minute
/// watermarks on both sides.
fn clicks_within_5_minutes(
    imps: &MemoryStream,
    clicks: &MemoryStream,
    how: JoinType,
) -> weir::DataStream {
    clicks_within_5_minutes_on(&session(), imps, clicks, how)
}

/// The same join on session `s`.
fn clicks_within_5_minutes_on(
    s: &weir::Session,
    imps: &MemoryStream,
    clicks: &MemoryStream,
    how: JoinType,
) -> weir::DataStream {
    s.read_stream(imps.clone())
        .with_watermark("imp_ts", "10 minutes")
        .join(
            s.read_stream(clicks.clone()).with_watermark("click_ts", "10 minutes"),
            JoinOn::Expr("click_id = imp_id AND click_ts >= imp_ts AND click_ts <= imp_ts + INTERVAL '5 minutes'".into()),
            how,
        )
}

#[test]
fn stream_stream_left_outer_join_emits_unmatched_rows_when_the_watermark_passes() {
    left_outer_join_on(session(), None);
}

/// The same left outer join with both sides' state split over 2, 3 and 8
/// partitions by the join key (each partition joins, evicts and emits its
/// unmatched impressions as a task on 1 or 4 workers): the same rows.
#[test]
fn stream_stream_left_outer_join_alike_on_every_partition_count() {
    for partitions in [2, 3, 8] {
        for workers in [1, 4] {
            let mut conf = weir::SessionConfig {
                fsync_checkpoint: false,
                ..weir::SessionConfig::default()
            };
            conf.set("spark.sql.shuffle.partitions", &partitions.to_string())
                .unwrap();
            conf.set("weir.workerThreads", &workers.to_string())
                .unwrap();
            left_outer_join_on(weir::Session::with_config(conf), Some(partitions));
        }
    }
}

/// Runs the left outer join on `s`; `partitions`: the state partitions it
/// is set to, checked against the progress' `numShufflePartitions` (and
/// two stores, left and right, per partition).
fn left_outer_join_on(s: weir::Session, partitions: Option<usize>) {
    let chk = tempfile::tempdir().unwrap();
    let (imps, clicks) = (imps(), clicks());
    let sink = MemorySink::new("");
    let table = sink.table();
    let q = clicks_within_5_minutes_on(&s, &imps, &clicks, JoinType::LeftOuter)
        .write_stream()
        .sink(sink)
        .checkpoint_location(chk.path().to_str().unwrap())
        .start()
        .unwrap();
    imps.add_json(&[
        json!({"imp_id": 1, "imp_ts": "2024-01-01T12:00:00Z"}),
        json!({"imp_id": 2, "imp_ts": "2024-01-01T12:01:00Z"}),
    ])
    .unwrap();
    clicks
        .add_json(&[json!({"click_id": 1, "click_ts": "2024-01-01T12:03:00Z"})])
        .unwrap();
    q.process_all_available().unwrap();
    let matched: Vec<_> = table
        .batches()
        .iter()
        .flat_map(|(_, b)| rows_json(b))
        .collect();
    assert_eq!(
        matched,
        vec![
            json!({"imp_id": 1, "imp_ts": "2024-01-01T12:00:00Z", "click_id": 1, "click_ts": "2024-01-01T12:03:00Z"})
        ]
    );
    // Time moves on: impression 2 can no longer be clicked within 5 minutes.
    imps.add_json(&[json!({"imp_id": 3, "imp_ts": "2024-01-01T12:30:00Z"})])
        .unwrap();
    clicks
        .add_json(&[json!({"click_id": 9, "click_ts": "2024-01-01T12:30:00Z"})])
        .unwrap();
    q.process_all_available().unwrap();
    q.stop().unwrap();
    let all: Vec<_> = table
        .batches()
        .iter()
        .flat_map(|(_, b)| rows_json(b))
        .collect();
    assert!(all.contains(&json!({"imp_id": 2, "imp_ts": "2024-01-01T12:01:00Z", "click_id": null, "click_ts": null})), "{all:?}");
    let p = q.last_progress().unwrap();
    assert_eq!(p.state_operators[0].operator_name, "symmetricHashJoin");
    assert!(
        p.state_operators[0].num_rows_total < 5,
        "state was evicted: {:?}",
        p.state_operators[0]
    );
    if let Some(n) = partitions {
        let op = &p.state_operators[0];
        assert_eq!(
            (op.num_shuffle_partitions, op.num_state_store_instances),
            (n as i64, 2 * n as i64)
        );
    }
}

/// Late rows of an aggregation after a stream-static join go to the late
/// sink in the joined schema (the static join drops nothing itself).
#[test]
fn late_rows_after_a_static_join_have_the_joined_schema() {
    let chk = tempfile::tempdir().unwrap();
    let events = MemoryStream::new(&[
        Field::new("ts", DataType::Timestamp),
        Field::new("key", DataType::String),
    ]);
    let dims = MemoryStream::new(&[
        Field::new("key", DataType::String),
        Field::new("tier", DataType::Int32),
    ]);
    dims.add_json(&[json!({"key": "a", "tier": 1})]).unwrap();
    let mut src: weir::source::BoxSource = Box::new(dims);
    let rows = src.get_batch(None, &serde_json::Value::from(0)).unwrap();
    let table = StaticTable::from_batches(rows[0].schema(), rows);
    let late = MemorySink::new("");
    let late_table = late.table();
    let q = session()
        .read_stream(events.clone())
        .with_watermark("ts", "10 minutes")
        .join_static("dims", table, ["key"], JoinType::LeftOuter)
        .group_by(vec![window("ts", "10 minutes"), col("tier")])
        .agg(vec![count_star("n")])
        .write_stream()
        .output_mode(weir::plan::OutputMode::Append)
        .sink(MemorySink::new(""))
        .late_rows_to(late)
        .checkpoint_location(chk.path().to_str().unwrap())
        .start()
        .unwrap();
    events
        .add_json(&[json!({"ts": "2024-01-01T12:30:00Z", "key": "a"})])
        .unwrap();
    q.process_all_available().unwrap();
    events
        .add_json(&[json!({"ts": "2024-01-01T12:05:00Z", "key": "a"})])
        .unwrap();
    q.process_all_available().unwrap();
    q.stop().unwrap();
    assert!(q.exception().is_none(), "{:?}", q.exception());
    let late: Vec<serde_json::Value> = late_table
        .batches()
        .iter()
        .flat_map(|(_, b)| rows_json(b))
        .collect();
    assert_eq!(
        late,
        vec![json!({"key": "a", "ts": "2024-01-01T12:05:00Z", "tier": 1})]
    );
}

/// A stream-stream join's late rows, from either side, go to one late sink:
/// `side`, then both sides' columns (nulls for the other side's).
#[test]
fn late_rows_of_a_stream_stream_join_carry_their_side() {
    let chk = tempfile::tempdir().unwrap();
    let (imps, clicks) = (imps(), clicks());
    let late = MemorySink::new("");
    let late_table = late.table();
    let q = clicks_within_5_minutes(&imps, &clicks, JoinType::Inner)
        .write_stream()
        .sink(MemorySink::new(""))
        .late_rows_to(late)
        .checkpoint_location(chk.path().to_str().unwrap())
        .start()
        .unwrap();
    imps.add_json(&[json!({"imp_id": 1, "imp_ts": "2024-01-01T12:30:00Z"})])
        .unwrap();
    clicks
        .add_json(&[json!({"click_id": 1, "click_ts": "2024-01-01T12:31:00Z"})])
        .unwrap();
    q.process_all_available().unwrap();
    // The watermark is 12:20 now: rows at 12:05 are late on either side.
    imps.add_json(&[json!({"imp_id": 2, "imp_ts": "2024-01-01T12:05:00Z"})])
        .unwrap();
    clicks
        .add_json(&[json!({"click_id": 3, "click_ts": "2024-01-01T12:06:00Z"})])
        .unwrap();
    q.process_all_available().unwrap();
    q.stop().unwrap();
    assert!(q.exception().is_none(), "{:?}", q.exception());
    let mut late: Vec<String> = late_table
        .batches()
        .iter()
        .flat_map(|(_, b)| rows_json(b))
        .map(|r| r.to_string())
        .collect();
    late.sort();
    let mut want = [
        json!({"side": "left", "imp_id": 2, "imp_ts": "2024-01-01T12:05:00Z", "click_id": null, "click_ts": null}).to_string(),
        json!({"side": "right", "imp_id": null, "imp_ts": null, "click_id": 3, "click_ts": "2024-01-01T12:06:00Z"}).to_string(),
    ];
    want.sort();
    assert_eq!(late, want);
}
