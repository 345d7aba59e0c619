//! Sinks: where each micro-batch's result rows go. A sink must tolerate a
//! batch id it has seen before (a re-run after a crash) without duplicating
//! output where it can (memory, file, foreach and foreach_batch get the
//! batch id).
//!
//! A sink is one file here; [`from_options`] builds the sinks of the
//! connector table by Spark's format name (`by_name.rs`, one line each).

mod by_name;
pub mod console;
#[cfg(any(feature = "kafka", feature = "postgres", feature = "redis"))]
mod exactly_once;
pub mod file;
pub mod foreach;
pub mod foreach_batch;
#[cfg(feature = "kafka")]
pub mod kafka;
pub mod memory;
pub mod noop;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis;

use std::path::PathBuf;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use weir_plan::OutputMode;

use crate::error::Result;

pub use crate::source::FileFormat;
pub use by_name::{from_options, SinkOptions};
pub use console::ConsoleSink;
pub use file::FileSink;
pub use foreach::{row_fn, ForeachSink, ForeachWriter, RowFn};
pub use foreach_batch::ForeachBatchSink;
#[cfg(feature = "kafka")]
pub use kafka::{DeliveryGuarantee, KafkaSink};
pub use memory::{MemorySink, MemoryTable, MemoryTables};
pub use noop::NoopSink;
#[cfg(feature = "postgres")]
pub use postgres::PostgresSink;
#[cfg(feature = "redis")]
pub use redis::RedisSink;

/// What a sink gets when its query starts.
#[derive(Debug, Clone)]
pub struct SinkContext {
    /// The query's name.
    pub query_name: Option<String>,
    /// The checkpoint directory (for an `s3://` checkpoint, its URL as a
    /// path: read and write through [`SinkContext::checkpoint`] instead).
    pub checkpoint_dir: PathBuf,
    /// The query's id (the checkpoint's `metadata`, stable across
    /// restarts): what exactly-once sinks key their batch markers by.
    pub query_id: String,
    /// The checkpoint's root on its storage (a local directory or an
    /// `s3://` prefix), for a sink that keeps a file of its own under
    /// `sinks/`.
    pub checkpoint: crate::storage::Storage,
    /// The output mode.
    pub output_mode: OutputMode,
    /// The result schema.
    pub schema: SchemaRef,
    /// The session's memory tables (for the memory sink).
    pub memory_tables: MemoryTables,
    /// Whether files the sink writes are fsync'd (the session's
    /// `weir.checkpoint.fsync`).
    pub sync: bool,
    /// The session's S3 settings (`spark.hadoop.fs.s3a.*`), for a sink
    /// writing to `s3://` (the environment's `AWS_*` fill what they leave
    /// unset).
    pub s3: crate::storage::S3Settings,
}

#[cfg(test)]
impl SinkContext {
    /// A context for a sink's unit tests: query `name` (id `query-id`) in
    /// `mode` with output `schema`, a checkpoint in a fresh temporary directory.
    pub(crate) fn for_tests(
        name: Option<&str>,
        mode: OutputMode,
        schema: SchemaRef,
    ) -> SinkContext {
        let dir = std::env::temp_dir().join(format!("weir-sink-test-{}", uuid::Uuid::new_v4()));
        SinkContext {
            query_name: name.map(str::to_string),
            checkpoint_dir: dir.clone(),
            query_id: "query-id".into(),
            checkpoint: crate::storage::Storage::local(dir, false),
            output_mode: mode,
            schema,
            memory_tables: MemoryTables::default(),
            sync: false,
            s3: crate::storage::S3Settings::default(),
        }
    }
}

/// A streaming sink.
pub trait Sink: Send {
    /// A short description for progress reports.
    fn description(&self) -> String;
    /// Which kind of sink this is (the streaming rules check sink/mode combinations).
    fn kind(&self) -> weir_plan::SinkKind {
        weir_plan::SinkKind::Other
    }
    /// Whether the sink reads or writes files under
    /// [`SinkContext::checkpoint_dir`] itself, which only a local checkpoint
    /// has: such a sink is refused with a checkpoint on object storage. A
    /// sink that keeps its files through [`SinkContext::checkpoint`] (and
    /// takes the query id from [`SinkContext::query_id`]) runs on either.
    /// Default false.
    fn needs_local_checkpoint(&self) -> bool {
        false
    }
    /// Called once when the query starts; reject unsupported modes here.
    fn open(&mut self, _ctx: &SinkContext) -> Result<()> {
        Ok(())
    }
    /// Writes batch `batch_id`'s rows.
    fn add_batch(&mut self, batch_id: i64, batches: &[RecordBatch]) -> Result<()>;
    /// Scale-out: a copy of this sink, not yet opened, for task `task` of a
    /// query divided among processes, written in output mode `mode`. It is
    /// opened with the task's own query id (its checkpoint's), so
    /// exactly-once markers are kept per task. The default refuses, naming
    /// the sink: a sink that cannot keep its promise when many tasks write
    /// at once must not be divided.
    fn for_task(&self, _task: &str, _mode: OutputMode) -> Result<BoxSink> {
        Err(crate::error::WeirError::Config(format!(
            "{} cannot be divided among the tasks of a scale-out query (supported: Kafka, PostgreSQL, Redis with a key prefix, console); run the query in one process or write to Kafka",
            self.description()
        )))
    }
}

/// A boxed sink, as the builder takes it.
pub type BoxSink = Box<dyn Sink>;

impl<S: Sink + 'static> From<S> for BoxSink {
    fn from(s: S) -> BoxSink {
        Box::new(s)
    }
}
