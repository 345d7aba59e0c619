//! Query lifecycle listeners (Spark's `StreamingQueryListener`).

use super::StreamingQueryProgress;

/// A query started.
#[derive(Debug, Clone)]
pub struct QueryStartedEvent {
    /// Query id.
    pub id: String,
    /// Run id.
    pub run_id: String,
    /// Query name.
    pub name: Option<String>,
}

/// A query ended; `exception` is the error that stopped it, if any.
#[derive(Debug, Clone)]
pub struct QueryTerminatedEvent {
    /// Query id.
    pub id: String,
    /// Run id.
    pub run_id: String,
    /// The failure, if the query failed.
    pub exception: Option<String>,
}

/// Receives query events. Called on the query's thread: keep it quick.
pub trait QueryListener: Send + Sync {
    /// The query started.
    fn on_query_started(&self, _event: &QueryStartedEvent) {}
    /// A batch finished.
    fn on_query_progress(&self, _progress: &StreamingQueryProgress) {}
    /// The query found no new data to process (at most once per idle period).
    fn on_query_idle(&self, _id: &str, _run_id: &str) {}
    /// The query ended.
    fn on_query_terminated(&self, _event: &QueryTerminatedEvent) {}
}
