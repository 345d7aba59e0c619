//! A testing kit for streaming queries (Spark's `testStream`), behind the
//! `testing` feature.
//!
//! A [`StreamTest`] starts a query built by the test (a closure from the
//! [`Session`] to a [`StreamWriter`], or a `stream_query!` query's
//! `writer_from` and its [`MemoryStream`]s), captures every micro-batch the
//! sink would receive, and runs a list of [`Action`]s against it:
//! [`add_data`], [`check_answer`], [`check_new_answer`],
//! [`check_last_batch`], [`stop_stream`], [`start_stream`] (a restart on the
//! same checkpoint), [`assert_on_query`], [`expect_failure`] and
//! [`advance_manual_clock`]. A failed
//! check panics with the expected and actual rows, the latest batch id and
//! the action list with the failing one marked.
//!
//! Rows are compared as text, one line per row (`{key: a, n: 2}`),
//! order-insensitive unless the query sorts. Expected rows are typed
//! ([`crate::Row`], e.g. a `stream_query!` result row) or JSON objects
//! (timestamps as RFC 3339 strings, a window as `{"start": .., "end": ..}`).
//!
//! [`run`] returns every micro-batch's output as stable text for snapshot
//! tests (`insta::assert_snapshot!(weir::testing::run(test, actions))`).
//!
//! Unlike Spark's, [`add_data`] on a running query waits until the rows are
//! processed, so each `add_data` is one micro-batch (plus the no-data batches
//! it makes due) and batch ids are the same on every run; [`stop_stream`]
//! also processes what was added first.
//!
//! A test with an [`advance_manual_clock`] action runs its session on a
//! [`ManualClock`] starting at 0 (Unix epoch), unless the test's config
//! already has one: processing-time triggers, batch timestamps and the
//! rate source then follow that clock. With a processing-time trigger the
//! query runs a batch only when the clock is advanced to its next tick, so
//! [`add_data`] and the checks do not wait for a batch; each
//! `advance_manual_clock` waits for the batch it triggers.
//!
//! ```
//! use weir_engine::functions::count_star;
//! use weir_engine::source::MemoryStream;
//! use weir_engine::testing::*;
//! use weir_engine::plan::{DataType, Field, OutputMode};
//! use serde_json::json;
//!
//! let events = MemoryStream::new(&[Field::new("key", DataType::String)]);
//! let input = events.clone();
//! let test = StreamTest::new(move |session| {
//!     Ok(session
//!         .read_stream(input.clone())
//!         .group_by(vec![weir_engine::functions::col("key")])
//!         .agg(vec![count_star("n")])
//!         .write_stream()
//!         .output_mode(OutputMode::Update))
//! });
//! test.run(vec![
//!     add_data(&events, json!([{"key": "a"}, {"key": "a"}])),
//!     check_new_answer(json!([{"key": "a", "n": 2}])),
//!     stop_stream(),
//!     start_stream(),
//!     add_data(&events, json!([{"key": "a"}])),
//!     check_new_answer(json!([{"key": "a", "n": 3}])),
//! ]);
//! ```

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType as ArrowType, SchemaRef, TimestampMicrosecondType};
use arrow::record_batch::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use weir_plan::OutputMode;

use crate::clock::{Clock, ManualClock};
use crate::error::{Result, WeirError};
use crate::progress::{QueryListener, StreamingQueryProgress};
use crate::row::Row;
use crate::sink::{Sink, SinkContext};
use crate::source::{BoxSource, MemoryStream};
use crate::{Session, SessionConfig, StreamWriter, StreamingQuery, Timestamp, Trigger};

/// Rows handed to [`add_data`] or expected by a check: typed rows, an Arrow
/// batch, or JSON objects.
#[derive(Clone)]
pub struct Rows(RowsInner);

#[derive(Clone)]
enum RowsInner {
    Batch(RecordBatch),
    Json(Vec<serde_json::Value>),
    Invalid(String),
}

impl Rows {
    /// No rows.
    pub fn none() -> Rows {
        Rows(RowsInner::Json(Vec::new()))
    }

    /// Typed rows.
    pub fn of<R: Row>(rows: &[R]) -> Rows {
        match R::to_batch(rows) {
            Ok(b) => Rows(RowsInner::Batch(b)),
            Err(e) => Rows(RowsInner::Invalid(e.to_string())),
        }
    }

    /// The rows of an Arrow batch.
    pub fn batch(batch: RecordBatch) -> Rows {
        Rows(RowsInner::Batch(batch))
    }

    /// JSON objects, one per row.
    pub fn json(rows: Vec<serde_json::Value>) -> Rows {
        Rows(RowsInner::Json(rows))
    }

    fn count(&self) -> usize {
        match &self.0 {
            RowsInner::Batch(b) => b.num_rows(),
            RowsInner::Json(v) => v.len(),
            RowsInner::Invalid(_) => 0,
        }
    }

    /// The rows as one line each, read with `schema` when they are JSON.
    fn lines(&self, schema: Option<&SchemaRef>) -> std::result::Result<Vec<String>, String> {
        match &self.0 {
            RowsInner::Batch(b) => Ok(row_lines(std::slice::from_ref(b))),
            RowsInner::Invalid(e) => Err(format!("the expected rows are invalid: {e}")),
            RowsInner::Json(v) if v.is_empty() => Ok(Vec::new()),
            RowsInner::Json(v) => {
                let schema = schema.ok_or(
                    "the query has not started, so the expected JSON rows have no schema to be read with",
                )?;
                let batch = json_batch(schema, v).map_err(|e| {
                    format!("the expected JSON rows do not fit the result's columns: {e}")
                })?;
                Ok(row_lines(&[batch]))
            }
        }
    }
}

impl<R: Row> From<&[R]> for Rows {
    fn from(rows: &[R]) -> Rows {
        Rows::of(rows)
    }
}

impl<R: Row, const N: usize> From<&[R; N]> for Rows {
    fn from(rows: &[R; N]) -> Rows {
        Rows::of(rows)
    }
}

impl<R: Row> From<Vec<R>> for Rows {
    fn from(rows: Vec<R>) -> Rows {
        Rows::of(&rows)
    }
}

impl From<RecordBatch> for Rows {
    fn from(batch: RecordBatch) -> Rows {
        Rows::batch(batch)
    }
}

impl From<serde_json::Value> for Rows {
    /// A JSON array of objects (one per row), or one object.
    fn from(v: serde_json::Value) -> Rows {
        match v {
            serde_json::Value::Array(rows) => Rows::json(rows),
            serde_json::Value::Object(_) => Rows::json(vec![v]),
            other => Rows(RowsInner::Invalid(format!(
                "expected a JSON array of objects, got {other}"
            ))),
        }
    }
}

fn json_batch(schema: &SchemaRef, rows: &[serde_json::Value]) -> Result<RecordBatch> {
    let mut dec = arrow::json::ReaderBuilder::new(schema.clone())
        .with_strict_mode(true)
        .build_decoder()?;
    dec.serialize(rows)?;
    Ok(dec
        .flush()?
        .unwrap_or_else(|| RecordBatch::new_empty(schema.clone())))
}

type QueryCheck = Box<dyn Fn(&StreamingQuery) -> bool>;

/// One step of a [`StreamTest`] (Spark's `StreamAction`). Build them with
/// [`add_data`], [`check_answer`], [`check_new_answer`],
/// [`check_last_batch`], [`stop_stream`], [`start_stream`],
/// [`assert_on_query`], [`expect_failure`] and [`advance_manual_clock`].
pub struct Action(ActionKind);

enum ActionKind {
    AddData(MemoryStream, Rows),
    CheckAnswer(Rows),
    CheckNewAnswer(Rows),
    CheckLastBatch(Rows),
    StopStream,
    StartStream,
    AssertOnQuery(String, QueryCheck),
    ExpectFailure(String),
    AdvanceManualClock(Duration),
}

impl Action {
    fn describe(&self) -> String {
        match &self.0 {
            ActionKind::AddData(_, r) => format!("AddData({} rows)", r.count()),
            ActionKind::CheckAnswer(r) => format!("CheckAnswer({} rows)", r.count()),
            ActionKind::CheckNewAnswer(r) => format!("CheckNewAnswer({} rows)", r.count()),
            ActionKind::CheckLastBatch(r) => format!("CheckLastBatch({} rows)", r.count()),
            ActionKind::StopStream => "StopStream".into(),
            ActionKind::StartStream => "StartStream".into(),
            ActionKind::AssertOnQuery(m, _) => format!("AssertOnQuery({m})"),
            ActionKind::ExpectFailure(m) => format!("ExpectFailure({m:?})"),
            ActionKind::AdvanceManualClock(d) => format!("AdvanceManualClock({d:?})"),
        }
    }
}

/// Adds `rows` to `stream` as one batch (Spark's `AddData`); on a running
/// query, waits until they are processed.
pub fn add_data(stream: &MemoryStream, rows: impl Into<Rows>) -> Action {
    Action(ActionKind::AddData(stream.clone(), rows.into()))
}

/// Processes what was added, then checks the whole result so far (Spark's
/// `CheckAnswer`): in complete mode the latest result table, otherwise
/// every row emitted since the test began.
pub fn check_answer(rows: impl Into<Rows>) -> Action {
    Action(ActionKind::CheckAnswer(rows.into()))
}

/// Processes what was added, then checks the rows emitted since the last
/// check (Spark's `CheckNewAnswer`); in complete mode, the latest result
/// table if a batch ran since, else no rows.
pub fn check_new_answer(rows: impl Into<Rows>) -> Action {
    Action(ActionKind::CheckNewAnswer(rows.into()))
}

/// Processes what was added, then checks the rows of the latest batch
/// (Spark's `CheckLastBatch`).
pub fn check_last_batch(rows: impl Into<Rows>) -> Action {
    Action(ActionKind::CheckLastBatch(rows.into()))
}

/// Processes what was added, then stops the query (Spark's `StopStream`).
pub fn stop_stream() -> Action {
    Action(ActionKind::StopStream)
}

/// Starts the query again on the same checkpoint: a restart (Spark's
/// `StartStream`). The query is started once before the first action
/// unless that action is `start_stream`.
pub fn start_stream() -> Action {
    Action(ActionKind::StartStream)
}

/// Processes what was added, then checks `condition` on the running query
/// (Spark's `AssertOnQuery`); `message` says what failed.
pub fn assert_on_query(
    message: &str,
    condition: impl Fn(&StreamingQuery) -> bool + 'static,
) -> Action {
    Action(ActionKind::AssertOnQuery(
        message.to_string(),
        Box::new(condition),
    ))
}

/// Expects the query to fail, at start or while processing what was
/// added, with an error whose text contains `message` (Spark's
/// `ExpectFailure`). The query is stopped afterwards; `start_stream`
/// restarts it.
pub fn expect_failure(message: &str) -> Action {
    Action(ActionKind::ExpectFailure(message.to_string()))
}

/// Advances the session's [`ManualClock`] by `d` (Spark's
/// `AdvanceManualClock`) and waits for the batch it triggers: with a
/// processing-time trigger, until the query waits on the clock again;
/// otherwise until what is available is processed. A test with this action
/// runs on a manual clock (see the module docs).
pub fn advance_manual_clock(d: Duration) -> Action {
    Action(ActionKind::AdvanceManualClock(d))
}

/// How long the kit waits in real time for a query to come back to wait
/// on the manual clock.
const CLOCK_WAIT: Duration = Duration::from_secs(60);

type BuildWriter = Box<dyn Fn(&Session) -> Result<StreamWriter>>;

/// A query under test (Spark's `testStream`): how to build it, and its
/// session settings and checkpoint.
pub struct StreamTest {
    build: BuildWriter,
    config: SessionConfig,
    checkpoint: Option<PathBuf>,
    show_watermark: bool,
    show_state: bool,
}

impl StreamTest {
    /// A test of the query `build` makes; called at every start, it reads
    /// from [`MemoryStream`]s the test also holds (clones share the rows).
    /// The kit replaces the writer's sink and checkpoint location.
    pub fn new(build: impl Fn(&Session) -> Result<StreamWriter> + 'static) -> StreamTest {
        // Two state partitions and workers keep tests quick; the
        // checkpoint need not survive a power cut.
        let config = SessionConfig {
            shuffle_partitions: Some(2),
            worker_threads: 2,
            fsync_checkpoint: false,
            stop_on_signal: false,
            ui_enabled: false,
            ..SessionConfig::default()
        };
        StreamTest {
            build: Box::new(build),
            config,
            checkpoint: None,
            show_watermark: false,
            show_state: false,
        }
    }

    /// A test of a query reading one stream, e.g. a `stream_query!` query's
    /// `writer_from`: `StreamTest::with_source(&events, Query::writer_from)`.
    pub fn with_source(
        stream: &MemoryStream,
        writer_from: impl Fn(&Session, BoxSource) -> Result<StreamWriter> + 'static,
    ) -> StreamTest {
        let stream = stream.clone();
        StreamTest::new(move |s| writer_from(s, Box::new(stream.clone())))
    }

    /// A test of a query joining two streams (a `stream_query!` join's
    /// `writer_from`).
    pub fn with_sources(
        left: &MemoryStream,
        right: &MemoryStream,
        writer_from: impl Fn(&Session, BoxSource, BoxSource) -> Result<StreamWriter> + 'static,
    ) -> StreamTest {
        let (left, right) = (left.clone(), right.clone());
        StreamTest::new(move |s| writer_from(s, Box::new(left.clone()), Box::new(right.clone())))
    }

    /// The session's settings (default: 2 shuffle partitions, no fsync, no
    /// signal handling). With [`advance_manual_clock`] among the actions,
    /// a clock that is not a [`ManualClock`] is replaced by one.
    pub fn config(mut self, config: SessionConfig) -> StreamTest {
        self.config = config;
        self
    }

    /// Keeps the checkpoint at `path` (default: a temporary directory
    /// removed when the test ends), e.g. to read its state afterwards.
    pub fn checkpoint_location(mut self, path: impl Into<PathBuf>) -> StreamTest {
        self.checkpoint = Some(path.into());
        self
    }

    /// [`run`] also shows each batch's watermark.
    pub fn show_watermark(mut self) -> StreamTest {
        self.show_watermark = true;
        self
    }

    /// [`run`] also shows each batch's state metrics (rows total, updated,
    /// removed, dropped by the watermark, per stateful operator).
    pub fn show_state(mut self) -> StreamTest {
        self.show_state = true;
        self
    }

    /// Runs the actions in order, panicking at the first that fails; then
    /// processes what is left and stops the query. Returns every batch the
    /// sink received.
    pub fn run(mut self, actions: Vec<Action>) -> Outcome {
        let advances = actions
            .iter()
            .any(|a| matches!(a.0, ActionKind::AdvanceManualClock(_)));
        if advances && self.config.clock.as_manual().is_none() {
            self.config.clock = Arc::new(ManualClock::new(0));
        }
        let mut runner = Runner::new(self);
        for i in 0..actions.len() {
            if let Err(message) = runner.step(&actions[i]) {
                panic!("{}", failure(&actions, i, runner.latest_batch(), &message));
            }
        }
        if let Err(message) = runner.finish() {
            panic!(
                "{}",
                failure(&actions, actions.len(), runner.latest_batch(), &message)
            );
        }
        runner.outcome()
    }
}

/// Runs `test` like [`StreamTest::run`] and renders every micro-batch's
/// output as stable text for a snapshot (see [`Outcome::render`]).
pub fn run(test: StreamTest, actions: Vec<Action>) -> String {
    test.run(actions).render()
}

fn failure(actions: &[Action], at: usize, batch: Option<i64>, message: &str) -> String {
    let mut s = String::new();
    let what = actions
        .get(at)
        .map(|a| format!("action #{at} {}", a.describe()))
        .unwrap_or_else(|| "after the last action".into());
    let batch = batch.map_or("no batch yet".to_string(), |b| format!("latest batch {b}"));
    let _ = writeln!(s, "stream test failed at {what} ({batch}):");
    for line in message.lines() {
        let _ = writeln!(s, "  {line}");
    }
    let _ = writeln!(s, "actions:");
    for (i, a) in actions.iter().enumerate() {
        let mark = if i == at { "=>" } else { "  " };
        let _ = writeln!(s, "{mark} #{i} {}", a.describe());
    }
    s
}

/// What the sink received, shared with the capture sink across restarts.
#[derive(Default)]
struct Captured {
    schema: Option<SchemaRef>,
    mode: OutputMode,
    batches: BTreeMap<i64, Vec<RecordBatch>>,
    progress: BTreeMap<i64, StreamingQueryProgress>,
}

/// The kit's sink: every batch, by id (a re-run batch replaces its rows).
struct CaptureSink(Arc<Mutex<Captured>>);

impl Sink for CaptureSink {
    fn description(&self) -> String {
        "MemorySink[weir::testing]".into()
    }
    fn kind(&self) -> weir_plan::SinkKind {
        weir_plan::SinkKind::Memory
    }
    fn open(&mut self, ctx: &SinkContext) -> Result<()> {
        let mut c = self.0.lock().unwrap();
        c.schema = Some(ctx.schema.clone());
        c.mode = ctx.output_mode;
        Ok(())
    }
    fn add_batch(&mut self, batch_id: i64, batches: &[RecordBatch]) -> Result<()> {
        let mut c = self.0.lock().unwrap();
        c.batches.insert(batch_id, batches.to_vec());
        Ok(())
    }
}

/// Keeps each batch's progress (the query's own list is per run).
struct ProgressLog(Arc<Mutex<Captured>>);

impl QueryListener for ProgressLog {
    fn on_query_progress(&self, p: &StreamingQueryProgress) {
        self.0
            .lock()
            .unwrap()
            .progress
            .insert(p.batch_id, p.clone());
    }
}

/// A temporary checkpoint directory, removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A marker in the run between batches.
#[derive(Clone, Copy)]
enum Event {
    Restarted,
    Failed,
}

struct Runner {
    test: StreamTest,
    session: Session,
    checkpoint: PathBuf,
    _temp: Option<TempDir>,
    captured: Arc<Mutex<Captured>>,
    query: Option<StreamingQuery>,
    started_once: bool,
    start_error: Option<WeirError>,
    sorted: bool,
    /// A processing-time trigger on a manual clock: batches run only when
    /// the clock is advanced, so nothing waits for them but the advance.
    clock_driven: bool,
    last_checked: Option<i64>,
    events: Vec<(Option<i64>, Event)>,
}

impl Runner {
    fn new(test: StreamTest) -> Runner {
        let session = Session::with_config(test.config.clone());
        let captured = Arc::new(Mutex::new(Captured::default()));
        session.add_listener(Arc::new(ProgressLog(captured.clone())));
        let (checkpoint, temp) = match &test.checkpoint {
            Some(p) => (p.clone(), None),
            None => {
                let p = std::env::temp_dir().join(format!("weir-test-{}", uuid::Uuid::new_v4()));
                (p.clone(), Some(TempDir(p)))
            }
        };
        Runner {
            test,
            session,
            checkpoint,
            _temp: temp,
            captured,
            query: None,
            started_once: false,
            start_error: None,
            sorted: false,
            clock_driven: false,
            last_checked: None,
            events: Vec::new(),
        }
    }

    fn latest_batch(&self) -> Option<i64> {
        let c = self.captured.lock().unwrap();
        let sink = c.batches.keys().next_back().copied();
        let progress = c.progress.keys().next_back().copied();
        sink.max(progress)
    }

    fn start(&mut self) -> std::result::Result<(), String> {
        if self.query.is_some() {
            return Err("start_stream: the query is already running (stop_stream first)".into());
        }
        if self.started_once {
            self.events.push((self.latest_batch(), Event::Restarted));
        }
        self.started_once = true;
        let started = (self.test.build)(&self.session).and_then(|w| {
            self.sorted = w
                .plan()
                .nodes
                .iter()
                .flat_map(|n| &n.ops)
                .any(|op| matches!(op, weir_plan::Op::Sort { .. }));
            self.clock_driven = matches!(w.trigger, Trigger::ProcessingTime(_))
                && self.session.conf().clock.as_manual().is_some();
            let checkpoint = self.checkpoint.to_string_lossy().into_owned();
            w.sink(CaptureSink(self.captured.clone()))
                .checkpoint_location(&checkpoint)
                .start()
        });
        match started {
            Ok(q) => self.query = Some(q),
            Err(e) => self.start_error = Some(e),
        }
        // The trigger due at start runs first, so rows added next wait for
        // an advance of the clock.
        let clock = self.session.conf().clock.clone();
        match clock.as_manual() {
            Some(manual) if self.clock_driven => self.await_clock_waiter(manual, manual.now_ms()),
            _ => Ok(()),
        }
    }

    /// Waits until the query waits on `clock` at `at_ms` or later (or has
    /// ended: a failure is left for the next action).
    fn await_clock_waiter(
        &self,
        clock: &ManualClock,
        at_ms: i64,
    ) -> std::result::Result<(), String> {
        let Some(q) = &self.query else {
            return Ok(());
        };
        let deadline = Instant::now() + CLOCK_WAIT;
        while !clock.is_waiting_at(at_ms) && q.is_active() {
            if Instant::now() >= deadline {
                return Err(format!(
                    "the query did not come back to wait on the manual clock (at {at_ms} ms) within {CLOCK_WAIT:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    fn advance(&mut self, d: Duration) -> std::result::Result<(), String> {
        let clock = self.session.conf().clock.clone();
        let manual = clock.as_manual().ok_or(
            "advance_manual_clock: the session's clock is not a ManualClock (the kit makes one when the actions advance it)",
        )?;
        self.running()?;
        manual.advance(d);
        if self.clock_driven {
            self.await_clock_waiter(manual, manual.now_ms())
        } else {
            // A failure is left for the next action (expect_failure).
            if let Some(q) = &self.query {
                let _ = q.process_all_available();
            }
            Ok(())
        }
    }

    /// The running query, or why there is none.
    fn running(&mut self) -> std::result::Result<&StreamingQuery, String> {
        if let Some(e) = self.start_error.take() {
            return Err(format!("the query failed to start: {e}"));
        }
        self.query
            .as_ref()
            .ok_or_else(|| "the query is not running (add start_stream())".to_string())
    }

    /// Processes everything added so far when the query runs.
    fn process(&mut self) -> std::result::Result<(), String> {
        if self.query.is_none() && self.start_error.is_none() {
            return Ok(());
        }
        let clock_driven = self.clock_driven;
        let q = self.running()?;
        if clock_driven {
            // Batches ran when the clock was advanced; none runs before the next advance.
            return match q.exception() {
                Some(e) => Err(format!("the query failed: {e}")),
                None => Ok(()),
            };
        }
        q.process_all_available()
            .map_err(|e| format!("the query failed: {e}"))
    }

    fn step(&mut self, action: &Action) -> std::result::Result<(), String> {
        if !self.started_once && !matches!(action.0, ActionKind::StartStream) {
            self.start()?;
        }
        match &action.0 {
            ActionKind::AddData(stream, rows) => {
                let added = match &rows.0 {
                    RowsInner::Batch(b) => stream.add_batch(b.clone()),
                    RowsInner::Json(v) => stream.add_json(v),
                    RowsInner::Invalid(e) => return Err(format!("the rows are invalid: {e}")),
                };
                added.map_err(|e| format!("the rows do not fit the stream: {e}"))?;
                // A failure is left for the next action (expect_failure).
                if let Some(q) = self.query.as_ref().filter(|_| !self.clock_driven) {
                    let _ = q.process_all_available();
                }
                Ok(())
            }
            ActionKind::CheckAnswer(rows) => self.check(Check::All, rows),
            ActionKind::CheckNewAnswer(rows) => self.check(Check::New, rows),
            ActionKind::CheckLastBatch(rows) => self.check(Check::Last, rows),
            ActionKind::StopStream => {
                self.process()?;
                self.start_error = None;
                if let Some(q) = self.query.take() {
                    q.stop().map_err(|e| format!("stopping the query: {e}"))?;
                }
                Ok(())
            }
            ActionKind::StartStream => self.start(),
            ActionKind::AssertOnQuery(message, condition) => {
                self.process()?;
                let q = self.running()?;
                if condition(q) {
                    Ok(())
                } else {
                    Err(format!("assertion on the query failed: {message}"))
                }
            }
            ActionKind::ExpectFailure(expected) => self.expect_failure(expected),
            ActionKind::AdvanceManualClock(d) => self.advance(*d),
        }
    }

    fn expect_failure(&mut self, expected: &str) -> std::result::Result<(), String> {
        let error = match (self.start_error.take(), &self.query) {
            (Some(e), _) => e,
            (None, None) => return Err("expected a failure, but the query is not running".into()),
            (None, Some(q)) if self.clock_driven => match q.exception() {
                Some(e) => WeirError::QueryFailed(e),
                None => {
                    return Err(format!(
                        "expected a failure containing {expected:?}, but the query runs (waiting for the manual clock)"
                    ))
                }
            },
            (None, Some(q)) => match q.process_all_available() {
                Ok(()) => {
                    return Err(format!(
                        "expected a failure containing {expected:?}, but the query processed everything"
                    ))
                }
                Err(e) => e,
            },
        };
        if let Some(q) = self.query.take() {
            let _ = q.stop();
        }
        self.events.push((self.latest_batch(), Event::Failed));
        let text = error.to_string();
        if text.contains(expected) {
            Ok(())
        } else {
            Err(format!(
                "the query failed, but its error does not contain {expected:?}:\n{text}"
            ))
        }
    }

    fn check(&mut self, which: Check, expected: &Rows) -> std::result::Result<(), String> {
        self.process()?;
        let c = self.captured.lock().unwrap();
        let latest = c.batches.keys().next_back().copied();
        let complete = c.mode == OutputMode::Complete;
        let actual: Vec<RecordBatch> = match which {
            Check::All if complete => c.batches.values().next_back().cloned().unwrap_or_default(),
            Check::All => c.batches.values().flatten().cloned().collect(),
            Check::New if complete => match latest {
                Some(l) if Some(l) > self.last_checked => c.batches[&l].clone(),
                _ => Vec::new(),
            },
            Check::New => c
                .batches
                .iter()
                .filter(|(id, _)| Some(**id) > self.last_checked)
                .flat_map(|(_, b)| b.iter().cloned())
                .collect(),
            Check::Last => c.batches.values().next_back().cloned().unwrap_or_default(),
        };
        let mut actual = row_lines(&actual);
        let mut expected = expected.lines(c.schema.as_ref())?;
        drop(c);
        self.last_checked = latest;
        if !self.sorted {
            actual.sort();
            expected.sort();
        }
        if actual == expected {
            return Ok(());
        }
        Err(diff(&expected, &actual, self.sorted))
    }

    /// Processes what is left and stops the query.
    fn finish(&mut self) -> std::result::Result<(), String> {
        if let Some(e) = self.start_error.take() {
            return Err(format!("the query failed to start: {e}"));
        }
        if let Some(q) = self.query.take() {
            let processed = match q.exception() {
                Some(e) if self.clock_driven => Err(WeirError::QueryFailed(e)),
                _ if self.clock_driven => Ok(()),
                _ => q.process_all_available(),
            };
            let _ = q.stop();
            processed.map_err(|e| format!("the query failed: {e}"))?;
        }
        Ok(())
    }

    fn outcome(&self) -> Outcome {
        let c = self.captured.lock().unwrap();
        let ids: std::collections::BTreeSet<i64> =
            c.batches.keys().chain(c.progress.keys()).copied().collect();
        let batches = ids
            .into_iter()
            .map(|id| {
                let p = c.progress.get(&id);
                BatchOutput {
                    batch_id: id,
                    num_input_rows: p.map_or(0, |p| p.num_input_rows),
                    watermark: p.and_then(|p| p.event_time.get("watermark").cloned()),
                    state: p
                        .map(|p| {
                            p.state_operators
                                .iter()
                                .map(|s| StateMetrics {
                                    operator: s.operator_name.clone(),
                                    rows_total: s.num_rows_total,
                                    rows_updated: s.num_rows_updated,
                                    rows_removed: s.num_rows_removed,
                                    rows_dropped_by_watermark: s.num_rows_dropped_by_watermark,
                                })
                                .collect()
                        })
                        .unwrap_or_default(),
                    rows: c.batches.get(&id).cloned().unwrap_or_default(),
                }
            })
            .collect();
        Outcome {
            batches,
            sorted: self.sorted,
            restarts: self
                .events
                .iter()
                .map(|(after, e)| (*after, matches!(e, Event::Failed)))
                .collect(),
            show_watermark: self.test.show_watermark,
            show_state: self.test.show_state,
        }
    }
}

#[derive(Clone, Copy)]
enum Check {
    All,
    New,
    Last,
}

fn diff(expected: &[String], actual: &[String], sorted: bool) -> String {
    let mut s = String::new();
    let order = if sorted {
        "compared in order: the query sorts"
    } else {
        "compared in any order"
    };
    let _ = writeln!(
        s,
        "rows differ ({order}): expected {} rows, got {}",
        expected.len(),
        actual.len()
    );
    let mut missing = expected.to_vec();
    let mut unexpected = Vec::new();
    for a in actual {
        match missing.iter().position(|e| e == a) {
            Some(i) => {
                missing.remove(i);
            }
            None => unexpected.push(a.clone()),
        }
    }
    for (title, rows) in [
        ("expected, not emitted:", &missing),
        ("emitted, not expected:", &unexpected),
    ] {
        if !rows.is_empty() {
            let _ = writeln!(s, "{title}");
            for r in rows {
                let _ = writeln!(s, "  {r}");
            }
        }
    }
    if missing.is_empty() && unexpected.is_empty() {
        let _ = writeln!(s, "same rows, different order");
    }
    for (title, rows) in [("expected:", expected), ("actual:", actual)] {
        let _ = writeln!(s, "{title}");
        if rows.is_empty() {
            let _ = writeln!(s, "  (no rows)");
        }
        for r in rows {
            let _ = writeln!(s, "  {r}");
        }
    }
    s
}

/// One row per line: `{column: value, ...}`; timestamps as
/// `2024-01-01 12:00:00` (UTC), windows as `[start, end)`.
fn row_lines(batches: &[RecordBatch]) -> Vec<String> {
    let mut lines = Vec::new();
    let opts = FormatOptions::default().with_null("null");
    for b in batches {
        let schema = b.schema();
        let cols: Vec<Box<dyn Fn(usize) -> String + '_>> = b
            .columns()
            .iter()
            .map(|c| value_fn(c.as_ref(), &opts))
            .collect();
        for i in 0..b.num_rows() {
            let cells: Vec<String> = schema
                .fields()
                .iter()
                .zip(&cols)
                .map(|(f, v)| format!("{}: {}", f.name(), v(i)))
                .collect();
            lines.push(format!("{{{}}}", cells.join(", ")));
        }
    }
    lines
}

fn value_fn<'a>(col: &'a dyn Array, opts: &FormatOptions<'a>) -> Box<dyn Fn(usize) -> String + 'a> {
    match col.data_type() {
        ArrowType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, _) => {
            let a = col.as_primitive::<TimestampMicrosecondType>();
            Box::new(move |i| {
                if a.is_null(i) {
                    "null".into()
                } else {
                    Timestamp(a.value(i)).to_string()
                }
            })
        }
        ArrowType::Struct(_)
            if crate::row::plan_type(col.data_type()) == Some(weir_plan::DataType::Window) =>
        {
            let s = col.as_struct();
            let (start, end) = (
                value_fn(s.column(0).as_ref(), opts),
                value_fn(s.column(1).as_ref(), opts),
            );
            Box::new(move |i| {
                if s.is_null(i) {
                    "null".into()
                } else {
                    format!("[{}, {})", start(i), end(i))
                }
            })
        }
        _ => match ArrayFormatter::try_new(col, opts) {
            Ok(f) => Box::new(move |i| f.value(i).to_string()),
            Err(e) => Box::new(move |_| format!("<{e}>")),
        },
    }
}

/// One stateful operator's metrics in a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateMetrics {
    /// The operator (Spark's name, e.g. `stateStoreSave`).
    pub operator: String,
    /// `numRowsTotal`.
    pub rows_total: i64,
    /// `numRowsUpdated`.
    pub rows_updated: i64,
    /// `numRowsRemoved`.
    pub rows_removed: i64,
    /// `numRowsDroppedByWatermark`.
    pub rows_dropped_by_watermark: i64,
}

/// One micro-batch as the test saw it.
#[derive(Debug, Clone)]
pub struct BatchOutput {
    /// The batch id.
    pub batch_id: i64,
    /// Rows read from the sources.
    pub num_input_rows: i64,
    /// The watermark in effect (RFC 3339), when the query has one.
    pub watermark: Option<String>,
    /// Each stateful operator's metrics.
    pub state: Vec<StateMetrics>,
    /// The rows the sink received.
    pub rows: Vec<RecordBatch>,
}

impl BatchOutput {
    /// The rows, one line each (`{column: value, ...}`).
    pub fn lines(&self) -> Vec<String> {
        row_lines(&self.rows)
    }
}

/// Every micro-batch of a [`StreamTest`] run.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The batches, by id.
    pub batches: Vec<BatchOutput>,
    sorted: bool,
    /// (latest batch before, true for a failure / false for a restart).
    restarts: Vec<(Option<i64>, bool)>,
    show_watermark: bool,
    show_state: bool,
}

impl Outcome {
    /// Stable text for a snapshot: each batch's id, input row count and
    /// output rows (sorted unless the query sorts), with the watermark and
    /// state metrics when the test asked for them, and a line where the
    /// query was restarted or failed. No timings, paths or run ids.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let mut markers = self.restarts.iter().peekable();
        for b in &self.batches {
            while let Some((_, failed)) = markers.next_if(|(after, _)| *after < Some(b.batch_id)) {
                let _ = writeln!(s, "{}", marker(*failed));
            }
            let plural = if b.num_input_rows == 1 { "" } else { "s" };
            let _ = write!(
                s,
                "batch {}: {} input row{plural}",
                b.batch_id, b.num_input_rows
            );
            if self.show_watermark {
                if let Some(w) = &b.watermark {
                    let w = Timestamp::parse(w).map_or(w.clone(), |t| t.to_string());
                    let _ = write!(s, ", watermark {w}");
                }
            }
            let _ = writeln!(s);
            let mut lines = b.lines();
            if !self.sorted {
                lines.sort();
            }
            if lines.is_empty() {
                let _ = writeln!(s, "  (no output)");
            }
            for l in lines {
                let _ = writeln!(s, "  {l}");
            }
            if self.show_state {
                for m in &b.state {
                    let _ = writeln!(
                        s,
                        "  state {}: total {}, updated {}, removed {}, dropped by watermark {}",
                        m.operator,
                        m.rows_total,
                        m.rows_updated,
                        m.rows_removed,
                        m.rows_dropped_by_watermark
                    );
                }
            }
        }
        for (_, failed) in markers {
            let _ = writeln!(s, "{}", marker(*failed));
        }
        s
    }
}

fn marker(failed: bool) -> &'static str {
    if failed {
        "-- query failed --"
    } else {
        "-- restarted --"
    }
}
