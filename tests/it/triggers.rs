//! Triggers, the query handle and the session: available-now, once,
//! processing time, status, listeners, failures surfaced (never swallowed).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use weir::progress::{QueryStartedEvent, QueryTerminatedEvent};
use weir::sink::MemorySink;
use weir::source::{FileFormat, FileSource, MemoryStream, Offset, Source};
use weir::{QueryListener, Session, StreamingQueryProgress, Trigger, WeirError};

use crate::common::{fields, session};

fn write_files(dir: &std::path::Path, n: usize) {
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..n {
        std::fs::write(
            dir.join(format!("f{i}.json")),
            format!("{{\"ts\":\"2024-01-01T12:0{i}:00Z\",\"key\":\"k\",\"value\":{i}}}\n"),
        )
        .unwrap();
    }
}

#[test]
fn available_now_processes_everything_present_in_limited_batches_then_stops() {
    let dir = tempfile::tempdir().unwrap();
    write_files(&dir.path().join("in"), 5);
    let sink = MemorySink::new("t");
    let table = sink.table();
    let q = session()
        .read_stream(
            FileSource::new(dir.path().join("in"), FileFormat::Json, fields())
                .max_files_per_trigger(2),
        )
        .write_stream()
        .trigger(Trigger::AvailableNow)
        .sink(sink)
        .checkpoint_location(dir.path().join("chk").to_str().unwrap())
        .start()
        .unwrap();
    assert!(
        q.await_termination(Some(Duration::from_secs(30))).unwrap(),
        "available-now stops by itself"
    );
    let sizes: Vec<usize> = table
        .batches()
        .iter()
        .map(|(_, b)| b.iter().map(|b| b.num_rows()).sum())
        .collect();
    assert_eq!(sizes, vec![2, 2, 1]);
    assert!(!q.is_active());
}

#[test]
fn once_runs_a_single_batch() {
    let dir = tempfile::tempdir().unwrap();
    write_files(&dir.path().join("in"), 3);
    let sink = MemorySink::new("t");
    let table = sink.table();
    let q = session()
        .read_stream(
            FileSource::new(dir.path().join("in"), FileFormat::Json, fields())
                .max_files_per_trigger(1),
        )
        .write_stream()
        .trigger(Trigger::Once)
        .sink(sink)
        .checkpoint_location(dir.path().join("chk").to_str().unwrap())
        .start()
        .unwrap();
    assert!(q.await_termination(Some(Duration::from_secs(30))).unwrap());
    assert_eq!(table.batches().len(), 1);
}

#[test]
fn processing_time_keeps_its_schedule() {
    let stream = MemoryStream::new(&fields());
    let q = session()
        .read_stream(stream.clone())
        .write_stream()
        .trigger(Trigger::processing_time("300 milliseconds").unwrap())
        .sink(MemorySink::new("t"))
        .start()
        .unwrap();
    for i in 0..3 {
        stream
            .add_json(&[json!({"ts": "2024-01-01T12:00:00Z", "key": "k", "value": i})])
            .unwrap();
        q.process_all_available().unwrap();
    }
    let p = q.recent_progress();
    q.stop().unwrap();
    let times: Vec<i64> = p
        .iter()
        .map(|p| crate::common::iso_ms(&p.timestamp))
        .collect();
    assert_eq!(times.len(), 3);
    for w in times.windows(2) {
        assert!(
            w[1] - w[0] >= 290,
            "batches {} ms apart, the interval is 300 ms",
            w[1] - w[0]
        );
    }
    assert!(Trigger::processing_time("0 seconds").is_err());
}

#[test]
fn status_and_handle_report_what_the_query_does() {
    let stream = MemoryStream::new(&fields());
    let q = session()
        .read_stream(stream.clone())
        .write_stream()
        .query_name("named")
        .sink(MemorySink::new(""))
        .start()
        .unwrap();
    q.process_all_available().unwrap();
    let st = q.status();
    assert_eq!(st.message, "Waiting for data to arrive");
    assert!(!st.is_trigger_active);
    assert_eq!(q.name(), Some("named"));
    assert!(q.explain().contains("MemoryStream"));
    assert!(q.last_progress().is_none(), "no batch without data");
    stream
        .add_json(&[json!({"ts": "2024-01-01T12:00:00Z", "key": "k", "value": 1})])
        .unwrap();
    q.process_all_available().unwrap();
    assert_eq!(q.last_progress().unwrap().num_input_rows, 1);
    q.stop().unwrap();
    assert!(!q.is_active());
    assert_eq!(q.status().message, "Stopped");
}

#[test]
fn the_query_id_survives_a_restart_and_the_run_id_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let stream = MemoryStream::new(&fields());
    let start = || {
        session()
            .read_stream(stream.clone())
            .write_stream()
            .foreach_batch(|_, _| Ok(()))
            .checkpoint_location(dir.path().to_str().unwrap())
            .start()
            .unwrap()
    };
    let a = start();
    a.stop().unwrap();
    let b = start();
    b.stop().unwrap();
    assert_eq!(a.id(), b.id());
    assert_ne!(a.run_id(), b.run_id());
}

/// A source that fails on its second batch.
struct Flaky {
    inner: MemoryStream,
}

impl Source for Flaky {
    fn schema(&self) -> weir::arrow::datatypes::SchemaRef {
        self.inner.schema()
    }
    fn description(&self) -> String {
        "Flaky".into()
    }
    fn latest_offset(&mut self, s: Option<&Offset>) -> weir::Result<Option<Offset>> {
        self.inner.latest_offset(s)
    }
    fn get_batch(
        &mut self,
        s: Option<&Offset>,
        e: &Offset,
    ) -> weir::Result<Vec<weir::arrow::record_batch::RecordBatch>> {
        if e.as_i64() == Some(1) {
            return Err(WeirError::Source {
                source_name: "Flaky".into(),
                message: "the broker went away".into(),
            });
        }
        self.inner.get_batch(s, e)
    }
}

#[derive(Default)]
struct Recorder {
    events: Mutex<Vec<String>>,
}

impl QueryListener for Recorder {
    fn on_query_started(&self, _e: &QueryStartedEvent) {
        self.events.lock().unwrap().push("started".into());
    }
    fn on_query_progress(&self, p: &StreamingQueryProgress) {
        self.events
            .lock()
            .unwrap()
            .push(format!("progress {}", p.batch_id));
    }
    fn on_query_terminated(&self, e: &QueryTerminatedEvent) {
        self.events
            .lock()
            .unwrap()
            .push(format!("terminated {}", e.exception.is_some()));
    }
}

#[test]
fn a_failing_query_returns_its_error_everywhere() {
    let s = session();
    let rec = Arc::new(Recorder::default());
    s.add_listener(rec.clone());
    let stream = MemoryStream::new(&fields());
    let q = s
        .read_stream(Flaky {
            inner: stream.clone(),
        })
        .write_stream()
        .sink(MemorySink::new(""))
        .start()
        .unwrap();
    stream
        .add_json(&[json!({"ts": "2024-01-01T12:00:00Z", "key": "k", "value": 1})])
        .unwrap();
    q.process_all_available().unwrap();
    stream
        .add_json(&[json!({"ts": "2024-01-01T12:00:00Z", "key": "k", "value": 2})])
        .unwrap();
    let err = q
        .await_termination(Some(Duration::from_secs(30)))
        .unwrap_err();
    assert!(err.to_string().contains("the broker went away"), "{err}");
    assert!(q
        .exception()
        .unwrap()
        .to_string()
        .contains("the broker went away"));
    let any = s
        .await_any_termination(Some(Duration::from_secs(5)))
        .unwrap_err();
    assert!(any.to_string().contains("the broker went away"));
    assert_eq!(
        *rec.events.lock().unwrap(),
        vec!["started", "progress 0", "terminated true"]
    );
}

#[test]
fn invalid_queries_fail_at_start_with_sparks_message() {
    let err = session()
        .read_stream(MemoryStream::new(&fields()))
        .group_by(vec![weir::functions::col("key")])
        .agg(vec![weir::functions::count_star("n")])
        .write_stream()
        .sink(MemorySink::new(""))
        .start()
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("Append output mode not supported when there are streaming aggregations"),
        "{msg}"
    );
    assert!(msg.contains("help:"), "{msg}");
    let err = session()
        .read_stream(MemoryStream::new(&fields()))
        .write_stream()
        .foreach_batch(|_, _| Ok(()))
        .start()
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("checkpointLocation must be specified"),
        "{err}"
    );
    let err = Session::builder()
        .config("spark.sql.shuffle.partitions", "many")
        .build()
        .err()
        .unwrap();
    assert!(err.to_string().contains("spark.sql.shuffle.partitions"));
}

#[test]
fn the_socket_source_reads_lines_from_a_server() {
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        conn.write_all(b"hello world\nhello weir\n").unwrap();
        std::thread::sleep(Duration::from_millis(300));
    });
    let sink = MemorySink::new("");
    let table = sink.table();
    let q = session()
        .read_stream(weir::source::SocketSource::new("127.0.0.1", port))
        .filter("value LIKE 'hello%'")
        .write_stream()
        .sink(sink)
        .start()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while table.num_rows() < 2 && std::time::Instant::now() < deadline {
        q.process_all_available().unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    q.stop().unwrap();
    server.join().unwrap();
    let rows = crate::common::rows_json(&table.rows());
    assert_eq!(
        rows,
        vec![
            json!({"value": "hello world"}),
            json!({"value": "hello weir"})
        ]
    );
    let err = session()
        .read_stream(weir::source::SocketSource::new("127.0.0.1", port))
        .write_stream()
        .sink(MemorySink::new(""))
        .start()
        .unwrap_err();
    assert!(err.to_string().contains("cannot connect"), "{err}");
}

#[test]
fn a_panicking_foreach_batch_ends_the_query_with_an_error() {
    let stream = MemoryStream::new(&fields());
    let dir = tempfile::tempdir().unwrap();
    let q = session()
        .read_stream(stream.clone())
        .write_stream()
        .foreach_batch(|_, _| panic!("user code blew up"))
        .checkpoint_location(dir.path().to_str().unwrap())
        .start()
        .unwrap();
    stream
        .add_json(&[json!({"ts": "2024-01-01T12:00:00Z", "key": "k", "value": 1})])
        .unwrap();
    let err = q
        .await_termination(Some(Duration::from_secs(30)))
        .unwrap_err();
    assert!(err.to_string().contains("user code blew up"), "{err}");
    // The batch was not committed: a restart runs it again.
    assert!(!dir.path().join("commits/0").exists());
}

#[test]
fn stop_gives_up_after_the_stop_timeout_and_can_be_called_again() {
    // A sink that blocks until released: the running batch cannot end.
    let (release, released) = std::sync::mpsc::channel::<()>();
    let released = Mutex::new(released);
    let (entered, in_sink) = std::sync::mpsc::channel::<()>();
    let entered = Mutex::new(entered);
    let stream = MemoryStream::new(&fields());
    let dir = tempfile::tempdir().unwrap();
    let s = Session::builder()
        .config("weir.checkpoint.fsync", "false")
        .config("spark.sql.streaming.stopTimeout", "200")
        .build()
        .unwrap();
    let q = s
        .read_stream(stream.clone())
        .write_stream()
        .foreach_batch(move |_, _| {
            let _ = entered.lock().unwrap().send(());
            let _ = released.lock().unwrap().recv();
            Ok(())
        })
        .checkpoint_location(dir.path().to_str().unwrap())
        .start()
        .unwrap();
    stream
        .add_json(&[json!({"ts": "2024-01-01T12:00:00Z", "key": "k", "value": 1})])
        .unwrap();
    in_sink.recv().unwrap();
    // Spark's stop(): a TimeoutException after stopTimeout, the query
    // still asked to stop and still running its batch.
    match q.stop() {
        Err(WeirError::StopTimeout(t)) => assert_eq!(t, Duration::from_millis(200)),
        other => panic!("expected the stop timeout, got {other:?}"),
    }
    assert!(q.is_active());
    // Released, the batch ends and the query with it; stop() again succeeds.
    release.send(()).unwrap();
    assert!(q.await_termination(Some(Duration::from_secs(60))).unwrap());
    q.stop().unwrap();
    assert!(!q.is_active());
    assert!(dir.path().join("commits/0").exists(), "the batch committed");
}
