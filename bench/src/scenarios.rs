//! The scenarios: each builds a query through the real engine (checkpointing
//! on), runs a fixed number of micro-batches through a no-op sink, and
//! reports what it measured.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;
use serde_json::{json, Value};
use weir::arrow::array::{Int64Array, StringArray, StringBuilder, TimestampMicrosecondArray};
use weir::arrow::datatypes::SchemaRef;
use weir::arrow::record_batch::RecordBatch;
use weir::dataset::JoinOn;
use weir::functions::{col, count_star, sliding_window, window};
use weir::plan::{DataType, Field, JoinType, OutputMode};
use weir::sink::Sink;
use weir::source::{Offset, RateMicroBatchSource, Source};
use weir::{QueryListener, Session, SessionConfig, StreamingQueryProgress, WeirError};

/// The state store a scenario runs on.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum StateStore {
    /// The in-memory store (deltas and snapshots on disk).
    Memory,
    /// RocksDB (needs the `rocksdb` feature).
    Rocksdb,
}

/// An output mode of the page-views scenario.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Mode {
    /// Spark's update mode.
    Update,
    /// Spark's append mode.
    Append,
}

/// Command-line options common to the scenarios.
#[derive(clap::Args, Debug)]
pub struct Opts {
    /// Micro-batches to run (default: the scenario's).
    #[arg(long, default_value_t = 0)]
    batches: i64,
    /// Rows per micro-batch (default: the scenario's).
    #[arg(long, default_value_t = 0)]
    rows_per_batch: u64,
    /// The page-views scenario's output mode.
    #[arg(long, value_enum, default_value_t = Mode::Update)]
    mode: Mode,
    /// The state store.
    #[arg(long, value_enum, default_value_t = StateStore::Memory)]
    state: StateStore,
    /// fsync the checkpoint's files (`true` or `false`).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    fsync: bool,
    /// `spark.sql.shuffle.partitions` (default: the engine's, one per core).
    #[arg(long)]
    partitions: Option<usize>,
    /// `weir.workerThreads` (default: the engine's, one per core).
    #[arg(long)]
    workers: Option<usize>,
    /// `weir.readAhead`: the next batch read and routed as a task of its
    /// own while this one runs (`true` or `false`).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    read_ahead: bool,
    /// The lab's rate source's `numPartitions` (its batch generated as
    /// that many partitions in parallel, a partition of more than 64k rows
    /// as runs of them; default: the source's, the worker threads).
    #[arg(long)]
    source_partitions: Option<u32>,
    /// Where checkpoints go: a directory or an object store prefix such as
    /// `s3://bucket/bench` (S3 settings from the `AWS_*` environment); each
    /// run makes its own checkpoint under it. Default: a temp directory.
    #[arg(long)]
    checkpoint: Option<String>,
}

impl Opts {
    fn mode(&self) -> OutputMode {
        match self.mode {
            Mode::Update => OutputMode::Update,
            Mode::Append => OutputMode::Append,
        }
    }

    fn state(&self) -> &'static str {
        match self.state {
            StateStore::Memory => "memory",
            StateStore::Rocksdb => "rocksdb",
        }
    }

    fn or(&self, batches: i64, rows: u64) -> (i64, u64) {
        (
            if self.batches > 0 {
                self.batches
            } else {
                batches
            },
            if self.rows_per_batch > 0 {
                self.rows_per_batch
            } else {
                rows
            },
        )
    }
}

/// Discards rows, counting them.
struct NoopSink(Arc<Mutex<u64>>);

impl Sink for NoopSink {
    fn description(&self) -> String {
        "NoopSink".into()
    }
    fn add_batch(&mut self, _id: i64, batches: &[RecordBatch]) -> weir::Result<()> {
        *self.0.lock().unwrap() += batches.iter().map(|b| b.num_rows() as u64).sum::<u64>();
        Ok(())
    }
}

/// Records when each batch finished and its state size.
#[derive(Default)]
struct Timings {
    ends: Mutex<Vec<(Instant, i64, i64)>>,
}

impl QueryListener for Timings {
    fn on_query_progress(&self, p: &StreamingQueryProgress) {
        let state: i64 = p.state_operators.iter().map(|s| s.num_rows_total).sum();
        self.ends
            .lock()
            .unwrap()
            .push((Instant::now(), p.num_input_rows, state));
    }
}

/// The generators' offsets are batch numbers: one new batch per trigger,
/// up to `batches` in all.
fn next_batch(start: Option<&Offset>, batches: i64) -> Offset {
    let next = start.and_then(|o| o.as_i64()).map(|b| b + 1).unwrap_or(0);
    Offset::from(next.min(batches - 1))
}

/// The batch numbers in `(start, end]`.
fn batch_ids(start: Option<&Offset>, end: &Offset) -> std::ops::RangeInclusive<i64> {
    let from = start.and_then(|o| o.as_i64()).map(|b| b + 1).unwrap_or(0);
    from..=end.as_i64().unwrap_or(-1)
}

/// Page views: `rows_per_batch` clicks per batch over 1000 pages, event time
/// advancing 10 s per batch with up to 90 s of disorder, ~1% of clicks 5
/// minutes late. Deterministic per batch. The page column and the time
/// offsets are generated once, a little longer than a batch; batch `b` is a
/// zero-copy slice of them at one of 8 shifts, so the source costs one
/// vectorised add per batch and holds about one batch of data: the engine is
/// what is measured, in time and in memory.
pub struct PageViewSource {
    batches: i64,
    rows: usize,
    pages: StringArray,
    offsets: Int64Array,
}

/// How many distinct shifts of the generated data batches cycle through.
const VARIANTS: usize = 8;
/// The distance between two shifts (a prime, so the variants differ).
const SHIFT: usize = 997;

impl PageViewSource {
    fn new(rows: u64, batches: i64) -> PageViewSource {
        let n = rows as usize + VARIANTS * SHIFT;
        let mut x: u64 = 0x9E3779B97F4A7C15;
        // Written straight into the array's buffers: a `String` per row
        // would triple the process's peak memory before the first batch.
        let mut p = StringBuilder::with_capacity(n, n * "/page/999".len());
        let mut o = Vec::with_capacity(n);
        for _ in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            write!(p, "/page/{}", x % 1000).expect("writing to memory");
            p.append_value("");
            let jitter = ((x >> 20) % 90_000_000) as i64;
            let late = if (x >> 40) % 100 == 0 { 300_000_000 } else { 0 };
            o.push(-jitter - late);
        }
        PageViewSource {
            batches,
            rows: rows as usize,
            pages: p.finish(),
            offsets: Int64Array::from(o),
        }
    }

    fn fields() -> Vec<Field> {
        vec![
            Field::new("page", DataType::String),
            Field::new("event_ts", DataType::Timestamp),
        ]
    }

    /// The rows of batch `b` (also used by the baseline).
    pub fn batch(&self, b: i64) -> RecordBatch {
        let base = 1_700_000_000_000_000i64 + b * 10_000_000;
        let at = (b as usize % VARIANTS) * SHIFT;
        let offsets = self.offsets.slice(at, self.rows);
        let ts: TimestampMicrosecondArray =
            weir::arrow::compute::kernels::arity::unary(&offsets, |o: i64| base + o);
        RecordBatch::try_new(
            weir::row::arrow_schema(&Self::fields()),
            vec![
                Arc::new(self.pages.slice(at, self.rows)),
                Arc::new(ts.with_timezone("UTC")),
            ],
        )
        .expect("valid batch")
    }
}

impl Source for PageViewSource {
    fn schema(&self) -> SchemaRef {
        weir::row::arrow_schema(&Self::fields())
    }
    fn description(&self) -> String {
        "PageViewGenerator".into()
    }
    /// It keeps no log at all, so it runs with a checkpoint on S3 too.
    fn log_on_storage(&self) -> bool {
        true
    }
    /// Yes: its rows are computed from the offsets.
    fn reads_ahead(&self) -> bool {
        true
    }
    fn latest_offset(&mut self, start: Option<&Offset>) -> weir::Result<Option<Offset>> {
        Ok(Some(next_batch(start, self.batches)))
    }
    fn get_batch(
        &mut self,
        start: Option<&Offset>,
        end: &Offset,
    ) -> weir::Result<Vec<RecordBatch>> {
        Ok(batch_ids(start, end).map(|b| self.batch(b)).collect())
    }
}

/// Keys for the sliding scenario: 1000 integer keys, event time advancing 1 minute per batch.
struct KeyedSource {
    rows: u64,
    batches: i64,
}

impl Source for KeyedSource {
    fn schema(&self) -> SchemaRef {
        weir::row::arrow_schema(&[
            Field::new("key", DataType::Int64),
            Field::new("ts", DataType::Timestamp),
        ])
    }
    fn description(&self) -> String {
        "KeyedGenerator".into()
    }
    /// Yes: its rows are computed from the offsets.
    fn reads_ahead(&self) -> bool {
        true
    }
    fn latest_offset(&mut self, start: Option<&Offset>) -> weir::Result<Option<Offset>> {
        Ok(Some(next_batch(start, self.batches)))
    }
    fn get_batch(
        &mut self,
        start: Option<&Offset>,
        end: &Offset,
    ) -> weir::Result<Vec<RecordBatch>> {
        let mut out = Vec::new();
        for b in batch_ids(start, end) {
            let base = 1_700_000_000_000_000i64 + b * 60_000_000;
            let keys: Vec<i64> = (0..self.rows as i64)
                .map(|i| (i * 7919 + b) % 1000)
                .collect();
            let ts: Vec<i64> = (0..self.rows as i64)
                .map(|i| base + (i % 60) * 1_000_000)
                .collect();
            out.push(RecordBatch::try_new(
                self.schema(),
                vec![
                    Arc::new(Int64Array::from(keys)),
                    Arc::new(TimestampMicrosecondArray::from(ts).with_timezone("UTC")),
                ],
            )?);
        }
        Ok(out)
    }
}

/// One side of the ad join: impressions (`imp_id`, `imp_ts`), `rows` per
/// batch with ids counting up and event time advancing 10 s per batch; or
/// their clicks (`click_id`, `click_ts`): every second impression of the
/// same batch, clicked 30 s after it.
struct AdSource {
    clicks: bool,
    rows: u64,
    batches: i64,
}

impl AdSource {
    fn names(&self) -> (&'static str, &'static str) {
        if self.clicks {
            ("click_id", "click_ts")
        } else {
            ("imp_id", "imp_ts")
        }
    }
}

impl Source for AdSource {
    fn schema(&self) -> SchemaRef {
        let (id, ts) = self.names();
        weir::row::arrow_schema(&[
            Field::new(id, DataType::Int64),
            Field::new(ts, DataType::Timestamp),
        ])
    }
    fn description(&self) -> String {
        format!("AdGenerator[{}]", self.names().0)
    }
    /// Yes: its rows are computed from the offsets.
    fn reads_ahead(&self) -> bool {
        true
    }
    fn latest_offset(&mut self, start: Option<&Offset>) -> weir::Result<Option<Offset>> {
        Ok(Some(next_batch(start, self.batches)))
    }
    fn get_batch(
        &mut self,
        start: Option<&Offset>,
        end: &Offset,
    ) -> weir::Result<Vec<RecordBatch>> {
        let mut out = Vec::new();
        let (step, delay) = if self.clicks { (2, 30_000_000) } else { (1, 0) };
        for b in batch_ids(start, end) {
            let first = b * self.rows as i64;
            let base = 1_700_000_000_000_000i64 + b * 10_000_000;
            let ids: Vec<i64> = (0..self.rows as i64)
                .step_by(step)
                .map(|i| first + i)
                .collect();
            let ts: Vec<i64> = (0..self.rows as i64)
                .step_by(step)
                .map(|i| base + (i % 10_000) * 1_000 + delay)
                .collect();
            out.push(RecordBatch::try_new(
                self.schema(),
                vec![
                    Arc::new(Int64Array::from(ids)),
                    Arc::new(TimestampMicrosecondArray::from(ts).with_timezone("UTC")),
                ],
            )?);
        }
        Ok(out)
    }
}

/// The baseline's page views per `(window start, page)` over `data`, by
/// `workers` threads: thread `w` of `k` aggregates rows `w * n / k` up to
/// `(w + 1) * n / k` of each batch of `n` rows into its own map (pages
/// interned to its own ids), the threads wait for each other after every
/// batch, and their maps are merged at the end.
fn baseline_counts(data: &[RecordBatch], workers: usize) -> FxHashMap<(i64, &str), i64> {
    let barrier = std::sync::Barrier::new(workers);
    let partial = |w: usize| {
        let mut ids: FxHashMap<&str, u32> = FxHashMap::default();
        let mut counts: FxHashMap<(i64, u32), i64> = FxHashMap::default();
        for b in data {
            let pages = b
                .column(0)
                .as_any()
                .downcast_ref::<StringArray>()
                .expect("pages");
            let ts = b
                .column(1)
                .as_any()
                .downcast_ref::<TimestampMicrosecondArray>()
                .expect("ts");
            let n = b.num_rows();
            for i in w * n / workers..(w + 1) * n / workers {
                let t = ts.value(i);
                let w = t - t.rem_euclid(60_000_000);
                let next = ids.len() as u32;
                let id = *ids.entry(pages.value(i)).or_insert(next);
                *counts.entry((w, id)).or_insert(0) += 1;
            }
            barrier.wait();
        }
        let mut names = vec![""; ids.len()];
        for (page, id) in ids {
            names[id as usize] = page;
        }
        (names, counts)
    };
    let parts: Vec<_> = std::thread::scope(|s| {
        let others: Vec<_> = (1..workers).map(|w| s.spawn(move || partial(w))).collect();
        let mut parts = vec![partial(0)];
        parts.extend(
            others
                .into_iter()
                .map(|h| h.join().expect("a baseline thread panicked")),
        );
        parts
    });
    let mut all: FxHashMap<(i64, &str), i64> = FxHashMap::default();
    for (names, counts) in parts {
        for ((w, id), c) in counts {
            *all.entry((w, names[id as usize])).or_insert(0) += c;
        }
    }
    all
}

fn rusage() -> (f64, f64) {
    let u = rusage_raw();
    let cpu = u.ru_utime.tv_sec as f64
        + u.ru_utime.tv_usec as f64 / 1e6
        + u.ru_stime.tv_sec as f64
        + u.ru_stime.tv_usec as f64 / 1e6;
    (cpu, u.ru_maxrss as f64 / 1024.0)
}

/// How many times the process's threads have gone to sleep (voluntary
/// context switches): a wait for another thread's work, a lock, I/O or a
/// trigger; each such sleep ends with a wake-up.
fn sleeps() -> i64 {
    rusage_raw().ru_nvcsw
}

fn rusage_raw() -> libc::rusage {
    // SAFETY: getrusage fills the struct we pass; RUSAGE_SELF is valid.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    u
}

/// How long the other worker of a 2-thread pool takes to start a job handed
/// to it, in µs, when it has had nothing to do for `idle`: what a
/// fork-join pays when the worker it needs went to sleep (rayon puts an
/// idle worker to sleep after a few rounds of looking for work). A round
/// whose job the other worker has not started after 5 ms is run by the
/// handing thread and counted as 5000 µs.
fn wakeup_latencies(idle: Duration, rounds: usize) -> weir::Result<Vec<f64>> {
    const GIVE_UP: Duration = Duration::from_millis(5);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .map_err(|e| WeirError::Config(format!("cannot start a pool: {e}")))?;
    let mut lat = Vec::with_capacity(rounds);
    pool.install(|| {
        let me = rayon::current_thread_index();
        for _ in 0..rounds {
            // This worker stays busy; the other finds nothing to do.
            let quiet = Instant::now();
            while quiet.elapsed() < idle {
                std::hint::spin_loop();
            }
            let handed = Instant::now();
            let started: OnceLock<(Instant, Option<usize>)> = OnceLock::new();
            rayon::join(
                || {
                    // Waits (busy) for the other worker to take the job.
                    while started.get().is_none() && handed.elapsed() < GIVE_UP {
                        std::hint::spin_loop();
                    }
                },
                || {
                    let _ = started.set((Instant::now(), rayon::current_thread_index()));
                },
            );
            lat.push(match started.get() {
                Some((at, by)) if *by != me => at.duration_since(handed).as_secs_f64() * 1e6,
                _ => GIVE_UP.as_secs_f64() * 1e6,
            });
        }
    });
    Ok(lat)
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// Runs a built query to the end and reports.
fn measure(
    name: &str,
    session: &Session,
    writer: weir::StreamWriter,
    batches: i64,
    extra: Value,
    process_start: Instant,
) -> weir::Result<Value> {
    let timings = Arc::new(Timings::default());
    session.add_listener(timings.clone());
    let (cpu0, _) = rusage();
    let sleeps0 = sleeps();
    let requests0 = weir::storage::object_requests();
    let t0 = Instant::now();
    let q = writer.start()?;
    q.process_all_available()?;
    q.stop()?;
    let secs = t0.elapsed().as_secs_f64();
    let (cpu1, rss) = rusage();
    let slept = sleeps() - sleeps0;
    let requests = weir::storage::object_requests().since(&requests0);
    let ends = timings.ends.lock().unwrap().clone();
    let rows: i64 = ends.iter().map(|e| e.1).sum();
    let mut lat: Vec<f64> = Vec::new();
    let mut prev = t0;
    for (t, _, _) in &ends {
        lat.push(t.duration_since(prev).as_secs_f64() * 1000.0);
        prev = *t;
    }
    let first_batch_ms = ends
        .first()
        .map(|e| e.0.duration_since(process_start).as_secs_f64() * 1000.0);
    let state: Vec<i64> = ends.iter().map(|e| e.2).collect();
    let mut v = json!({
        "scenario": name,
        "rows": rows,
        "seconds": secs,
        "rows_per_sec": rows as f64 / secs,
        "rows_per_cpu_sec": rows as f64 / (cpu1 - cpu0).max(1e-9),
        "batches": ends.len(),
        "batches_requested": batches,
        "latency_ms_p50": percentile(&mut lat.clone(), 0.5),
        "latency_ms_p99": percentile(&mut lat, 0.99),
        "peak_rss_mb": rss,
        // Times a thread went to sleep (waiting for another thread, a lock
        // or I/O), per batch: an upper bound on the wake-ups it waited for.
        "sleeps_per_batch": slept as f64 / ends.len().max(1) as f64,
        "ms_from_process_start_to_first_batch": first_batch_ms,
        "state_rows_max": state.iter().max(),
        "state_rows_last": state.last(),
        "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
        "partitions": session.conf().shuffle_partitions.unwrap_or_else(weir::session::available_cores),
        "workers": session.conf().worker_threads,
        "read_ahead": session.conf().read_ahead,
        // Object store requests (checkpoints on s3://), per batch.
        "object_puts_per_batch": requests.puts as f64 / ends.len().max(1) as f64,
        "object_gets_per_batch": requests.gets as f64 / ends.len().max(1) as f64,
        "object_lists_per_batch": requests.lists as f64 / ends.len().max(1) as f64,
        "object_deletes_per_batch": requests.deletes as f64 / ends.len().max(1) as f64,
    });
    if let (Value::Object(m), Value::Object(e)) = (&mut v, extra) {
        m.extend(e);
    }
    Ok(v)
}

fn session(opts: &Opts) -> weir::Result<Session> {
    let mut conf = SessionConfig {
        fsync_checkpoint: opts.fsync,
        polling_delay: Duration::from_millis(1),
        ..SessionConfig::default()
    };
    conf.set("spark.sql.streaming.stateStore.providerClass", opts.state())?;
    if let Some(n) = opts.partitions {
        conf.set("spark.sql.shuffle.partitions", &n.to_string())?;
    }
    if let Some(n) = opts.workers {
        conf.set("weir.workerThreads", &n.to_string())?;
    }
    conf.set("weir.readAhead", &opts.read_ahead.to_string())?;
    Ok(Session::with_config(conf))
}

/// The lab's query (rate -> 10 s watermark -> 10 s window count, update
/// mode) over `source`, to a no-op sink.
fn rate_window_count(
    s: &Session,
    source: RateMicroBatchSource,
    rows: Arc<Mutex<u64>>,
    chk: &str,
) -> weir::StreamWriter {
    s.read_stream(source)
        .with_watermark("timestamp", "10 seconds")
        .group_by(vec![window("timestamp", "10 seconds")])
        .agg(vec![count_star("n")])
        .write_stream()
        .output_mode(OutputMode::Update)
        .sink(NoopSink(rows))
        .checkpoint_location(chk)
}

/// Runs one scenario.
pub fn run(name: &str, opts: &Opts, process_start: Instant) -> weir::Result<Value> {
    let chk = tempfile::tempdir().map_err(|e| WeirError::io("tempdir", e))?;
    let chk_path = match &opts.checkpoint {
        Some(base) => format!(
            "{}/{name}-{}-{}",
            base.trim_end_matches('/'),
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0)
        ),
        None => chk.path().to_str().unwrap_or("/tmp").to_string(),
    };
    let sink_rows = Arc::new(Mutex::new(0));
    let s = session(opts)?;
    match name {
        "lab" => {
            let (batches, rows) = opts.or(50, 200_000);
            let mut source = RateMicroBatchSource::new(rows).advance_millis_per_batch(1000);
            if let Some(n) = opts.source_partitions {
                source = source.num_partitions(n);
            }
            let source = source.max_batches(batches);
            let w = rate_window_count(&s, source, sink_rows, &chk_path);
            measure(
                "lab",
                &s,
                w,
                batches,
                json!({"rows_per_batch": rows}),
                process_start,
            )
        }
        "page_views" => {
            let (batches, rows) = opts.or(60, 100_000);
            let w = s
                .read_stream(PageViewSource::new(rows, batches))
                .with_watermark("event_ts", "2 minutes")
                .group_by(vec![window("event_ts", "1 minute"), col("page")])
                .agg(vec![count_star("views")])
                .write_stream()
                .output_mode(opts.mode())
                .sink(NoopSink(sink_rows))
                .checkpoint_location(&chk_path);
            measure(
                "page_views",
                &s,
                w,
                batches,
                json!({"rows_per_batch": rows, "mode": format!("{:?}", opts.mode()), "state": opts.state()}),
                process_start,
            )
        }
        "sliding" => {
            let (batches, rows) = opts.or(40, 100_000);
            let w = s
                .read_stream(KeyedSource { rows, batches })
                .with_watermark("ts", "10 minutes")
                .group_by(vec![
                    sliding_window("ts", "30 minutes", "5 minutes"),
                    col("key"),
                ])
                .agg(vec![count_star("n")])
                .write_stream()
                .output_mode(OutputMode::Update)
                .sink(NoopSink(sink_rows))
                .checkpoint_location(&chk_path);
            measure(
                "sliding",
                &s,
                w,
                batches,
                json!({"rows_per_batch": rows}),
                process_start,
            )
        }
        "join" => {
            // A stream-stream inner join: impressions with their clicks
            // within 2 minutes, 30-second watermarks on both sides.
            let (batches, rows) = opts.or(40, 50_000);
            let side = |clicks| AdSource {
                clicks,
                rows,
                batches,
            };
            let w = s
                .read_stream(side(false))
                .with_watermark("imp_ts", "30 seconds")
                .join(
                    s.read_stream(side(true))
                        .with_watermark("click_ts", "30 seconds"),
                    JoinOn::Expr("click_id = imp_id AND click_ts >= imp_ts AND click_ts <= imp_ts + INTERVAL '2 minutes'".into()),
                    JoinType::Inner,
                )
                .write_stream()
                .output_mode(OutputMode::Append)
                .sink(NoopSink(sink_rows.clone()))
                .checkpoint_location(&chk_path);
            let mut v = measure(
                "join",
                &s,
                w,
                batches,
                json!({"rows_per_batch_per_side": rows}),
                process_start,
            )?;
            v["output_rows"] = json!(*sink_rows.lock().unwrap());
            Ok(v)
        }
        "tiny" => {
            let (batches, rows) = opts.or(2000, 5);
            let w = rate_window_count(
                &s,
                RateMicroBatchSource::new(rows).max_batches(batches),
                sink_rows,
                &chk_path,
            );
            measure(
                "tiny",
                &s,
                w,
                batches,
                json!({"rows_per_batch": rows, "fsync": opts.fsync}),
                process_start,
            )
        }
        "startup" => {
            let w = rate_window_count(
                &s,
                RateMicroBatchSource::new(5).max_batches(1),
                sink_rows,
                &chk_path,
            );
            measure("startup", &s, w, 1, json!({}), process_start)
        }
        "wakeup" => {
            // The machine's price of a fork-join whose worker went to sleep:
            // a job handed to the other worker of a pool after it had
            // nothing to do for 2, 10, 20 and 200 µs.
            let mut v = json!({
                "scenario": "wakeup",
                "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
            });
            for us in [2u64, 10, 20, 200] {
                let mut lat = wakeup_latencies(Duration::from_micros(us), 2000)?;
                for p in [10, 50, 90] {
                    v[format!("after_idle_{us}us_start_us_p{p}")] =
                        json!(percentile(&mut lat, p as f64 / 100.0));
                }
                v[format!("after_idle_{us}us_not_started_in_5ms")] =
                    json!(lat.iter().filter(|&&x| x >= 5000.0).count());
            }
            Ok(v)
        }
        "baseline" => {
            // The ceiling: a careful hand-written aggregation of the same
            // page views, no engine, no checkpoint: page strings interned to
            // ids as they come, `(window start, page id)` keys, FxHash. With
            // `--workers N` (default 1) each of N threads owns a partial map
            // and aggregates its N-th of every batch, all N meeting at a
            // barrier after each batch (as a micro-batch's tasks do), and the
            // partial maps are merged at the end: the machine's own scaling
            // for this work, to read weir's against.
            let (batches, rows) = opts.or(60, 100_000);
            let workers = opts.workers.unwrap_or(1).max(1);
            let src = PageViewSource::new(rows, batches);
            let data: Vec<RecordBatch> = (0..batches).map(|b| src.batch(b)).collect();
            let (cpu0, _) = rusage();
            let t0 = Instant::now();
            let counts = baseline_counts(&data, workers);
            let secs = t0.elapsed().as_secs_f64();
            let (cpu1, rss) = rusage();
            let total = (batches as u64 * rows) as f64;
            let pages: std::collections::HashSet<&str> = counts.keys().map(|(_, p)| *p).collect();
            Ok(
                json!({"scenario": "baseline", "workers": workers, "rows": total, "seconds": secs, "rows_per_sec": total / secs, "rows_per_cpu_sec": total / (cpu1 - cpu0).max(1e-9), "groups": counts.len(), "pages": pages.len(), "peak_rss_mb": rss, "profile": if cfg!(debug_assertions) { "debug" } else { "release" }}),
            )
        }
        other => Err(WeirError::Config(format!(
            "unknown scenario `{other}` (lab, page_views, sliding, join, tiny, startup, baseline)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_baseline_counts_the_same_page_views_on_any_number_of_threads() {
        let src = PageViewSource::new(1001, 5);
        let data: Vec<RecordBatch> = (0..5).map(|b| src.batch(b)).collect();
        // Counted row by row, no threads.
        let mut want: FxHashMap<(i64, &str), i64> = FxHashMap::default();
        for b in &data {
            let pages = b.column(0).as_any().downcast_ref::<StringArray>().unwrap();
            let ts = b
                .column(1)
                .as_any()
                .downcast_ref::<TimestampMicrosecondArray>()
                .unwrap();
            for i in 0..b.num_rows() {
                let t = ts.value(i);
                *want
                    .entry((t - t.rem_euclid(60_000_000), pages.value(i)))
                    .or_insert(0) += 1;
            }
        }
        assert_eq!(want.values().sum::<i64>(), 5 * 1001);
        for workers in [1, 2, 3] {
            assert_eq!(baseline_counts(&data, workers), want, "{workers} workers");
        }
    }
}
