//! The [`StreamingQuery`] handle and the query's thread.

mod exec;
mod host;
mod read_ahead;
mod shared_watermark;
mod source_reads;
mod spec;
mod trigger;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

#[cfg(feature = "kafka")]
pub(crate) use exec::SCALE_OUT_MARKER;
pub(crate) use host::QueryHost;
#[cfg(feature = "kafka")]
pub(crate) use shared_watermark::merge as merge_watermarks;
pub use shared_watermark::{Pending, WatermarkShare};
pub(crate) use spec::QuerySpec;
pub use trigger::Trigger;

use crate::error::{Result, WeirError};
use crate::progress::{QueryStatus, StreamingQueryProgress};

pub(crate) struct QueryState {
    pub(crate) status: QueryStatus,
    pub(crate) progress: VecDeque<StreamingQueryProgress>,
    pub(crate) active: bool,
    pub(crate) error: Option<Arc<WeirError>>,
    /// The newest `process_all_available` request the query found nothing left for.
    pub(crate) idle_epoch: u64,
}

pub(crate) struct QueryShared {
    pub(crate) id: String,
    pub(crate) run_id: String,
    pub(crate) name: Option<String>,
    pub(crate) explain: String,
    pub(crate) output_mode: weir_plan::OutputMode,
    pub(crate) state: Mutex<QueryState>,
    pub(crate) cond: Condvar,
    pub(crate) stop: AtomicBool,
    pub(crate) request_epoch: AtomicU64,
    pub(crate) thread: Mutex<Option<JoinHandle<()>>>,
    /// Where each source stood when this run started: the end of the
    /// checkpoint's last committed batch (`None` for a new checkpoint).
    pub(crate) resumed_from: Mutex<Vec<Option<crate::source::Offset>>>,
    /// How long [`StreamingQuery::stop`] waits (`spark.sql.streaming.stopTimeout`;
    /// zero: as long as it takes).
    pub(crate) stop_timeout: Duration,
    /// The query's thread, once started (a stop asked from it only asks).
    pub(crate) thread_id: std::sync::OnceLock<std::thread::ThreadId>,
}

impl QueryShared {
    /// A new run of query `id`, active, with status `message`.
    pub(crate) fn new(
        id: String,
        name: Option<String>,
        explain: String,
        output_mode: weir_plan::OutputMode,
        message: String,
    ) -> QueryShared {
        QueryShared {
            id,
            run_id: uuid::Uuid::new_v4().to_string(),
            name,
            explain,
            output_mode,
            state: Mutex::new(QueryState {
                status: QueryStatus {
                    message,
                    is_data_available: false,
                    is_trigger_active: false,
                },
                progress: VecDeque::new(),
                active: true,
                error: None,
                idle_epoch: 0,
            }),
            cond: Condvar::new(),
            stop: AtomicBool::new(false),
            request_epoch: AtomicU64::new(0),
            thread: Mutex::new(None),
            resumed_from: Mutex::new(Vec::new()),
            stop_timeout: Duration::ZERO,
            thread_id: std::sync::OnceLock::new(),
        }
    }

    /// Keeps the query's thread, started to run it.
    pub(crate) fn started(&self, handle: JoinHandle<()>) {
        let _ = self.thread_id.set(handle.thread().id());
        *self.thread.lock().unwrap() = Some(handle);
    }

    /// The same, with `stop()` waiting at most `timeout` (zero: no limit).
    pub(crate) fn with_stop_timeout(mut self, timeout: Duration) -> QueryShared {
        self.stop_timeout = timeout;
        self
    }
}

/// A running (or ended) streaming query.
#[derive(Clone)]
pub struct StreamingQuery {
    pub(crate) shared: Arc<QueryShared>,
}

impl std::fmt::Debug for StreamingQuery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamingQuery")
            .field("id", &self.id())
            .field("name", &self.name())
            .finish()
    }
}

impl StreamingQuery {
    /// The query id, stable across restarts from the same checkpoint.
    pub fn id(&self) -> &str {
        &self.shared.id
    }

    /// This run's id (new at every start).
    pub fn run_id(&self) -> &str {
        &self.shared.run_id
    }

    /// The query name.
    pub fn name(&self) -> Option<&str> {
        self.shared.name.as_deref()
    }

    /// What the query is doing now.
    pub fn status(&self) -> QueryStatus {
        self.shared.state.lock().unwrap().status.clone()
    }

    /// The last batch's progress.
    pub fn last_progress(&self) -> Option<StreamingQueryProgress> {
        self.shared.state.lock().unwrap().progress.back().cloned()
    }

    /// Recent batches' progress, oldest first.
    pub fn recent_progress(&self) -> Vec<StreamingQueryProgress> {
        self.shared
            .state
            .lock()
            .unwrap()
            .progress
            .iter()
            .cloned()
            .collect()
    }

    /// True until the query stops or fails.
    pub fn is_active(&self) -> bool {
        self.shared.state.lock().unwrap().active
    }

    /// The error that ended the query, if it failed.
    pub fn exception(&self) -> Option<Arc<WeirError>> {
        self.shared.state.lock().unwrap().error.clone()
    }

    pub(crate) fn error_result(&self) -> Result<()> {
        match self.exception() {
            Some(e) => Err(WeirError::QueryFailed(e)),
            None => Ok(()),
        }
    }

    /// The query's output mode.
    pub fn output_mode(&self) -> weir_plan::OutputMode {
        self.shared.output_mode
    }

    /// The query's plan as text (Spark's `explain()`): the tree weir-plan
    /// prints, the text `stream_query!`'s `EXPLAIN` shows (the sink at the
    /// root, each operator above its input, the sources at the leaves),
    /// then what the running query adds: its sources and sink as they
    /// describe themselves, the state partitions and store, the checkpoint.
    pub fn explain(&self) -> String {
        self.shared.explain.clone()
    }

    /// Asks the query to stop after its running batch, without waiting
    /// (several queries stopping at once: ask each, then [`Self::stop`] each).
    pub(crate) fn request_stop(&self) {
        // Under the state lock: the loop checks the flag and waits under
        // it, so the wake-up cannot fall between the two.
        let _st = self.shared.state.lock().unwrap();
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.cond.notify_all();
    }

    /// Stops the query: the running batch finishes, then the query ends.
    /// Returns once the query's thread has ended; with
    /// `spark.sql.streaming.stopTimeout` set, gives up after that long with
    /// [`WeirError::StopTimeout`] (as Spark's `stop()` does), the query still
    /// asked to stop. Called from the query's own thread (a listener), it
    /// only asks.
    pub fn stop(&self) -> Result<()> {
        let limit = self.shared.stop_timeout;
        self.stop_within((!limit.is_zero()).then_some(limit))
    }

    /// Stops the query and waits for its end however long it takes,
    /// whatever `stopTimeout` says: for weir's own stops that must not
    /// leave a batch running (a scale-out task handing its partition on).
    #[cfg(feature = "kafka")]
    pub(crate) fn stop_and_wait(&self) {
        let _ = self.stop_within(None);
    }

    /// Asks the query to stop, then waits until it ended, at most `limit`.
    /// Every caller but the query's own thread waits (another caller may
    /// be joining the thread meanwhile: the query's end is what counts).
    fn stop_within(&self, limit: Option<Duration>) -> Result<()> {
        self.request_stop();
        let current = std::thread::current().id();
        match self.shared.thread_id.get() {
            // Never started, or asked from its own thread: it only asks.
            None => return Ok(()),
            Some(t) if *t == current => return Ok(()),
            Some(_) => {}
        }
        let deadline = limit.map(|l| Instant::now() + l);
        {
            let mut st = self.shared.state.lock().unwrap();
            while st.active {
                st = match deadline {
                    None => self.shared.cond.wait(st).unwrap(),
                    Some(d) => {
                        let now = Instant::now();
                        if now >= d {
                            return Err(WeirError::StopTimeout(limit.unwrap_or_default()));
                        }
                        self.shared.cond.wait_timeout(st, d - now).unwrap().0
                    }
                };
            }
        }
        let handle = self.shared.thread.lock().unwrap().take();
        if let Some(h) = handle {
            let _ = h.join();
        }
        Ok(())
    }

    /// Waits for the query to end. `Ok(true)`: it ended; `Ok(false)`: the
    /// timeout passed; `Err`: the query failed, with its error.
    pub fn await_termination(&self, timeout: Option<Duration>) -> Result<bool> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut st = self.shared.state.lock().unwrap();
        while st.active {
            match deadline {
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Ok(false);
                    }
                    st = self.shared.cond.wait_timeout(st, d - now).unwrap().0;
                }
                None => st = self.shared.cond.wait(st).unwrap(),
            }
        }
        match &st.error {
            Some(e) => Err(WeirError::QueryFailed(e.clone())),
            None => Ok(true),
        }
    }

    /// Blocks until everything the sources had when called is processed,
    /// including the no-data batches it makes due (Spark's `processAllAvailable`).
    /// For tests.
    pub fn process_all_available(&self) -> Result<()> {
        // Asked under the state lock, so the loop cannot miss it between
        // its check and its wait for data.
        let mut st = self.shared.state.lock().unwrap();
        let epoch = self.shared.request_epoch.fetch_add(1, Ordering::SeqCst) + 1;
        self.shared.cond.notify_all();
        while st.active && st.idle_epoch < epoch {
            st = self
                .shared
                .cond
                .wait_timeout(st, Duration::from_millis(50))
                .unwrap()
                .0;
        }
        match &st.error {
            Some(e) => Err(WeirError::QueryFailed(e.clone())),
            None if !st.active && st.idle_epoch < epoch => Err(WeirError::Stopped),
            None => Ok(()),
        }
    }
}

/// Starts the query `spec` describes on its own thread.
pub(crate) fn start(spec: QuerySpec) -> Result<StreamingQuery> {
    exec::start(spec)
}
