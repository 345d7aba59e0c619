//! The micro-batch loop (ARCHITECTURE.md's lifecycle):
//!
//! 1. the trigger fires;
//! 2. each source reports its latest offset;
//! 3. `offsets/N` is written before the batch writes its state, its sink
//!    output or its commit: its sources' reads and its computation run
//!    meanwhile on the pool (`checkpoint::logged`);
//! 4. sources return the rows in `(start, end]`;
//! 5. the pipeline runs: stateless ops, then stateful ones against state
//!    version N, each state partition committing version N+1 in its own
//!    task (`BatchContext::state_commit`);
//! 6. the sink commits batch N;
//! 7. the state partitions not committed in their tasks (a stream-stream
//!    join's, a scale-out task's) commit version N+1, then `commits/N`;
//! 8. the next watermark is computed and, if a stateful operator waits on it,
//!    a no-data batch runs next.
//!
//! On restart an `offsets/N` without `commits/N` is re-run with its logged
//! offsets and watermark.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::record_batch::RecordBatch;
use weir_plan::{OutputMode, StreamPlan};

use super::read_ahead::{self, ReadAhead};
use super::shared_watermark::{self, Pending, WatermarkShare};
use super::source_reads;
use super::spec::QuerySpec;
use super::{QueryHost, QueryShared, StreamingQuery, Trigger};
use crate::checkpoint::logged::OffsetsLogged;
use crate::checkpoint::purge::LogPurge;
use crate::checkpoint::{Checkpoint, CommitEntry, OffsetEntry};
use crate::error::{Result, WeirError};
use crate::failpoint::{failpoint, set_current_batch};
use crate::ops::aggregate::Watermarks;
use crate::ops::ahead::Preparer;
use crate::ops::{BatchContext, Pipeline};
use crate::progress::{
    format_ms, QueryListener, QueryStartedEvent, QueryStatus, QueryTerminatedEvent, SinkProgress,
    SourceProgress, StreamingQueryProgress,
};
use crate::sink::{BoxSink, SinkContext};
use crate::source::{BoxSource, Offset, SourceContext, SourceStorage};
use crate::state::{InTaskCommit, PartitionedStore};

/// The file marking a checkpoint as a scale-out query's (`crate::scale`).
pub(crate) const SCALE_OUT_MARKER: &str = "scale-out";

/// A batch logged in `offsets/N` but not committed: it runs again as logged.
struct PendingBatch {
    entry: OffsetEntry,
}

struct Runner {
    shared: Arc<QueryShared>,
    host: Arc<QueryHost>,
    plan: StreamPlan,
    trigger: Trigger,
    checkpoint: Checkpoint,
    sources: Vec<(String, BoxSource)>,
    sink: BoxSink,
    pipeline: Pipeline,
    listeners: Vec<Arc<dyn QueryListener>>,
    /// Next batch id.
    batch_id: i64,
    /// Where the last committed batch ended, per source.
    committed: Vec<Option<Offset>>,
    /// The watermark the last batch ran with (late-row filter of the next), ms.
    current_wm: Option<i64>,
    /// The watermark the next batch runs with, ms.
    next_wm: i64,
    /// The next batch's watermark as logged (in the last `commits/N`): what
    /// a restart starts from, so all a scale-out task may announce when no
    /// batch runs (`next_wm` may have moved since, unlogged).
    logged_next_wm: i64,
    /// Each watermark operator's own watermark.
    op_wms: Vec<Option<i64>>,
    pending: Option<PendingBatch>,
    late_sink: Option<BoxSink>,
    last_trigger_ms: Option<i64>,
    idle_reported: bool,
    /// Scale-out: the other tasks' watermarks.
    watermark_share: Option<Arc<dyn WatermarkShare>>,
    /// The first stage of the pipeline, when batches are read ahead
    /// (`read_ahead::allowed`).
    preparer: Option<Preparer>,
    /// The next batch's read, under way: it holds the sources.
    reading: Option<Receiver<read_ahead::Returned>>,
    /// The next batch, read while the last one ran.
    read_ahead: Option<ReadAhead>,
    /// Where the last batch ended, for the sources' `commit` once the read
    /// ahead gives them back.
    commit_after_read: Option<Vec<Option<Offset>>>,
    /// Removes the logs' old entries (`spark.sql.streaming.asyncLogPurge.enabled`).
    log_purge: LogPurge,
}

pub(crate) fn start(spec: QuerySpec) -> Result<StreamingQuery> {
    let QuerySpec {
        host,
        plan,
        sources,
        statics,
        trigger,
        name,
        checkpoint,
        mut sink,
        late_sink,
        watermark_share,
    } = spec;
    let conf = host.conf().clone();
    let is_task = watermark_share.is_some();
    let mode = plan.output_mode;
    let needs_checkpoint = sink.kind().needs_checkpoint();
    // A local path, file:///... or s3://bucket/prefix. S3 settings: the
    // session's `spark.hadoop.fs.s3a.*` over the environment's AWS_*.
    let checkpoint_given = checkpoint.is_some();
    let chk = match checkpoint {
        Some(location) => Checkpoint::open_location(&location, &conf.s3, conf.fsync_checkpoint)?,
        None if needs_checkpoint => {
            return Err(WeirError::Config(
                "checkpointLocation must be specified for this sink (Spark's option(\"checkpointLocation\", ...)): call .checkpoint_location(path) (only the console, memory and noop sinks may run without one)".into(),
            ))
        }
        None => Checkpoint::open(
            std::env::temp_dir().join(format!("weir-temporary-{}", uuid::Uuid::new_v4())),
            conf.fsync_checkpoint,
        )?,
    };
    let mut sources: Vec<(String, BoxSource)> = sources.into_iter().collect();
    let schemas: Vec<_> = sources.iter().map(|(_, s)| s.schema()).collect();
    let mut pipeline = Pipeline::compile(&plan, &schemas, &statics)?;
    pipeline.set_collect_max_values(conf.collect_max_values);
    // What a checkpoint on object storage cannot keep yet is refused before
    // anything is written to it.
    chk.check_supported(
        sources.iter().map(|(n, s)| (n.as_str(), s)),
        std::iter::once(&sink).chain(late_sink.as_ref()),
    )?;
    // A scale-out query's checkpoint keeps its batches per task.
    if let Some(group) = chk.storage().get(SCALE_OUT_MARKER)? {
        return Err(WeirError::checkpoint(
            chk.root(),
            format!(
                "this checkpoint belongs to a query running over many processes (consumer group `{}`); its batches and state are per task under tasks/: start it with .scale_out(\"{}\") (stream_query!: `scale_out:`), or use a new checkpoint location",
                String::from_utf8_lossy(&group),
                String::from_utf8_lossy(&group)
            ),
        ));
    }
    let meta = chk.load_or_init_metadata(&plan, conf.shuffle_partitions)?;

    // Recover: the last committed batch and any batch logged after it.
    let last_commit = chk.commits.latest()?;
    let last_offsets = chk.offsets.latest()?;
    let mut committed: Vec<Option<Offset>> = vec![None; sources.len()];
    let mut current_wm = None;
    let mut next_wm = 0;
    let mut op_wms = vec![None; pipeline.watermark_count()];
    let mut batch_id = 0;
    let mut pending = None;
    if let Some(c) = last_commit {
        let entry = chk.offsets.read_offsets(c)?.ok_or_else(|| {
            WeirError::checkpoint(
                chk.root().join("offsets").join(c.to_string()),
                "commits/ has a batch that offsets/ lacks; the checkpoint is damaged",
            )
        })?;
        let commit = chk.commits.read_commit(c)?.ok_or_else(|| {
            WeirError::checkpoint(
                chk.root().join("commits").join(c.to_string()),
                "the commit log entry vanished while the query started; the checkpoint is damaged or another process is changing it",
            )
        })?;
        committed = entry.sources.clone();
        committed.resize(sources.len(), None);
        current_wm = Some(entry.batch_watermark_ms);
        next_wm = commit.next_batch_watermark_ms;
        if commit.operator_watermarks_ms.len() == op_wms.len() {
            op_wms = commit.operator_watermarks_ms.clone();
        }
        batch_id = c + 1;
    }
    if let Some(o) = last_offsets {
        if last_commit.is_none_or(|c| o > c) {
            if o != batch_id {
                return Err(WeirError::checkpoint(chk.root(), format!("offsets/ ends at batch {o} but the last commit is {:?}; the checkpoint is damaged", last_commit)));
            }
            let entry = chk.offsets.read_offsets(o)?.ok_or_else(|| {
                WeirError::checkpoint(
                    chk.root().join("offsets").join(o.to_string()),
                    "the offsets log entry vanished while the query started; the checkpoint is damaged or another process is changing it",
                )
            })?;
            pending = Some(PendingBatch { entry });
        }
    }
    let partitions = meta.state_partitions.max(1);
    let provider = conf.state_store.clone();
    let version = batch_id as u64; // state after batch N-1 is version N
    let sync = conf.fsync_checkpoint;
    let retain = conf.min_batches_to_retain;
    pipeline.open_state(|op, name| {
        let mut parts = Vec::with_capacity(partitions);
        for p in 0..partitions.max(1) {
            let dir = chk.state_dir(op, p)?;
            let dir = if name.is_empty() {
                dir
            } else {
                dir.child(name)?
            };
            parts.push(provider.open(&dir, version, retain, sync)?);
        }
        Ok(PartitionedStore::new(parts))
    })?;
    pipeline.set_partitions(partitions.max(1));
    for (i, (_, s)) in sources.iter_mut().enumerate() {
        s.use_clock(conf.clock.clone());
        s.open_on(
            &SourceContext {
                metadata_dir: chk.source_dir(i),
                sync,
                default_parallelism: conf.worker_threads.max(1),
            },
            &SourceStorage {
                metadata: chk.storage().child(&format!("sources/{i}"))?,
                s3: conf.s3.clone(),
            },
        )?;
        if trigger == Trigger::AvailableNow {
            s.prepare_for_available_now()?;
        }
    }
    sink.open(&SinkContext {
        query_name: name.clone(),
        checkpoint_dir: chk.root().to_path_buf(),
        query_id: meta.id.clone(),
        checkpoint: chk.storage().clone(),
        output_mode: mode,
        schema: pipeline.schema(),
        memory_tables: host.memory_tables().clone(),
        sync: conf.fsync_checkpoint,
        s3: conf.s3.clone(),
    })?;

    let mut late_sink = late_sink;
    if let Some(l) = late_sink.as_mut() {
        l.open(&SinkContext {
            query_name: name.clone().map(|n| format!("{n}_late_rows")),
            checkpoint_dir: chk.root().to_path_buf(),
            query_id: meta.id.clone(),
            checkpoint: chk.storage().clone(),
            output_mode: OutputMode::Append,
            schema: pipeline.late_schema()?,
            memory_tables: host.memory_tables().clone(),
            sync: conf.fsync_checkpoint,
            s3: conf.s3.clone(),
        })?;
    }
    let explain = explain(
        &plan,
        &sources,
        &sink,
        trigger,
        &RunFacts {
            checkpoint: chk.root(),
            checkpoint_given,
            partitions,
            store: provider.name(),
        },
    );
    let shared = Arc::new(
        QueryShared::new(
            meta.id.clone(),
            name.clone(),
            explain,
            mode,
            "Initializing sources".into(),
        )
        .with_stop_timeout(conf.stop_timeout),
    );
    *shared.resumed_from.lock().unwrap() = committed.clone();
    let listeners = host.listeners();
    let preparer = read_ahead::allowed(
        conf.read_ahead,
        trigger,
        &sources,
        late_sink.is_some(),
        watermark_share.is_some(),
    )
    .then(|| pipeline.preparer())
    .flatten();
    let log_purge = LogPurge::new(
        chk.offsets.clone(),
        chk.commits.clone(),
        conf.min_batches_to_retain,
        conf.async_log_purge,
    );
    let runner = Runner {
        shared: shared.clone(),
        host: host.clone(),
        plan,
        trigger,
        checkpoint: chk,
        sources,
        sink,
        pipeline,
        listeners,
        batch_id,
        committed,
        current_wm,
        next_wm,
        logged_next_wm: next_wm,
        op_wms,
        pending,
        late_sink,
        last_trigger_ms: None,
        idle_reported: false,
        watermark_share,
        preparer,
        reading: None,
        read_ahead: None,
        commit_after_read: None,
        log_purge,
    };
    for l in &runner.listeners {
        l.on_query_started(&QueryStartedEvent {
            id: shared.id.clone(),
            run_id: shared.run_id.clone(),
            name: name.clone(),
        });
    }
    let handle = std::thread::Builder::new()
        .name(format!(
            "weir-query-{}",
            name.as_deref().unwrap_or(&shared.id)
        ))
        .spawn(move || runner.run())
        .map_err(|e| WeirError::Config(format!("cannot start the query thread: {e}")))?;
    shared.started(handle);
    let q = StreamingQuery { shared };
    // A scale-out task is not one of the session's queries: its
    // coordinator is (a task that moves away is not a query that ended).
    if !is_task {
        host.register(q.clone());
    }
    Ok(q)
}

/// What only the running query knows, printed after its plan.
struct RunFacts<'a> {
    /// The checkpoint's root (a path, or an object storage URL).
    checkpoint: &'a std::path::Path,
    /// Whether the user gave the checkpoint (otherwise a temporary one).
    checkpoint_given: bool,
    /// The state store partitions of each stateful operator.
    partitions: usize,
    /// The state store provider's name.
    store: &'static str,
}

/// The query's `explain()`: the plan as weir-plan prints it (the text
/// `stream_query!`'s `EXPLAIN` shows for the same query), its sink and
/// trigger filled in, then each source and the sink as they describe
/// themselves, the state partitions and store, and the checkpoint.
fn explain(
    plan: &StreamPlan,
    sources: &[(String, BoxSource)],
    sink: &BoxSink,
    trigger: Trigger,
    run: &RunFacts<'_>,
) -> String {
    let mut plan = plan.clone();
    plan.sink.get_or_insert(weir_plan::SinkDecl {
        kind: sink.kind(),
        checkpoint: run.checkpoint_given,
    });
    plan.trigger.get_or_insert(match trigger {
        Trigger::Default => weir_plan::TriggerDecl::Default,
        Trigger::ProcessingTime(d) => weir_plan::TriggerDecl::ProcessingTime(d.as_millis() as u64),
        Trigger::AvailableNow => weir_plan::TriggerDecl::AvailableNow,
        Trigger::Once => weir_plan::TriggerDecl::Once,
    });
    let mut s = format!("== Physical Plan ==\n{plan}\n== Run time ==\n");
    for (name, src) in sources {
        s.push_str(&format!("Source {name}: {}\n", src.description()));
    }
    s.push_str(&format!("Sink: {}\n", sink.description()));
    s.push_str(&format!(
        "State: {} partitions per stateful operator, {} store\n",
        run.partitions, run.store
    ));
    let temporary = if run.checkpoint_given {
        ""
    } else {
        " (temporary)"
    };
    s.push_str(&format!(
        "Checkpoint: {}{temporary}\n",
        run.checkpoint.display()
    ));
    s
}

impl Runner {
    fn set_status(&self, message: &str, data: bool, active: bool) {
        let mut st = self.shared.state.lock().unwrap();
        st.status = QueryStatus {
            message: message.into(),
            is_data_available: data,
            is_trigger_active: active,
        };
    }

    fn stopping(&self) -> bool {
        self.shared.stop.load(Ordering::SeqCst)
    }

    /// Waits for the next batch's read ahead, if one is under way: the
    /// sources come back (and commit where the last batch ended) and what
    /// it read is kept for the batch.
    fn collect_read(&mut self) -> Result<()> {
        let Some(reading) = self.reading.take() else {
            return Ok(());
        };
        let (sources, read) = reading
            .recv()
            .map_err(|_| WeirError::Config("the read ahead lost the query's sources".into()))?;
        self.sources = sources;
        if let Some(ends) = self.commit_after_read.take() {
            commit_sources(&mut self.sources, &ends)?;
        }
        self.read_ahead = read?;
        Ok(())
    }

    fn run(mut self) {
        // A panic (a bug, or a panicking foreach_batch closure) ends the query
        // with an error instead of leaving waiters hanging.
        let result =
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.run_loop())) {
                Ok(r) => r,
                Err(p) => {
                    let msg = crate::error::panic_message(p.as_ref());
                    let _ = self.pipeline.abort_state();
                    Err(WeirError::Config(format!(
                        "the query thread panicked: {msg}"
                    )))
                }
            };
        // A read ahead under way gives the sources back first (its panic,
        // or the last batch's source commit failing, is the query's error
        // if it has none).
        let result = match (result, self.collect_read()) {
            (Ok(()), Err(e)) => Err(e),
            (result, _) => result,
        };
        for (_, s) in self.sources.iter_mut() {
            s.stop();
        }
        // A purge under way ends before the query is reported stopped.
        self.log_purge.finish();
        let error = match result {
            Ok(()) | Err(WeirError::Stopped) => None,
            Err(e) => {
                tracing::error!(query = %self.shared.id, "query failed: {e}");
                Some(Arc::new(e))
            }
        };
        // Listeners hear of the end before anyone waiting on the query wakes up.
        for l in &self.listeners {
            l.on_query_terminated(&QueryTerminatedEvent {
                id: self.shared.id.clone(),
                run_id: self.shared.run_id.clone(),
                exception: error.as_ref().map(|e| e.to_string()),
            });
        }
        {
            let mut st = self.shared.state.lock().unwrap();
            st.active = false;
            st.error = error.clone();
            st.status = QueryStatus {
                message: "Stopped".into(),
                is_data_available: false,
                is_trigger_active: false,
            };
        }
        self.shared.cond.notify_all();
        if self.watermark_share.is_none() {
            // (A scale-out task's end is its coordinator's business.)
            self.host.notify_terminated();
        }
    }

    fn wait(&self, d: Duration) {
        let st = self.shared.state.lock().unwrap();
        if self.stopping() {
            return;
        }
        let _ = self.shared.cond.wait_timeout(st, d).unwrap();
    }

    /// Waits up to `d` (the polling delay) for new data, unless a
    /// `process_all_available` asked for a check since `epoch`. Requests are
    /// made under the state lock, so none is missed between the check and
    /// the wait.
    fn wait_for_data(&self, epoch: u64, d: Duration) {
        let st = self.shared.state.lock().unwrap();
        if self.stopping() || self.shared.request_epoch.load(Ordering::SeqCst) != epoch {
            return;
        }
        let _ = self.shared.cond.wait_timeout(st, d).unwrap();
    }

    fn run_loop(&mut self) -> Result<()> {
        // Time is the session's clock: a manual clock moves only when a
        // test advances it, and the loop waits on it (checking for a stop
        // every polling delay) instead of sleeping.
        let clock = self.host.conf().clock.clone();
        let polling_delay = self.host.conf().polling_delay;
        let started = clock.now_ms();
        let mut tick = 0i64;
        loop {
            if self.stopping() {
                return Ok(());
            }
            if let Trigger::ProcessingTime(interval) = self.trigger {
                // Fixed schedule: wait for the next tick; a late batch starts the next at once.
                let interval_ms = interval.as_millis() as i64;
                let next = started.saturating_add(interval_ms.saturating_mul(tick));
                loop {
                    let now = clock.now_ms();
                    if now >= next || self.stopping() {
                        break;
                    }
                    self.set_status("Waiting for next trigger", false, false);
                    match clock.as_manual() {
                        Some(manual) => {
                            manual.wait_till(next, polling_delay);
                        }
                        None => self.wait(Duration::from_millis((next - now) as u64)),
                    }
                }
                if self.stopping() {
                    return Ok(());
                }
                let elapsed = (clock.now_ms() - started).max(0);
                tick = elapsed / interval_ms.max(1) + 1;
            }
            let epoch = self.shared.request_epoch.load(Ordering::SeqCst);
            let ran = self.run_batch()?;
            if ran {
                self.idle_reported = false;
                if self.trigger == Trigger::Once {
                    return Ok(());
                }
                continue;
            }
            {
                let mut st = self.shared.state.lock().unwrap();
                st.idle_epoch = st.idle_epoch.max(epoch);
                st.status = QueryStatus {
                    message: "Waiting for data to arrive".into(),
                    is_data_available: false,
                    is_trigger_active: false,
                };
            }
            self.shared.cond.notify_all();
            if !self.idle_reported {
                self.idle_reported = true;
                for l in &self.listeners {
                    l.on_query_idle(&self.shared.id, &self.shared.run_id);
                }
            }
            match self.trigger {
                Trigger::Once | Trigger::AvailableNow => return Ok(()),
                Trigger::Default => self.wait_for_data(epoch, self.host.conf().polling_delay),
                Trigger::ProcessingTime(_) => {}
            }
        }
    }

    /// Plans and runs one batch; false when there was nothing to do.
    fn run_batch(&mut self) -> Result<bool> {
        let trigger_start = Instant::now();
        let trigger_ms = self.host.conf().clock.now_ms();
        let mut durations: BTreeMap<String, i64> = BTreeMap::new();
        self.collect_read()?;
        let has_wm = self.pipeline.watermark_count() > 0;
        let batch_id = self.batch_id;
        // This batch, if the last one read it ahead.
        let mut ahead = self
            .read_ahead
            .take()
            .filter(|r| r.batch_id == batch_id && r.start == self.committed);
        // `announce`: the batch is new, its `offsets/N` still to write
        // (then its watermark is announced, with whether it has data).
        let (entry, no_data, announce) = match self.pending.take() {
            Some(p) => {
                // Run again as logged (nothing is read ahead of a restart).
                ahead = None;
                let no_data = p.entry.sources == self.committed;
                (p.entry, no_data, None)
            }
            None => {
                self.set_status("Checking for new data", false, true);
                // A source's own log (files seen) is written for this batch.
                set_current_batch(batch_id);
                let t = Instant::now();
                let whole_source = self
                    .watermark_share
                    .as_ref()
                    .and_then(|s| s.whole_source(self.op_wms.len()));
                let latest = source_reads::latest_offsets(&mut self.sources, &self.committed)?;
                durations.insert("latestOffset".into(), t.elapsed().as_millis() as i64);
                // What was read ahead counts if the batch ends there still.
                ahead = ahead.filter(|r| r.latest == latest);
                let has_data = source_reads::has_data(&latest, &self.committed);
                if let Some(share) = &self.watermark_share {
                    // Scale-out: see `shared_watermark`.
                    let mut wms = vec![None; self.op_wms.len()];
                    let pending = share.pending(!has_data);
                    if pending == Pending::OwnRows {
                        wms = self.op_wms.clone();
                    }
                    if let (false, Some(whole)) = (has_data, &whole_source) {
                        shared_watermark::merge(&mut wms, whole);
                    }
                    let chosen = shared_watermark::choose(self.plan.conf.watermark_policy, &wms);
                    let bound = match pending {
                        Pending::Bound(b) => b,
                        Pending::OwnRows => None,
                    };
                    for w in chosen.into_iter().chain(bound) {
                        self.next_wm = self.next_wm.max(w);
                    }
                }
                let wm_moved = self.current_wm.is_none_or(|c| self.next_wm > c);
                let no_data = !has_data
                    && self.plan.conf.no_data_batches
                    && has_wm
                    && self.current_wm.is_some()
                    && wm_moved
                    && self
                        .pipeline
                        .needs_no_data_batch(self.current_wm, self.next_wm);
                if !has_data && !no_data {
                    self.publish_watermark(true, self.logged_next_wm);
                    return Ok(false);
                }
                let sources = if has_data {
                    latest
                } else {
                    self.committed.clone()
                };
                let entry = OffsetEntry {
                    batch_watermark_ms: self.next_wm,
                    batch_timestamp_ms: trigger_ms,
                    operator_watermarks_ms: self.op_wms.clone(),
                    sources,
                };
                (entry, no_data, Some(!has_data))
            }
        };
        if let Some(share) = &self.watermark_share {
            share.batch(batch_id, entry.batch_watermark_ms);
        }
        self.set_status("Processing new data", !no_data, true);
        let watermarks = if has_wm {
            Watermarks {
                late_ms: Some(self.current_wm.unwrap_or(entry.batch_watermark_ms)),
                evict_ms: Some(entry.batch_watermark_ms),
            }
        } else {
            Watermarks::default()
        };
        // A new batch reads and computes on the pool while a worker writes
        // its `offsets/N`; its state partitions commit only once that is
        // durable (`checkpoint::logged`). A batch run again as logged has
        // nothing to write first.
        let (logged, to_log) = match announce {
            Some(caught_up) => {
                let (gate, logging) = OffsetsLogged::pending(batch_id);
                (gate, Some((logging, caught_up)))
            }
            None => (OffsetsLogged::already(batch_id), None),
        };
        let mut ctx = BatchContext {
            watermarks,
            no_data,
            event_time: vec![],
            collect_late: self.late_sink.is_some(),
            late_rows: vec![],
            // A scale-out task (it shares watermarks) writes its state after
            // its sink: a zombie is fenced at the sink before it writes any.
            state_commit: self.watermark_share.is_none().then(|| InTaskCommit {
                version: batch_id as u64 + 1,
                logged: logged.clone(),
            }),
        };
        // The sources' reads (the Kafka source reads its partitions as
        // parallel tasks) and the batch's tasks (partial aggregation, state
        // partitions) run on the session's worker pool, as one job (beside
        // the `offsets/N` write, below): each hand-over to the pool wakes a
        // sleeping worker and then this thread, which costs tens of
        // microseconds on a virtual machine.
        let pool = self.host.workers()?;
        // The next batch is read ahead, as a task of its own beside this
        // batch's (not beside a no-data batch, nor once the query is
        // stopping).
        let preparer = self
            .preparer
            .clone()
            .filter(|_| !no_data && !self.stopping());
        let (sources, committed, pipeline, reading) = (
            &mut self.sources,
            &self.committed,
            &mut self.pipeline,
            &mut self.reading,
        );
        let mut source_rows = Vec::new();
        let mut source_metrics = Vec::new();
        let mut run_started = Instant::now();
        let mut get_batch_ms = 0;
        let job = || -> Result<Result<Vec<RecordBatch>>> {
            let mut prepared = None;
            let inputs = match ahead.take() {
                // Read ahead: no time spent reading in this batch.
                Some(r) => {
                    source_metrics = r.metrics;
                    prepared = r.prepared;
                    r.inputs
                }
                None => {
                    // Read each source's (committed, end].
                    let t = Instant::now();
                    let inputs = source_reads::read(sources, committed, &entry.sources)?;
                    get_batch_ms = t.elapsed().as_millis() as i64;
                    source_metrics = source_reads::described(sources);
                    inputs
                }
            };
            source_rows = inputs
                .iter()
                .map(|b| b.iter().map(|b| b.num_rows() as i64).sum::<i64>())
                .collect();
            set_current_batch(batch_id);
            failpoint("after_read", batch_id);
            run_started = Instant::now();
            // The next batch's read starts now, beside this batch's tasks,
            // with the sources (not beside a large batch: see
            // `read_ahead::MAX_ROWS`).
            let rows: i64 = source_rows.iter().sum();
            if let Some(prepare) = preparer.filter(|_| rows <= read_ahead::MAX_ROWS) {
                let start = entry.sources.clone();
                let owned = std::mem::take(sources);
                // Kept where a panic of this batch cannot lose it.
                *reading = Some(read_ahead::spawn(batch_id + 1, owned, start, prepare));
            }
            let out = pipeline.run_prepared(&inputs, &mut ctx, prepared);
            Ok(out)
        };
        // A new batch's `offsets/N` is written as a task of its own beside
        // the read and the computation: the pool's first worker writes it
        // while another starts the batch (with one worker, before it). Not
        // on this thread: with as many workers as cores it would wait for
        // a core until the workers sleep, and the state partitions with it.
        // The write must not use the pool itself (see `checkpoint::logged`).
        //
        // Both are handed to the pool in this order, and this thread (not
        // a worker) waits for them outside the pool. From a thread outside
        // the pool they go into its one queue, first in, first taken (the
        // `_fifo` scope keeps that order even from a worker), so no worker
        // can take the job before another has taken the write; and the
        // write never waits on the pool. So the job's state partitions,
        // waiting for the write, cannot hold the only worker while the
        // write is queued behind them. A worker waiting in a `join` for the
        // two would take the next batch's read ahead meanwhile and run it
        // to its end before the batch could return; so the batch's sink,
        // `commits/N` and progress report would wait for the read ahead
        // instead of running beside it.
        let (log, share, op_wms) = (
            &self.checkpoint.offsets,
            self.watermark_share.as_deref(),
            &self.op_wms,
        );
        let logged_entry = &entry;
        let logs = to_log.is_some();
        let write_log = move || -> Result<Duration> {
            let Some((logging, caught_up)) = to_log else {
                return Ok(Duration::ZERO);
            };
            let t = Instant::now();
            set_current_batch(batch_id);
            log.write_offsets(batch_id, logged_entry)?;
            failpoint("after_offsets", batch_id);
            logging.logged();
            let logged_in = t.elapsed();
            let wm = logged_entry.batch_watermark_ms;
            publish_watermark(share, op_wms, committed, caught_up, wm);
            Ok(logged_in)
        };
        let (mut logged_in, mut run) = (None, None);
        pool.in_place_scope_fifo(|s| {
            // (A batch run again as logged has nothing to write.)
            if logs {
                s.spawn_fifo(|_| logged_in = Some(write_log()));
            } else {
                logged_in = Some(Ok(Duration::ZERO));
            }
            s.spawn_fifo(|_| run = Some(job()));
        });
        // Both ran: the scope returns once both ended, and a panic in
        // either is raised here instead.
        let ran = "a scoped task runs before its scope returns";
        let (logged_in, run) = (logged_in.expect(ran), run.expect(ran));
        durations.insert("getBatch".into(), get_batch_ms);
        // The batch's own error comes second to its log's: a batch whose
        // `offsets/N` could not be written stopped at its first write.
        let output = match logged_in.and_then(|wal| run.map(|r| (wal, r))) {
            Ok((wal, Ok(o))) => {
                if announce.is_some() {
                    durations.insert("walCommit".into(), wal.as_millis() as i64);
                }
                o
            }
            Ok((_, Err(e))) | Err(e) => {
                let _ = self.pipeline.abort_state();
                return Err(e);
            }
        };
        let t = run_started;
        if let Err(e) = self.sink.add_batch(batch_id, &output) {
            let _ = self.pipeline.abort_state();
            return Err(e);
        }
        if let Some(late) = self.late_sink.as_mut() {
            if let Err(e) = late.add_batch(batch_id, &ctx.late_rows) {
                let _ = self.pipeline.abort_state();
                return Err(e);
            }
        }
        durations.insert("addBatch".into(), t.elapsed().as_millis() as i64);
        failpoint("after_sink", batch_id);
        let t = Instant::now();
        // State partitions not committed in their tasks (see
        // `BatchContext::state_commit`) commit in parallel on the pool.
        let pipeline = &mut self.pipeline;
        let version = batch_id as u64 + 1;
        if pipeline.commit_pending(version) {
            self.host
                .workers()
                .and_then(|pool| pool.install(|| pipeline.commit_state(version)))?;
        } else {
            // Nothing left to write: no hand-over to the pool.
            pipeline.commit_state(version)?;
        }
        failpoint("after_state_commit", batch_id);
        // The next watermark from this batch's event times.
        let mut op_wms = self.op_wms.clone();
        for (i, stats) in ctx.event_time.iter().enumerate() {
            if stats.count > 0 {
                let cand = stats.max - self.pipeline.watermark_delays[i];
                if op_wms[i].is_none_or(|w| cand > w) {
                    op_wms[i] = Some(cand);
                }
            }
        }
        // A scale-out task's watermark moves when the next batch is
        // planned, from what the tasks published (`shared_watermark`).
        let own = match self.watermark_share {
            Some(_) => None,
            None => shared_watermark::choose(self.plan.conf.watermark_policy, &op_wms),
        };
        let next_wm = own
            .map(|c| c.max(entry.batch_watermark_ms))
            .unwrap_or(entry.batch_watermark_ms);
        self.checkpoint.commits.write_commit(
            batch_id,
            &CommitEntry {
                next_batch_watermark_ms: next_wm,
                operator_watermarks_ms: op_wms.clone(),
            },
        )?;
        failpoint("after_commit_log", batch_id);
        durations.insert("commitOffsets".into(), t.elapsed().as_millis() as i64);
        if self.reading.is_some() {
            self.commit_after_read = Some(entry.sources.clone());
        } else {
            commit_sources(&mut self.sources, &entry.sources)?;
        }
        self.log_purge.after_batch(batch_id);
        let start_offsets = std::mem::replace(&mut self.committed, entry.sources.clone());
        self.current_wm = Some(entry.batch_watermark_ms);
        self.next_wm = next_wm;
        self.logged_next_wm = next_wm;
        self.op_wms = op_wms;
        self.batch_id += 1;
        durations.insert(
            "triggerExecution".into(),
            trigger_start.elapsed().as_millis() as i64,
        );
        durations.insert("queryPlanning".into(), 0);
        self.report(
            batch_id,
            trigger_ms,
            &entry,
            start_offsets,
            &source_rows,
            source_metrics,
            &ctx,
            &output,
            durations,
            has_wm,
        );
        Ok(true)
    }

    /// Scale-out: publishes this task's watermarks, announcing
    /// `logged_next_wm` for its next batch: a watermark already logged (the
    /// batch's own in `offsets/N`, or the last `commits/N`'s), so a restart
    /// never runs a batch below what was announced.
    fn publish_watermark(&self, caught_up: bool, logged_next_wm: i64) {
        publish_watermark(
            self.watermark_share.as_deref(),
            &self.op_wms,
            &self.committed,
            caught_up,
            logged_next_wm,
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn report(
        &mut self,
        batch_id: i64,
        trigger_ms: i64,
        entry: &OffsetEntry,
        start_offsets: Vec<Option<Offset>>,
        source_rows: &[i64],
        source_metrics: Vec<(String, BTreeMap<String, String>)>,
        ctx: &BatchContext,
        output: &[RecordBatch],
        durations: BTreeMap<String, i64>,
        has_wm: bool,
    ) {
        let rows: i64 = source_rows.iter().sum();
        let exec_ms = durations
            .get("triggerExecution")
            .copied()
            .unwrap_or(0)
            .max(1) as f64;
        let since_last = self.last_trigger_ms.map(|l| (trigger_ms - l).max(1) as f64);
        self.last_trigger_ms = Some(trigger_ms);
        let input_rate = since_last.map(|d| rows as f64 * 1000.0 / d).unwrap_or(0.0);
        let processed_rate = rows as f64 * 1000.0 / exec_ms;
        let mut event_time = BTreeMap::new();
        // Spark reports the first watermark operator (plan order) that saw rows.
        let stats = ctx
            .event_time
            .iter()
            .find(|s| s.count > 0)
            .copied()
            .unwrap_or_default();
        if stats.count > 0 {
            event_time.insert("min".into(), format_ms(stats.min));
            event_time.insert("max".into(), format_ms(stats.max));
            event_time.insert("avg".into(), format_ms(stats.avg()));
        }
        if has_wm {
            event_time.insert("watermark".into(), format_ms(entry.batch_watermark_ms));
        }
        // Each source as it was read (the next batch's read ahead may hold
        // the sources now).
        let mut sources: Vec<SourceProgress> = source_metrics
            .into_iter()
            .enumerate()
            .map(|(i, (description, metrics))| SourceProgress {
                description,
                start_offset: start_offsets.get(i).cloned().flatten(),
                end_offset: entry.sources.get(i).cloned().flatten(),
                latest_offset: entry.sources.get(i).cloned().flatten(),
                num_input_rows: source_rows[i],
                input_rows_per_second: since_last
                    .map(|d| source_rows[i] as f64 * 1000.0 / d)
                    .unwrap_or(0.0),
                processed_rows_per_second: source_rows[i] as f64 * 1000.0 / exec_ms,
                metrics,
            })
            .collect();
        // Each source's watermark and which one holds the query's back.
        crate::progress::held::annotate_sources(
            &mut sources,
            self.pipeline.watermark_operators(),
            &self.op_wms,
            self.plan.conf.watermark_policy,
        );
        let p = StreamingQueryProgress {
            id: self.shared.id.clone(),
            run_id: self.shared.run_id.clone(),
            name: self.shared.name.clone(),
            timestamp: format_ms(trigger_ms),
            batch_id,
            batch_duration: durations.get("triggerExecution").copied().unwrap_or(0),
            num_input_rows: rows,
            input_rows_per_second: input_rate,
            processed_rows_per_second: processed_rate,
            duration_ms: durations,
            event_time,
            state_operators: self.pipeline.state_metrics(),
            sources,
            sink: SinkProgress {
                description: self.sink.description(),
                num_output_rows: output.iter().map(|b| b.num_rows() as i64).sum(),
            },
        };
        for l in &self.listeners {
            l.on_query_progress(&p);
        }
        let keep = self.host.conf().num_recent_progress_updates.max(1);
        let mut st = self.shared.state.lock().unwrap();
        st.progress.push_back(p);
        while st.progress.len() > keep {
            st.progress.pop_front();
        }
    }
}

/// Tells each source its batches up to `ends` are committed.
fn commit_sources(sources: &mut [(String, BoxSource)], ends: &[Option<Offset>]) -> Result<()> {
    for ((_, s), e) in sources.iter_mut().zip(ends) {
        if let Some(e) = e {
            s.commit(e)?;
        }
    }
    Ok(())
}

/// [`Runner::publish_watermark`] from the fields it reads (callable while
/// the batch's job borrows the others).
fn publish_watermark(
    share: Option<&dyn WatermarkShare>,
    op_wms: &[Option<i64>],
    committed: &[Option<Offset>],
    caught_up: bool,
    logged_next_wm: i64,
) {
    if let Some(share) = share {
        share.publish(
            op_wms,
            caught_up,
            committed.first().and_then(|o| o.as_ref()),
            logged_next_wm,
        );
    }
}
