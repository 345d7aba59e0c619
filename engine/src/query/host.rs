//! [`QueryHost`]: what a session lends the queries it starts (its settings,
//! worker pool, memory tables and listeners) and where they report (the
//! registry of the session's queries, and their ends). The executor and
//! scale-out get this, never the user-facing `Session`, which wraps it.

use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::StreamingQuery;
use crate::config::SessionConfig;
use crate::error::{Result, WeirError};
use crate::progress::QueryListener;
use crate::sink::MemoryTables;

/// A session's side of its queries.
pub(crate) struct QueryHost {
    conf: SessionConfig,
    /// The worker pool (built on first use, shared by the session's queries).
    workers: OnceLock<Arc<rayon::ThreadPool>>,
    /// The session's queries, running or ended (until `reset_terminated`),
    /// in start order (the Streaming UI lists them).
    pub(crate) queries: Mutex<Vec<StreamingQuery>>,
    /// The memory sinks' tables, by query name.
    memory_tables: MemoryTables,
    /// Told of every query started after they were added.
    listeners: Mutex<Vec<Arc<dyn QueryListener>>>,
    /// How many queries have ended, and a wake-up for those waiting on it.
    terminated: (Mutex<u64>, Condvar),
}

impl QueryHost {
    /// A host with these settings and no queries yet.
    pub(crate) fn new(conf: SessionConfig) -> QueryHost {
        QueryHost {
            conf,
            workers: OnceLock::new(),
            queries: Mutex::new(Vec::new()),
            memory_tables: MemoryTables::default(),
            listeners: Mutex::new(Vec::new()),
            terminated: (Mutex::new(0), Condvar::new()),
        }
    }

    /// The session's settings.
    pub(crate) fn conf(&self) -> &SessionConfig {
        &self.conf
    }

    /// The pool a micro-batch's tasks run on (`weir.workerThreads` threads),
    /// shared by the session's queries.
    pub(crate) fn workers(&self) -> Result<Arc<rayon::ThreadPool>> {
        if let Some(p) = self.workers.get() {
            return Ok(p.clone());
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(self.conf.worker_threads.max(1))
            .thread_name(|i| format!("weir-worker-{i}"))
            .build()
            .map_err(|e| WeirError::Config(format!("cannot start the worker pool: {e}")))?;
        Ok(self.workers.get_or_init(|| Arc::new(pool)).clone())
    }

    /// The memory sinks' tables.
    pub(crate) fn memory_tables(&self) -> &MemoryTables {
        &self.memory_tables
    }

    /// The listeners a query starting now is told of.
    pub(crate) fn listeners(&self) -> Vec<Arc<dyn QueryListener>> {
        self.listeners.lock().unwrap().clone()
    }

    /// Adds a listener for every query started after this call.
    pub(crate) fn add_listener(&self, l: Arc<dyn QueryListener>) {
        self.listeners.lock().unwrap().push(l);
    }

    /// Makes `query` one of the session's queries.
    pub(crate) fn register(&self, query: StreamingQuery) {
        self.queries.lock().unwrap().push(query);
    }

    /// The session's queries still running.
    pub(crate) fn active(&self) -> Vec<StreamingQuery> {
        self.queries
            .lock()
            .unwrap()
            .iter()
            .filter(|q| q.is_active())
            .cloned()
            .collect()
    }

    /// Tells whoever waits in [`Self::await_any_termination`] that a query
    /// of the session ended.
    pub(crate) fn notify_terminated(&self) {
        let (lock, cv) = &self.terminated;
        *lock.lock().unwrap() += 1;
        cv.notify_all();
    }

    /// Waits until any query of the session ends (or `timeout` passes).
    /// Returns the failed query's error if it failed; `Ok(false)` on timeout.
    pub(crate) fn await_any_termination(&self, timeout: Option<Duration>) -> Result<bool> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let (lock, cv) = &self.terminated;
        let mut n = lock.lock().unwrap();
        let start = *n;
        while *n == start {
            let ended = self
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
    pub(crate) fn reset_terminated(&self) {
        self.queries.lock().unwrap().retain(|q| q.is_active());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::QueryShared;

    fn query(id: &str) -> StreamingQuery {
        StreamingQuery {
            shared: Arc::new(QueryShared::new(
                id.into(),
                None,
                String::new(),
                weir_plan::OutputMode::Append,
                "Initializing sources".into(),
            )),
        }
    }

    fn end(q: &StreamingQuery, error: Option<WeirError>) {
        let mut st = q.shared.state.lock().unwrap();
        st.active = false;
        st.error = error.map(Arc::new);
    }

    #[test]
    fn the_host_tracks_its_queries_until_ended_ones_are_forgotten() {
        let host = QueryHost::new(SessionConfig::default());
        let (a, b) = (query("a"), query("b"));
        host.register(a.clone());
        host.register(b.clone());
        end(&a, None);
        let active: Vec<String> = host.active().iter().map(|q| q.id().into()).collect();
        assert_eq!(active, ["b"]);
        assert_eq!(host.queries.lock().unwrap().len(), 2);
        host.reset_terminated();
        assert_eq!(host.queries.lock().unwrap().len(), 1);
    }

    #[test]
    fn awaiting_any_termination_returns_the_ended_querys_error_or_times_out() {
        let host = QueryHost::new(SessionConfig::default());
        let q = query("q");
        host.register(q.clone());
        let waited = host.await_any_termination(Some(Duration::from_millis(20)));
        assert!(!waited.unwrap(), "no query ended, so the wait timed out");
        end(&q, Some(WeirError::Config("the sink went away".into())));
        host.notify_terminated();
        let err = host
            .await_any_termination(Some(Duration::from_secs(5)))
            .unwrap_err()
            .to_string();
        assert!(err.contains("the sink went away"), "{err}");
    }

    #[test]
    fn the_worker_pool_has_the_configured_threads_and_is_shared() {
        let host = QueryHost::new(SessionConfig {
            worker_threads: 3,
            ..SessionConfig::default()
        });
        let pool = host.workers().unwrap();
        assert_eq!(pool.current_num_threads(), 3);
        assert!(Arc::ptr_eq(&pool, &host.workers().unwrap()));
    }
}
