//! Reading ahead (`weir.readAhead`, issue 11): while a batch runs, the next
//! batch is planned, read and routed beside it, as a task of its own. A query
//! that reads ahead emits, batch for batch, what it emits reading each
//! batch in turn (rows, offsets, state and event-time metrics); a read
//! ahead that fails is left to its batch; and a process killed after it
//! read a batch ahead restarts to the uninterrupted run's output.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use serde_json::{json, Value};
use weir::functions::{col, count_star, max, sliding_window, sum, window};
use weir::plan::OutputMode;
use weir::source::{MemoryStream, Offset, Source};
use weir::{DataStream, Session, SessionConfig, WeirError};

use crate::common::{disordered_batches, event, fields, rows_json};

/// What happened, in order: `latest N` (the source said it ends at N),
/// `read N` (it read up to N: batch N's rows, one input a batch), `fail N`
/// (that read failed) and `sink N` (the sink took batch N); and a signal
/// for each entry.
#[derive(Default)]
struct Events {
    log: Mutex<Vec<String>>,
    added: Condvar,
}

type Log = Arc<Events>;

impl Events {
    fn push(&self, e: String) {
        self.log.lock().unwrap().push(e);
        self.added.notify_all();
    }

    /// Waits up to `wait` for an entry about batch `batch` (`read` or
    /// `fail`), then logs `sink {id}`.
    fn sink_after(&self, id: i64, batch: i64, wait: Duration) {
        let deadline = Instant::now() + wait;
        let about = |l: &String| *l == format!("read {batch}") || *l == format!("fail {batch}");
        let mut log = self.log.lock().unwrap();
        while !log.iter().any(about) {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            log = self.added.wait_timeout(log, deadline - now).unwrap().0;
        }
        log.push(format!("sink {id}"));
    }
}

/// A source that offers its inputs one batch per trigger (batch `i` is
/// input `i`; or `per_trigger` of them, of those `fed` so far), reads
/// ahead, and logs its calls (`latest N` as well). `fail_at`: the reads of
/// that batch fail, `fail_times` times (then succeed).
struct Steps {
    inner: MemoryStream,
    batches: i64,
    log: Log,
    fail_at: Option<i64>,
    fail_times: Arc<Mutex<usize>>,
    /// Inputs to offer at most per trigger (one unless set).
    per_trigger: i64,
    /// When set, how many of the inputs are there so far (fed while the
    /// query runs); else all are.
    fed: Option<Arc<std::sync::atomic::AtomicI64>>,
}

impl Steps {
    fn new(inputs: &[Vec<Value>], log: Log) -> Steps {
        let inner = MemoryStream::new(&fields());
        for input in inputs {
            inner.add_json(input).unwrap();
        }
        Steps {
            inner,
            batches: inputs.len() as i64,
            log,
            fail_at: None,
            fail_times: Arc::new(Mutex::new(0)),
            per_trigger: 1,
            fed: None,
        }
    }
}

impl Source for Steps {
    fn schema(&self) -> weir::arrow::datatypes::SchemaRef {
        self.inner.schema()
    }
    fn description(&self) -> String {
        "Steps".into()
    }
    fn log_on_storage(&self) -> bool {
        true
    }
    fn reads_ahead(&self) -> bool {
        true
    }
    fn latest_offset(&mut self, start: Option<&Offset>) -> weir::Result<Option<Offset>> {
        let there = match &self.fed {
            Some(fed) => fed
                .load(std::sync::atomic::Ordering::SeqCst)
                .min(self.batches),
            None => self.batches,
        };
        let from = start.and_then(|o| o.as_i64()).unwrap_or(-1);
        let latest = (from + self.per_trigger).min(there - 1);
        self.log.push(format!("latest {latest}"));
        Ok((latest >= 0).then(|| Offset::from(latest)))
    }
    fn get_batch(
        &mut self,
        start: Option<&Offset>,
        end: &Offset,
    ) -> weir::Result<Vec<weir::arrow::record_batch::RecordBatch>> {
        let batch = end.as_i64().unwrap_or(-1);
        if self.fail_at == Some(batch) {
            let mut left = self.fail_times.lock().unwrap();
            if *left > 0 {
                *left -= 1;
                self.log.push(format!("fail {batch}"));
                return Err(WeirError::Source {
                    source_name: "Steps".into(),
                    message: format!("batch {batch} cannot be read"),
                });
            }
        }
        self.log.push(format!("read {batch}"));
        self.inner.get_batch(start, end)
    }
}

/// What a query does to the stream.
#[derive(Debug, Clone, Copy)]
enum Shape {
    /// 10-minute windows per key: count, sum, max.
    Windows(OutputMode),
    /// 20-minute windows sliding by 5 minutes, per key.
    Sliding,
    /// A global count and sum.
    Global,
    /// dropDuplicates(key, value) with a watermark (it does not read ahead).
    Dedup,
}

fn build(s: &Session, source: impl Source + 'static, shape: Shape) -> (DataStream, OutputMode) {
    let d = s
        .read_stream(source)
        .with_watermark("ts", "10 minutes")
        .filter("value < 3");
    match shape {
        Shape::Windows(mode) => (
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
                sliding_window("ts", "20 minutes", "5 minutes"),
                col("key"),
            ])
            .agg(vec![count_star("n"), sum("value", "total")]),
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

/// What the sink took: each batch's id and rows.
type Emitted = Arc<Mutex<Vec<(i64, Vec<Value>)>>>;

/// One emitted batch: its id, rows, and what its progress reported
/// (input rows, offsets, event time, the state operator's counts).
type Batch = (i64, Vec<Value>, Value);

/// Runs the inputs (one batch each) on checkpoint `chk` with reading ahead
/// on or off; returns the batches emitted, the log and the query's error.
/// The sink waits up to `wait` for the next batch's read before it takes
/// a batch (a read ahead comes while it waits; a read in turn after it).
fn run_on(
    shape: Shape,
    inputs: &[Vec<Value>],
    read_ahead: bool,
    workers: usize,
    chk: &std::path::Path,
    fail: Option<(i64, usize)>,
    wait: Duration,
) -> (Vec<Batch>, Vec<String>, Option<String>) {
    let mut conf = SessionConfig {
        fsync_checkpoint: false,
        polling_delay: std::time::Duration::from_secs(3600),
        ..SessionConfig::default()
    };
    conf.set("spark.sql.shuffle.partitions", "2").unwrap();
    conf.set("weir.workerThreads", &workers.to_string())
        .unwrap();
    conf.set("weir.readAhead", &read_ahead.to_string()).unwrap();
    let s = Session::with_config(conf);
    let log: Log = Arc::default();
    let mut source = Steps::new(inputs, log.clone());
    if let Some((at, times)) = fail {
        source.fail_at = Some(at);
        *source.fail_times.lock().unwrap() = times;
    }
    let (d, mode) = build(&s, source, shape);
    let rows: Emitted = Arc::default();
    let (sink_rows, sink_log) = (rows.clone(), log.clone());
    let batches_in = inputs.len() as i64;
    let q = d
        .write_stream()
        .output_mode(mode)
        .foreach_batch(move |id, batches| {
            if id + 1 < batches_in {
                sink_log.sink_after(id, id + 1, wait);
            } else {
                sink_log.push(format!("sink {id}"));
            }
            let mut r = rows_json(batches);
            if matches!(shape, Shape::Dedup) {
                r.sort_by_key(|v| v.to_string());
            }
            sink_rows.lock().unwrap().push((id, r));
            Ok(())
        })
        .checkpoint_location(chk.to_str().unwrap())
        .start()
        .unwrap();
    let _ = q.process_all_available();
    let _ = q.stop();
    let error = q.exception().map(|e| e.to_string());
    let progress: std::collections::BTreeMap<i64, Value> = q
        .recent_progress()
        .iter()
        .map(|p| {
            let op = p.state_operators.first();
            let src = &p.sources[0];
            let v = json!({
                "numInputRows": p.num_input_rows,
                "startOffset": src.start_offset,
                "endOffset": src.end_offset,
                "eventTime": p.event_time,
                "state": op.map(|o| [o.num_rows_total, o.num_rows_updated,
                    o.num_rows_removed, o.num_rows_dropped_by_watermark]),
            });
            (p.batch_id, v)
        })
        .collect();
    let out = rows
        .lock()
        .unwrap()
        .iter()
        .map(|(id, r)| {
            (
                *id,
                r.clone(),
                progress.get(id).cloned().unwrap_or_default(),
            )
        })
        .collect();
    let log = log.log.lock().unwrap().clone();
    (out, log, error)
}

/// How long a sink waits for a read ahead that is due: far longer than it
/// takes (it returns as soon as the read is logged).
const DUE: Duration = Duration::from_secs(20);

/// [`run_on`] on a new checkpoint, the sink waiting for the next batch's
/// read when it is to be read ahead (an aggregation, reading ahead).
fn run(
    shape: Shape,
    inputs: &[Vec<Value>],
    read_ahead: bool,
    workers: usize,
) -> (Vec<Batch>, Vec<String>) {
    let chk = tempfile::tempdir().unwrap();
    let due = read_ahead && !matches!(shape, Shape::Dedup);
    let wait = if due { DUE } else { Duration::ZERO };
    let (out, log, error) = run_on(shape, inputs, read_ahead, workers, chk.path(), None, wait);
    assert_eq!(error, None);
    (out, log)
}

/// Whether batch `k + 1` was read before the sink took batch `k` (while
/// the sink waited for it), for every batch `k` that has a next one.
fn read_before_sink(log: &[String], batches: usize) -> Vec<bool> {
    let at = |e: String| log.iter().position(|l| *l == e);
    (0..batches.saturating_sub(1))
        .map(|k| at(format!("read {}", k + 1)) < at(format!("sink {k}")))
        .collect()
}

fn shapes() -> impl Strategy<Value = Shape> {
    prop_oneof![
        Just(Shape::Windows(OutputMode::Update)),
        Just(Shape::Windows(OutputMode::Append)),
        Just(Shape::Windows(OutputMode::Complete)),
        Just(Shape::Sliding),
        Just(Shape::Global),
        Just(Shape::Dedup),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Read ahead or in turn, on 1 or 2 workers: the same batches, rows
    /// and progress. An aggregation read each next batch while the sink of
    /// the batch before waited, and once (the batch took what was read
    /// ahead); in turn, and for a deduplication (which does not read
    /// ahead), it came after that sink.
    #[test]
    fn a_query_reading_ahead_emits_what_it_emits_reading_in_turn(
        shape in shapes(),
        inputs in disordered_batches(2),
        workers in 1usize..=2,
    ) {
        let (want, in_turn) = run(shape, &inputs, false, 1);
        let (got, ahead) = run(shape, &inputs, true, workers);
        prop_assert_eq!(&got, &want);
        let n = inputs.len();
        prop_assert!(read_before_sink(&in_turn, n).iter().all(|b| !b), "{:?}", in_turn);
        let read_ahead = !matches!(shape, Shape::Dedup);
        prop_assert!(
            read_before_sink(&ahead, n).iter().all(|b| *b == read_ahead),
            "{:?}: {:?}", shape, ahead
        );
        // What was read ahead was used: no batch read twice.
        for b in 0..n {
            let reads = ahead.iter().filter(|l| **l == format!("read {b}")).count();
            prop_assert_eq!(reads, 1, "batch {} in {:?}", b, ahead);
        }
    }
}

/// Five batches of events, ten minutes apart, with rows in every batch.
fn fixed_inputs() -> Vec<Vec<Value>> {
    (0..5i64)
        .map(|b| {
            (0..12)
                .map(|i| event(b * 10 + i % 7 - 2, (i % 4) as u8, i % 3))
                .collect()
        })
        .collect()
}

/// A read ahead that fails is dropped: the batch reads its rows itself
/// (and succeeds), so the output is what an undisturbed run emits. When
/// the batch's own read fails too, the query stops with the source's
/// error, after the batches before it.
#[test]
fn a_failed_read_ahead_is_left_to_its_batch() {
    let inputs = fixed_inputs();
    let shape = Shape::Windows(OutputMode::Update);
    let (want, _) = run(shape, &inputs, false, 1);
    for workers in [1, 2] {
        let chk = tempfile::tempdir().unwrap();
        let (got, log, error) =
            run_on(shape, &inputs, true, workers, chk.path(), Some((2, 1)), DUE);
        assert_eq!(error, None);
        assert_eq!(got, want, "{workers} workers");
        // Batch 2's read ahead failed while batch 1's sink waited, and batch
        // 2 read its rows itself, after that sink; batch 3 was read ahead
        // again.
        assert_eq!(
            read_before_sink(&log, inputs.len()),
            [true, false, true, true]
        );

        let chk = tempfile::tempdir().unwrap();
        let (got, _, error) = run_on(shape, &inputs, true, workers, chk.path(), Some((2, 2)), DUE);
        let error = error.expect("the query fails");
        assert!(error.contains("batch 2 cannot be read"), "{error}");
        assert_eq!(got, want[..2].to_vec(), "{workers} workers");
        assert!(chk.path().join("commits").join("1").exists());
        assert!(!chk.path().join("commits").join("2").exists());
    }
}

/// The batch the killed process was in.
const VICTIM: i64 = 2;

/// A process killed (SIGKILL) after its sink took a batch, or after that
/// batch's commit, with the next batch already read ahead (nothing of it
/// logged): restarted, it runs on from its checkpoint and emits what an
/// uninterrupted run emits from there.
#[test]
fn a_kill_after_reading_ahead_restarts_to_the_uninterrupted_output() {
    const NAME: &str =
        "read_ahead::a_kill_after_reading_ahead_restarts_to_the_uninterrupted_output";
    let inputs = fixed_inputs();
    let shape = Shape::Windows(OutputMode::Update);
    if let Ok(dir) = std::env::var("WEIR_CRASH_TEST_DIR") {
        // The child: runs until its failpoint kills it.
        let chk = std::path::Path::new(&dir).join("chk");
        run_on(shape, &inputs, true, 2, &chk, None, DUE);
        return;
    }
    let (want, log) = run(shape, &inputs, true, 2);
    // The child, with the same settings, reads each next batch ahead.
    assert!(
        read_before_sink(&log, inputs.len()).iter().all(|b| *b),
        "{log:?}"
    );
    for (point, first_rerun) in [("after_sink", VICTIM), ("after_commit_log", VICTIM + 1)] {
        let dir = tempfile::tempdir().unwrap();
        crate::common::run_child_killed_at_failpoint(
            NAME,
            &[
                ("WEIR_CRASH_TEST_DIR", dir.path().display().to_string()),
                ("WEIR_FAILPOINT", format!("{point}:{VICTIM}")),
            ],
        );
        let chk = dir.path().join("chk");
        assert!(chk.join("offsets").join(VICTIM.to_string()).exists());
        // The next batch was read ahead, never logged.
        assert!(!chk.join("offsets").join((VICTIM + 1).to_string()).exists());
        let (got, _, error) = run_on(shape, &inputs, true, 2, &chk, None, DUE);
        assert_eq!(error, None);
        let tail: Vec<Batch> = want
            .iter()
            .filter(|b| b.0 >= first_rerun)
            .cloned()
            .collect();
        assert!(!tail.is_empty());
        assert_eq!(got, tail, "killed {point} of batch {VICTIM}");
    }
}

/// A batch takes what was read ahead only if its source still ends there
/// when it starts: fed while the batch before ran, the source ends further,
/// the batch reads in turn, and the batches end where reading in turn ends
/// them (the same rows, offsets and progress).
#[test]
fn a_source_fed_meanwhile_is_read_again_to_where_it_ends_now() {
    use std::sync::atomic::{AtomicI64, Ordering};
    let inputs = fixed_inputs();
    let run = |read_ahead: bool| {
        let mut conf = SessionConfig {
            fsync_checkpoint: false,
            polling_delay: Duration::from_secs(3600),
            ..SessionConfig::default()
        };
        conf.set("spark.sql.shuffle.partitions", "2").unwrap();
        conf.set("weir.workerThreads", "2").unwrap();
        conf.set("weir.readAhead", &read_ahead.to_string()).unwrap();
        let s = Session::with_config(conf);
        let log: Log = Arc::default();
        // Three inputs there, two a batch, one more fed by each sink.
        let fed = Arc::new(AtomicI64::new(3));
        let mut source = Steps::new(&inputs, log.clone());
        source.per_trigger = 2;
        source.fed = Some(fed.clone());
        let (d, mode) = build(&s, source, Shape::Windows(OutputMode::Update));
        let rows: Emitted = Arc::default();
        let (sink_rows, sink_log) = (rows.clone(), log.clone());
        let q = d
            .write_stream()
            .output_mode(mode)
            .foreach_batch(move |id, batches| {
                if read_ahead && id == 0 {
                    // Batch 0's start and batch 1's read ahead have asked
                    // for the latest offset before the source is fed.
                    let asked =
                        |l: &Vec<String>| l.iter().filter(|e| e.starts_with("latest")).count();
                    let deadline = Instant::now() + DUE;
                    let mut l = sink_log.log.lock().unwrap();
                    while asked(&l) < 2 && Instant::now() < deadline {
                        l = sink_log
                            .added
                            .wait_timeout(l, Duration::from_millis(50))
                            .unwrap()
                            .0;
                    }
                }
                fed.fetch_add(1, Ordering::SeqCst);
                sink_rows.lock().unwrap().push((id, rows_json(batches)));
                Ok(())
            })
            .checkpoint_location(tempfile::tempdir().unwrap().keep().to_str().unwrap())
            .start()
            .unwrap();
        q.process_all_available().unwrap();
        q.stop().unwrap();
        assert!(q.exception().is_none(), "{:?}", q.exception());
        let ends: Vec<(i64, Value)> = q
            .recent_progress()
            .iter()
            .map(|p| {
                (
                    p.batch_id,
                    json!([p.num_input_rows, p.sources[0].end_offset]),
                )
            })
            .collect();
        let out = rows.lock().unwrap().clone();
        let log = log.log.lock().unwrap().clone();
        (out, ends, log)
    };
    let (want, want_ends, _) = run(false);
    let (got, got_ends, log) = run(true);
    assert_eq!(got, want);
    assert_eq!(got_ends, want_ends);
    // Batch 1 was read ahead to offset 2 while batch 0 ran, and read again
    // to offset 3, where the source ended when it started.
    assert!(log.contains(&"read 2".to_string()), "{log:?}");
    assert!(
        want_ends.iter().any(|(id, e)| *id == 1 && e[1] == json!(3)),
        "{want_ends:?}"
    );
}
