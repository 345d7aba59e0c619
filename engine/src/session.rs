//! The session (like `SparkSession`): the entry point that starts streams
//! (`read_stream`, beside the `DataStream` it makes in `dataset.rs`) and
//! tracks their queries. Its settings are [`SessionConfig`] (`config.rs`);
//! what its queries run on and report to is the query host it wraps
//! (`query/host.rs`).

use std::sync::Arc;
use std::time::Duration;

use crate::error::{Result, WeirError};
use crate::progress::QueryListener;
use crate::query::{QueryHost, StreamingQuery};
use crate::sink::MemoryTable;
use crate::state::StateStoreProvider;

pub use crate::config::SessionConfig;
pub use crate::cores::available_cores;

/// The entry point: create streams, run and track queries.
#[derive(Clone)]
pub struct Session {
    pub(crate) inner: Arc<QueryHost>,
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
            inner: Arc::new(QueryHost::new(conf)),
        };
        if session.conf().stop_on_signal {
            crate::signals::watch(&session.inner);
        }
        session
    }

    /// The settings.
    pub fn conf(&self) -> &SessionConfig {
        self.inner.conf()
    }

    /// The queries still running.
    pub fn active(&self) -> Vec<StreamingQuery> {
        self.inner.active()
    }

    /// The memory table a memory sink registered under `name`.
    pub fn memory_table(&self, name: &str) -> Option<MemoryTable> {
        self.inner.memory_tables().get(name)
    }

    /// Adds a listener for every query started after this call.
    pub fn add_listener(&self, l: Arc<dyn QueryListener>) {
        self.inner.add_listener(l);
    }

    /// Waits until any query of the session ends (or `timeout` passes).
    /// Returns the failed query's error if it failed; `Ok(false)` on timeout.
    pub fn await_any_termination(&self, timeout: Option<Duration>) -> Result<bool> {
        self.inner.await_any_termination(timeout)
    }

    /// Forgets queries that have ended (so `await_any_termination` waits for new ones).
    pub fn reset_terminated(&self) {
        self.inner.reset_terminated();
    }
}
