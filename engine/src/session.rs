//! The session (like `SparkSession`): configuration, the registry of active
//! queries, memory tables and listeners.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use weir_plan::WatermarkPolicy;

use crate::clock::{Clock, SystemClock};
use crate::dataset::DataStream;
use crate::error::{Result, WeirError};
use crate::progress::QueryListener;
use crate::query::StreamingQuery;
use crate::sink::{MemoryTable, MemoryTables};
use crate::source::BoxSource;
use crate::state::{MemoryStateProvider, StateStoreProvider};

pub use crate::cores::available_cores;

/// Session settings. Where Spark has a setting, the Spark key is given.
#[derive(Clone)]
pub struct SessionConfig {
    /// `spark.sql.shuffle.partitions`: state partitions per stateful operator
    /// (each runs as its own task of a micro-batch). Unset (`None`): a new
    /// checkpoint takes the number of available cores (Spark's default of 200
    /// suits a cluster, not one process) and an existing checkpoint keeps the
    /// count it recorded; set, it must match an existing checkpoint's.
    pub shuffle_partitions: Option<usize>,
    /// `weir.workerThreads`: threads of the pool a micro-batch's tasks run
    /// on (default: the available cores).
    pub worker_threads: usize,
    /// `spark.sql.streaming.noDataMicroBatches.enabled` (default true).
    pub no_data_batches: bool,
    /// `spark.sql.streaming.multipleWatermarkPolicy` (default min).
    pub watermark_policy: WatermarkPolicy,
    /// `spark.sql.streaming.minBatchesToRetain` (default 100).
    pub min_batches_to_retain: u64,
    /// `spark.sql.streaming.numRecentProgressUpdates` (default 100).
    pub num_recent_progress_updates: usize,
    /// `spark.sql.streaming.pollingDelay`: idle wait between checks for data (default 10 ms).
    pub polling_delay: Duration,
    /// `weir.checkpoint.fsync`: fsync checkpoint files (default true).
    pub fsync_checkpoint: bool,
    /// `spark.sql.streaming.stateStore.providerClass`: the state store.
    pub state_store: Arc<dyn StateStoreProvider>,
    /// `spark.ui.enabled` (default true): false starts no Streaming UI
    /// where weir would start one (`weir::ui::UiServer::start_if_enabled`).
    pub ui_enabled: bool,
    /// `spark.ui.port` (default 4040): the Streaming UI's first port to try.
    pub ui_port: u16,
    /// `weir.ui.allowedHosts` (comma-separated, default none): `Host` names
    /// the Streaming UI answers besides `localhost`, `127.0.0.1`, `[::1]` and its
    /// bound address (`name` for its port, `name:port`, or `*` for any).
    pub ui_allowed_hosts: Vec<String>,
    /// `spark.sql.streaming.weir.adminToken` (default none): the secret the
    /// Streaming UI's admin endpoints (`POST .../queries/{id}/stop`) want as
    /// `Authorization: Bearer <token>`; unset or empty, they are off.
    pub admin_token: Option<String>,
    /// `spark.sql.streaming.weir.stopOnSignal` (default true): SIGTERM and
    /// SIGINT stop the session's queries gracefully (see [`crate::signals`]).
    pub stop_on_signal: bool,
    /// `spark.sql.streaming.stopTimeout` (default 0: wait as long as it
    /// takes, as Spark): how long a signal waits for the queries to stop
    /// before the process is ended anyway.
    pub stop_timeout: Duration,
    /// S3 settings with Spark's Hadoop names (`spark.hadoop.fs.s3a.endpoint`,
    /// `.access.key`, `.secret.key`, `.endpoint.region`, ...; see
    /// [`crate::storage::S3_SETTINGS`]), over the environment's `AWS_*`, for
    /// checkpoints on `s3://`.
    pub s3: crate::storage::S3Settings,
    /// The clock the session's queries read time from: processing-time
    /// triggers, batch timestamps and the rate source (default: the
    /// system clock; a [`crate::clock::ManualClock`] in tests).
    pub clock: Arc<dyn Clock>,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            shuffle_partitions: None,
            worker_threads: available_cores(),
            no_data_batches: true,
            watermark_policy: WatermarkPolicy::Min,
            min_batches_to_retain: 100,
            num_recent_progress_updates: 100,
            polling_delay: Duration::from_millis(10),
            fsync_checkpoint: true,
            state_store: Arc::new(MemoryStateProvider),
            ui_enabled: true,
            ui_port: 4040,
            ui_allowed_hosts: Vec::new(),
            admin_token: None,
            stop_on_signal: true,
            stop_timeout: Duration::ZERO,
            s3: crate::storage::S3Settings::default(),
            clock: Arc::new(SystemClock),
        }
    }
}

impl std::fmt::Debug for SessionConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionConfig")
            .field("shuffle_partitions", &self.shuffle_partitions)
            .field("worker_threads", &self.worker_threads)
            .field("no_data_batches", &self.no_data_batches)
            .field("watermark_policy", &self.watermark_policy)
            .field("min_batches_to_retain", &self.min_batches_to_retain)
            .field("fsync_checkpoint", &self.fsync_checkpoint)
            .field("state_store", &self.state_store.name())
            .field("ui_enabled", &self.ui_enabled)
            .field("ui_port", &self.ui_port)
            .field("ui_allowed_hosts", &self.ui_allowed_hosts)
            .field("admin_token", &self.admin_token.as_ref().map(|_| "(set)"))
            .field("stop_on_signal", &self.stop_on_signal)
            .field("stop_timeout", &self.stop_timeout)
            .field("s3", &self.s3)
            .field("clock", &self.clock.name())
            .finish()
    }
}

impl SessionConfig {
    /// Sets a setting by its Spark (or `weir.`) key.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let bad = || WeirError::Config(format!("invalid value `{value}` for `{key}`"));
        let flag = || match value.to_ascii_lowercase().as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(bad()),
        };
        match key {
            "spark.sql.shuffle.partitions" => {
                let n: usize = value.trim().parse().map_err(|_| bad())?;
                if n == 0 {
                    return Err(bad());
                }
                self.shuffle_partitions = Some(n)
            }
            "weir.workerThreads" => {
                let n: usize = value.trim().parse().map_err(|_| bad())?;
                if n == 0 {
                    return Err(bad());
                }
                self.worker_threads = n
            }
            "spark.sql.streaming.noDataMicroBatches.enabled" => self.no_data_batches = flag()?,
            "spark.sql.streaming.multipleWatermarkPolicy" => {
                self.watermark_policy = match value.to_ascii_lowercase().as_str() {
                    "min" => WatermarkPolicy::Min,
                    "max" => WatermarkPolicy::Max,
                    _ => return Err(bad()),
                }
            }
            "spark.sql.streaming.minBatchesToRetain" => {
                self.min_batches_to_retain = value.parse().map_err(|_| bad())?
            }
            "spark.sql.streaming.numRecentProgressUpdates" => {
                self.num_recent_progress_updates = value.parse().map_err(|_| bad())?
            }
            "spark.sql.streaming.pollingDelay" => {
                self.polling_delay = Duration::from_millis(
                    weir_plan::parse_duration_ms(value).map_err(|_| bad())? as u64,
                )
            }
            "weir.checkpoint.fsync" => self.fsync_checkpoint = flag()?,
            "spark.ui.enabled" => self.ui_enabled = flag()?,
            "spark.ui.port" => self.ui_port = value.trim().parse().map_err(|_| bad())?,
            "weir.ui.allowedHosts" => {
                self.ui_allowed_hosts = value
                    .split(',')
                    .map(str::trim)
                    .filter(|h| !h.is_empty())
                    .map(str::to_string)
                    .collect()
            }
            "spark.sql.streaming.weir.adminToken" => {
                self.admin_token = Some(value.trim().to_string()).filter(|t| !t.is_empty())
            }
            "spark.sql.streaming.weir.stopOnSignal" => self.stop_on_signal = flag()?,
            "spark.sql.streaming.stopTimeout" => {
                // Spark's value is milliseconds; a unit (`30s`) is taken too.
                // Zero or negative: wait as long as it takes.
                let ms = match value.trim().parse::<i64>() {
                    Ok(ms) => ms,
                    Err(_) => weir_plan::parse_duration_ms(value).map_err(|_| bad())?,
                };
                self.stop_timeout = Duration::from_millis(ms.max(0) as u64)
            }
            "spark.sql.streaming.stateStore.providerClass" => match value {
                "memory"
                | "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider" => {
                    self.state_store = Arc::new(MemoryStateProvider)
                }
                #[cfg(feature = "rocksdb")]
                "rocksdb"
                | "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider" => {
                    self.state_store = Arc::new(crate::state::RocksDbStateProvider)
                }
                #[cfg(not(feature = "rocksdb"))]
                "rocksdb"
                | "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider" => {
                    return Err(WeirError::Config(
                        "the RocksDB state store needs weir built with the `rocksdb` feature"
                            .into(),
                    ))
                }
                _ => {
                    return Err(WeirError::Config(format!(
                        "unknown state store provider `{value}` (available: memory, rocksdb)"
                    )))
                }
            },
            k if k.starts_with("spark.hadoop.fs.s3a.") || k.starts_with("weir.s3.") => {
                if !self.s3.set(k, value)? {
                    return Err(WeirError::Config(format!(
                        "unknown setting `{k}` (S3 settings: {})",
                        crate::storage::S3_SETTINGS
                            .iter()
                            .map(|(name, _)| *name)
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                }
            }
            _ => return Err(WeirError::Config(format!("unknown setting `{key}`"))),
        }
        Ok(())
    }
}

pub(crate) struct SessionInner {
    pub(crate) conf: SessionConfig,
    /// The worker pool (built on first use, shared by the session's queries).
    pub(crate) workers: std::sync::OnceLock<Arc<rayon::ThreadPool>>,
    pub(crate) queries: Mutex<Vec<StreamingQuery>>,
    pub(crate) memory_tables: MemoryTables,
    pub(crate) listeners: Mutex<Vec<Arc<dyn QueryListener>>>,
    pub(crate) terminated: (Mutex<u64>, Condvar),
}

/// The entry point: create streams, run and track queries.
#[derive(Clone)]
pub struct Session {
    pub(crate) inner: Arc<SessionInner>,
}

impl Default for Session {
    fn default() -> Self {
        Session::new()
    }
}

/// Builds a [`Session`].
#[derive(Default)]
pub struct SessionBuilder {
    conf: SessionConfig,
    error: Option<WeirError>,
}

impl SessionBuilder {
    /// Sets a setting by its Spark key (e.g. `spark.sql.shuffle.partitions`).
    pub fn config(mut self, key: &str, value: &str) -> Self {
        if let Err(e) = self.conf.set(key, value) {
            self.error.get_or_insert(e);
        }
        self
    }

    /// Sets the state store provider.
    pub fn state_store(mut self, p: Arc<dyn StateStoreProvider>) -> Self {
        self.conf.state_store = p;
        self
    }

    /// The session, or the first invalid setting.
    pub fn build(self) -> Result<Session> {
        match self.error {
            Some(e) => Err(e),
            None => Ok(Session::with_config(self.conf)),
        }
    }
}

impl Session {
    /// A session with default settings.
    pub fn new() -> Session {
        Session::with_config(SessionConfig::default())
    }

    /// A builder.
    pub fn builder() -> SessionBuilder {
        SessionBuilder::default()
    }

    /// A session with these settings.
    pub fn with_config(conf: SessionConfig) -> Session {
        let session = Session {
            inner: Arc::new(SessionInner {
                conf,
                workers: std::sync::OnceLock::new(),
                queries: Mutex::new(Vec::new()),
                memory_tables: MemoryTables::default(),
                listeners: Mutex::new(Vec::new()),
                terminated: (Mutex::new(0), Condvar::new()),
            }),
        };
        if session.inner.conf.stop_on_signal {
            crate::signals::watch(&session);
        }
        session
    }

    /// The pool a micro-batch's tasks run on (`weir.workerThreads` threads),
    /// shared by the session's queries.
    pub(crate) fn workers(&self) -> Result<Arc<rayon::ThreadPool>> {
        if let Some(p) = self.inner.workers.get() {
            return Ok(p.clone());
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(self.inner.conf.worker_threads.max(1))
            .thread_name(|i| format!("weir-worker-{i}"))
            .build()
            .map_err(|e| WeirError::Config(format!("cannot start the worker pool: {e}")))?;
        Ok(self.inner.workers.get_or_init(|| Arc::new(pool)).clone())
    }

    /// The settings.
    pub fn conf(&self) -> &SessionConfig {
        &self.inner.conf
    }

    /// A stream reading `source` (Spark's `readStream`).
    pub fn read_stream(&self, source: impl Into<BoxSource>) -> DataStream {
        DataStream::new(self.clone(), source.into())
    }

    /// The queries still running.
    pub fn active(&self) -> Vec<StreamingQuery> {
        self.inner
            .queries
            .lock()
            .unwrap()
            .iter()
            .filter(|q| q.is_active())
            .cloned()
            .collect()
    }

    /// The memory table a memory sink registered under `name`.
    pub fn memory_table(&self, name: &str) -> Option<MemoryTable> {
        self.inner.memory_tables.get(name)
    }

    /// Adds a listener for every query started after this call.
    pub fn add_listener(&self, l: Arc<dyn QueryListener>) {
        self.inner.listeners.lock().unwrap().push(l);
    }

    /// Waits until any query of the session ends (or `timeout` passes).
    /// Returns the failed query's error if it failed; `Ok(false)` on timeout.
    pub fn await_any_termination(&self, timeout: Option<Duration>) -> Result<bool> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let (lock, cv) = &self.inner.terminated;
        let mut n = lock.lock().unwrap();
        let start = *n;
        while *n == start {
            let ended = self
                .inner
                .queries
                .lock()
                .unwrap()
                .iter()
                .find(|q| !q.is_active())
                .cloned();
            if let Some(q) = ended {
                return q.error_result().map(|_| true);
            }
            match deadline {
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Ok(false);
                    }
                    n = cv.wait_timeout(n, d - now).unwrap().0;
                }
                None => n = cv.wait(n).unwrap(),
            }
        }
        Ok(true)
    }

    /// Forgets queries that have ended (so `await_any_termination` waits for new ones).
    pub fn reset_terminated(&self) {
        self.inner.queries.lock().unwrap().retain(|q| q.is_active());
    }

    pub(crate) fn notify_terminated(&self) {
        let (lock, cv) = &self.inner.terminated;
        *lock.lock().unwrap() += 1;
        cv.notify_all();
    }
}
