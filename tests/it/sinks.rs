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
    // Spark's batchDuration: the batch's whole time, as triggerExecution.
    for b in &p {
        assert_eq!(b.batch_duration, b.duration_ms["triggerExecution"]);
    }
    let v = serde_json::to_value(&p[2]).unwrap();
    insta::assert_json_snapshot!("progress_batch_2", v, {
        ".id" => "[id]",
        ".runId" => "[runId]",
        ".timestamp" => "[timestamp]",
        ".durationMs" => "[durations]",
        ".batchDuration" => "[ms]",
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

use crate::pass_noop_sink::NoopBench;

/// Spark's `noop` sink, declared (`sink: noop`) and by format name: every
/// batch is computed and consumed (progress counts its rows), nothing is
/// written, in every output mode.
#[test]
fn the_noop_sink_consumes_every_batch_and_writes_nothing() {
    let session = weir::Session::new();
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk");
    // Two runs of one batch each on one checkpoint: batches 0 and 1.
    for batch in 0..2 {
        let q = NoopBench::writer(&session)
            .unwrap()
            .trigger(weir::Trigger::AvailableNow)
            .checkpoint_location(chk.to_str().unwrap())
            .start()
            .unwrap();
        assert!(q
            .await_termination(Some(std::time::Duration::from_secs(30)))
            .unwrap());
        let p = q.last_progress().unwrap();
        assert_eq!((p.batch_id, p.num_input_rows), (batch, 100));
        assert_eq!(
            p.sink.description,
            "org.apache.spark.sql.execution.datasources.noop.NoopTable$"
        );
    }
    // Nothing but the checkpoint's own files; no table, no sink files.
    assert!(session.memory_table("noop_bench").is_none());
    let mut top: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    top.sort();
    assert_eq!(top, ["chk"]);
    assert!(!chk.join("sinks").exists());

    // By Spark's format name, in complete mode (Spark's noop takes any),
    // without a checkpoint location: like console and memory, noop runs on
    // a temporary one (Spark's useTempCheckpointLocation).
    let stream = MemoryStream::new(&fields());
    let q = session
        .read_stream(stream.clone())
        .group_by(vec![col("key")])
        .agg(vec![count_star("count")])
        .write_stream()
        .output_mode(OutputMode::Complete)
        .sink(weir::sink::from_options("noop", Vec::<(&str, &str)>::new()).unwrap())
        .start()
        .unwrap();
    push_inputs(&stream, &q);
    let rows: i64 = q.recent_progress().iter().map(|p| p.num_input_rows).sum();
    q.stop().unwrap();
    assert_eq!(rows, 4);
}

/// One rule, one message: each sink option value of the trybuild case
/// `ui-tests/compile-fail/connector_sink_options.rs` is refused by
/// `stream_query!` (its .stderr), by `weir::sink::from_options` and by the
/// sink's typed builder at start, with the connector table rule's message.
#[test]
fn the_macro_and_the_engine_refuse_the_same_sink_options_with_the_same_message() {
    use weir::plan::connectors;
    let stderr = include_str!("../../ui-tests/compile-fail/connector_sink_options.stderr");
    // (the sink, the macro's name, Spark's name, the value, other options
    // from_options needs): the cases of the trybuild file.
    type Case<'a> = (&'a str, &'a str, &'a str, &'a str, &'a [(&'a str, &'a str)]);
    let cases: &[Case] = &[
        ("console", "num_rows", "numRows", "0", &[]),
        (
            "kafka",
            "topic",
            "topic",
            "",
            &[("kafka.bootstrap.servers", "127.0.0.1:1")],
        ),
        (
            "kafka",
            "delivery",
            "deliveryGuarantee",
            "at_most_once",
            &[("kafka.bootstrap.servers", "127.0.0.1:1")],
        ),
        (
            "redis",
            "key_prefix",
            "keyPrefix",
            "",
            &[("url", "redis://127.0.0.1:1")],
        ),
    ];
    for (sink, macro_name, spark_name, value, others) in cases {
        let spec = connectors::sink(sink).unwrap();
        let kind = spec.option(spark_name).unwrap().kind;
        let at_compile_time = connectors::check_value(kind, macro_name, value).unwrap_err();
        assert!(
            stderr.contains(&format!("error: {}\n", at_compile_time.message)),
            "the macro's message for {macro_name} = {value:?} is not the table's: {}",
            at_compile_time.message
        );
        let at_start = connectors::check_value(kind, spark_name, value)
            .unwrap_err()
            .to_string();
        let built = cfg!(feature = "kafka") || *sink != "kafka";
        let built = built && (cfg!(feature = "redis") || *sink != "redis");
        if built {
            let mut options = others.to_vec();
            options.push((spark_name, value));
            let e = weir::sink::from_options(sink, options).err().unwrap();
            assert!(
                e.to_string().contains(&at_start),
                "{sink} {spark_name}={value:?}: from_options says {e}, the table {at_start}"
            );
        }
    }
    assert!(stderr.contains("error: unknown option `num_rows` for the noop sink\n       help: the noop sink takes no options"));
    // The typed builders go through the same rules when the query starts.
    let start = |sink: weir::sink::BoxSink| -> String {
        let dir = tempfile::tempdir().unwrap();
        let stream = MemoryStream::new(&fields());
        let r = session()
            .read_stream(stream)
            .write_stream()
            .sink(sink)
            .checkpoint_location(dir.path().to_str().unwrap())
            .start();
        match r {
            Err(e) => e.to_string(),
            Ok(q) => {
                let _ = q.await_termination(Some(std::time::Duration::from_millis(500)));
                let e = q.exception().map(|e| e.to_string()).unwrap_or_default();
                let _ = q.stop();
                e
            }
        }
    };
    let rule = |sink: &str, option: &str, value: &str| {
        connectors::sink(sink)
            .unwrap()
            .check(option, value)
            .unwrap_err()
            .to_string()
    };
    let e = start(Box::new(ConsoleSink::new().num_rows(0)));
    assert!(e.contains(&rule("console", "numRows", "0")), "{e}");
    #[cfg(feature = "kafka")]
    {
        let e = start(Box::new(
            weir::sink::KafkaSink::new("127.0.0.1:1")
                .json_values()
                .topic(""),
        ));
        assert!(e.contains(&rule("kafka", "topic", "")), "{e}");
        let e = start(Box::new(
            weir::sink::KafkaSink::new("127.0.0.1:1")
                .json_values()
                .option("deliveryGuarantee", "at_most_once"),
        ));
        assert!(
            e.contains(&rule("kafka", "deliveryGuarantee", "at_most_once")),
            "{e}"
        );
    }
    #[cfg(feature = "redis")]
    {
        let e = start(Box::new(
            weir::sink::RedisSink::new("redis://127.0.0.1:1").key_prefix(""),
        ));
        assert!(e.contains(&rule("redis", "keyPrefix", "")), "{e}");
    }
}
