//! What users see and keep: console output (Spark's exact format), progress
//! JSON (Spark's field names), the file sink's manifest, the memory sink.

use std::sync::{Arc, Mutex};

use serde_json::json;
use weir::functions::{col, count_star, sum, window};
use weir::plan::OutputMode;
use weir::sink::{ConsoleSink, FileSink, MemorySink};
use weir::source::{FileFormat, MemoryStream};

use crate::common::{fields, session};

fn push_inputs(s: &MemoryStream, q: &weir::StreamingQuery) {
    s.add_json(&[
        json!({"ts": "2024-01-01T12:02:00Z", "key": "a", "value": 1}),
        json!({"ts": "2024-01-01T12:07:00Z", "key": "b", "value": 2}),
        json!({"ts": "2024-01-01T12:03:00Z", "key": "a", "value": 3}),
    ])
    .unwrap();
    q.process_all_available().unwrap();
    s.add_json(&[
        json!({"ts": "2024-01-01T12:26:00Z", "key": "a_very_long_key_that_truncates", "value": 7}),
    ])
    .unwrap();
    q.process_all_available().unwrap();
}

#[test]
fn console_output_is_sparks() {
    let chk = tempfile::tempdir().unwrap();
    let stream = MemoryStream::new(&fields());
    let (sink, buf) = ConsoleSink::new().capture();
    let q = session()
        .read_stream(stream.clone())
        .with_watermark("ts", "10 minutes")
        .group_by(vec![window("ts", "10 minutes"), col("key")])
        .agg(vec![count_star("count"), sum("value", "total")])
        .write_stream()
        .output_mode(OutputMode::Update)
        .sink(sink)
        .checkpoint_location(chk.path().to_str().unwrap())
        .start()
        .unwrap();
    push_inputs(&stream, &q);
    q.stop().unwrap();
    let text = String::from_utf8(buf.lock().unwrap().clone()).unwrap();
    insta::assert_snapshot!("console_update_truncated", text);
}

#[test]
fn console_untruncated_and_num_rows() {
    let stream = MemoryStream::new(&fields());
    let (sink, buf) = ConsoleSink::new().truncate(false).num_rows(1).capture();
    let q = session()
        .read_stream(stream.clone())
        .filter("value > 0")
        .write_stream()
        .sink(sink)
        .start()
        .unwrap();
    push_inputs(&stream, &q);
    q.stop().unwrap();
    let text = String::from_utf8(buf.lock().unwrap().clone()).unwrap();
    insta::assert_snapshot!("console_append_untruncated_one_row", text);
}

#[test]
fn progress_json_has_sparks_fields() {
    let chk = tempfile::tempdir().unwrap();
    let stream = MemoryStream::new(&fields());
    // Three state partitions (not the machine's cores), so the snapshot is
    // the same everywhere: the state metrics are summed over them.
    let mut conf = weir::SessionConfig {
        fsync_checkpoint: false,
        ..weir::SessionConfig::default()
    };
    conf.set("spark.sql.shuffle.partitions", "3").unwrap();
    let q = weir::Session::with_config(conf)
        .read_stream(stream.clone())
        .with_watermark("ts", "10 minutes")
        .group_by(vec![window("ts", "10 minutes"), col("key")])
        .agg(vec![count_star("count")])
        .write_stream()
        .output_mode(OutputMode::Append)
        .query_name("progress_demo")
        .sink(MemorySink::new(""))
        .checkpoint_location(chk.path().to_str().unwrap())
        .start()
        .unwrap();
    push_inputs(&stream, &q);
    let p = q.recent_progress();
    q.stop().unwrap();
    assert_eq!(
        p.iter().map(|p| p.batch_id).collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
    let keys: Vec<&str> = p[2].duration_ms.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "addBatch",
            "commitOffsets",
            "getBatch",
            "latestOffset",
            "queryPlanning",
            "triggerExecution",
            "walCommit"
        ]
    );
    let v = serde_json::to_value(&p[2]).unwrap();
    insta::assert_json_snapshot!("progress_batch_2", v, {
        ".id" => "[id]",
        ".runId" => "[runId]",
        ".timestamp" => "[timestamp]",
        ".durationMs" => "[durations]",
        ".inputRowsPerSecond" => "[rate]",
        ".processedRowsPerSecond" => "[rate]",
        ".stateOperators[].allUpdatesTimeMs" => "[ms]",
        ".stateOperators[].allRemovalsTimeMs" => "[ms]",
        ".stateOperators[].commitTimeMs" => "[ms]",
        ".sources[].inputRowsPerSecond" => "[rate]",
        ".sources[].processedRowsPerSecond" => "[rate]",
    });
    // The memory sink registered its table under the query name.
    assert!(
        session().memory_table("progress_demo").is_none(),
        "tables belong to their session"
    );
}

#[test]
fn memory_sink_complete_mode_holds_the_latest_result() {
    let stream = MemoryStream::new(&fields());
    let s = session();
    let q = s
        .read_stream(stream.clone())
        .group_by(vec![col("key")])
        .agg(vec![count_star("n")])
        .write_stream()
        .output_mode(OutputMode::Complete)
        .query_name("counts")
        .sink(MemorySink::new(""))
        .start()
        .unwrap();
    push_inputs(&stream, &q);
    let table = s
        .memory_table("counts")
        .expect("registered under the query name");
    q.stop().unwrap();
    let rows = crate::common::rows_json(&table.rows());
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(rows.contains(&json!({"key": "a", "n": 2})), "{rows:?}");
}

#[test]
fn file_sink_never_duplicates_a_replayed_batch() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let chk = dir.path().join("chk");
    let run = |stream: &MemoryStream| {
        let q = session()
            .read_stream(stream.clone())
            .write_stream()
            .sink(FileSink::new(&out, FileFormat::Parquet).partition_by(vec!["key".into()]))
            .checkpoint_location(chk.to_str().unwrap())
            .start()
            .unwrap();
        q.process_all_available().unwrap();
        q.stop().unwrap();
    };
    let stream = MemoryStream::new(&fields());
    stream
        .add_json(&[
            json!({"ts": "2024-01-01T12:02:00Z", "key": "a", "value": 1}),
            json!({"ts": "2024-01-01T12:03:00Z", "key": "b", "value": 2}),
        ])
        .unwrap();
    run(&stream);
    let files = weir::sink::file::committed_files(&out).unwrap();
    assert_eq!(files.len(), 2);
    assert!(
        files.iter().any(|f| f.to_string_lossy().contains("key=a/")),
        "{files:?}"
    );
    // A crash before the commit log: batch 0 runs again on restart.
    std::fs::remove_file(chk.join("commits/0")).unwrap();
    run(&stream);
    assert_eq!(weir::sink::file::committed_files(&out).unwrap(), files);
    let on_disk = walk(&out)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .count();
    assert_eq!(on_disk, 2, "no second copy of batch 0");
    // The files read back.
    let f = std::fs::File::open(&files[0]).unwrap();
    let rows: usize = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
        .unwrap()
        .build()
        .unwrap()
        .map(|b| b.unwrap().num_rows())
        .sum();
    assert_eq!(rows, 1);
}

#[test]
fn file_sink_refuses_update_mode() {
    let dir = tempfile::tempdir().unwrap();
    let err = session()
        .read_stream(MemoryStream::new(&fields()))
        .group_by(vec![col("key")])
        .agg(vec![count_star("n")])
        .write_stream()
        .output_mode(OutputMode::Update)
        .sink(FileSink::new(dir.path().join("out"), FileFormat::Json))
        .checkpoint_location(dir.path().join("chk").to_str().unwrap())
        .start()
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("does not support Update output mode"),
        "{err}"
    );
}

#[test]
fn foreach_batch_gets_ids_and_rows() {
    let seen: Arc<Mutex<Vec<(i64, usize)>>> = Arc::default();
    let s2 = seen.clone();
    let stream = MemoryStream::new(&fields());
    let dir = tempfile::tempdir().unwrap();
    let q = session()
        .read_stream(stream.clone())
        .filter("key = 'a'")
        .write_stream()
        .foreach_batch(move |id, b| {
            s2.lock()
                .unwrap()
                .push((id, b.iter().map(|b| b.num_rows()).sum()));
            Ok(())
        })
        .checkpoint_location(dir.path().to_str().unwrap())
        .start()
        .unwrap();
    push_inputs(&stream, &q);
    q.stop().unwrap();
    assert_eq!(*seen.lock().unwrap(), vec![(0, 2), (1, 0)]);
}

fn walk(p: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(p).unwrap().flatten() {
        if e.path().is_dir() {
            out.extend(walk(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out
}

#[test]
fn late_rows_go_to_a_side_output_instead_of_vanishing() {
    let chk = tempfile::tempdir().unwrap();
    let stream = MemoryStream::new(&fields());
    let late = MemorySink::new("");
    let late_table = late.table();
    let q = session()
        .read_stream(stream.clone())
        .with_watermark("ts", "10 minutes")
        .group_by(vec![window("ts", "10 minutes"), col("key")])
        .agg(vec![count_star("count")])
        .write_stream()
        .output_mode(OutputMode::Append)
        .sink(MemorySink::new(""))
        .late_rows_to(late)
        .checkpoint_location(chk.path().to_str().unwrap())
        .start()
        .unwrap();
    stream
        .add_json(&[json!({"ts": "2024-01-01T12:30:00Z", "key": "a", "value": 1})])
        .unwrap();
    q.process_all_available().unwrap();
    // The watermark is now 12:20: a 12:05 row's window [12:00, 12:10) has closed.
    stream
        .add_json(&[
            json!({"ts": "2024-01-01T12:05:00Z", "key": "late", "value": 2}),
            json!({"ts": "2024-01-01T12:25:00Z", "key": "ok", "value": 3}),
        ])
        .unwrap();
    q.process_all_available().unwrap();
    let p = q.recent_progress();
    q.stop().unwrap();
    let dropped: i64 = p
        .iter()
        .map(|p| p.state_operators[0].num_rows_dropped_by_watermark)
        .sum();
    assert_eq!(dropped, 1);
    let late_rows: Vec<_> = late_table
        .batches()
        .iter()
        .flat_map(|(_, b)| crate::common::rows_json(b))
        .collect();
    assert_eq!(
        late_rows,
        vec![json!({"ts": "2024-01-01T12:05:00Z", "key": "late", "value": 2})]
    );
}
