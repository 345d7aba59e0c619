//! Sources: where micro-batches come from. A source reports how far its data
//! goes ([`Source::latest_offset`]) and returns the rows of any logged range
//! again on request ([`Source::get_batch`]), so a batch re-run after a crash
//! sees exactly the same rows.

pub mod by_name;
pub mod decode;
pub mod file;
mod json_decoders;
mod json_record;
pub(crate) mod json_time;
#[cfg(feature = "kafka")]
pub mod kafka;
pub mod memory;
pub mod rate;
pub mod rate_micro_batch;
mod rate_partitions;
mod read_counts;
pub mod socket;

use std::collections::BTreeMap;
use std::path::PathBuf;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use crate::error::Result;

pub use by_name::{from_options, SourceOptions};
pub use decode::{Decode, DecodeExt, PayloadFormat};
pub use file::{FileFormat, FileSource};
#[cfg(feature = "kafka")]
pub use kafka::{KafkaAdmin, KafkaSource, StartingOffsets};
pub use memory::MemoryStream;
pub use rate::RateSource;
pub use rate_micro_batch::RateMicroBatchSource;
pub use socket::SocketSource;

/// A source position, as JSON (each source defines its shape; it is written
/// to the offsets log verbatim).
pub type Offset = serde_json::Value;

/// What a source gets when its query starts.
#[derive(Debug, Clone)]
pub struct SourceContext {
    /// A directory under the checkpoint for the source's own metadata.
    pub metadata_dir: PathBuf,
    /// Whether metadata writes are fsync'd.
    pub sync: bool,
    /// Spark's `defaultParallelism`: the session's worker threads
    /// (`weir.workerThreads`). A source that splits its batches into
    /// partitions splits them into this many when its options do not say
    /// (the rate sources' `numPartitions`).
    pub default_parallelism: usize,
}

/// Where a source keeps its own log, for sources that keep it on the
/// checkpoint's storage (a local directory or an `s3://` prefix), and how
/// it reaches object storage: what [`Source::open_on`] gets.
#[derive(Debug, Clone)]
pub struct SourceStorage {
    /// The source's directory under the checkpoint, `sources/<i>/`.
    pub metadata: crate::storage::Storage,
    /// The session's S3 settings (`spark.hadoop.fs.s3a.*`), for a source
    /// reading `s3://` (the environment's `AWS_*` fill what they leave
    /// unset).
    pub s3: crate::storage::S3Settings,
}

impl SourceStorage {
    /// The source's local metadata directory (`ctx.metadata_dir`) and no
    /// S3 settings: what [`Source::open`] gives a source that keeps its log
    /// through [`Source::open_on`].
    pub fn local(ctx: &SourceContext) -> SourceStorage {
        SourceStorage {
            metadata: crate::storage::Storage::local(&ctx.metadata_dir, ctx.sync),
            s3: crate::storage::S3Settings::default(),
        }
    }
}

/// The Kafka input the processes of a scale-out query divide among
/// themselves (what [`Source::shared_input`] reports).
#[derive(Debug, Clone, PartialEq)]
pub struct SharedInput {
    /// The cluster (`host:port,...`).
    pub bootstrap: String,
    /// The topics read.
    pub topics: Vec<String>,
    /// The source's `kafka.*` client settings (security, timeouts), for the
    /// group's own clients.
    pub kafka_conf: BTreeMap<String, String>,
    /// The source's `maxOffsetsPerTrigger`, for the sources scale-out adds
    /// (a repartition topic's).
    pub max_offsets_per_trigger: Option<u64>,
}

/// A streaming source.
pub trait Source: Send {
    /// The schema of the rows.
    fn schema(&self) -> SchemaRef;
    /// A short description for progress reports (Spark's `description`).
    fn description(&self) -> String;
    /// Called when the query starts, before [`Source::open`]: the
    /// session's clock, for a source whose data follows time (the rate
    /// source). Default: ignored.
    fn use_clock(&mut self, _clock: std::sync::Arc<dyn crate::clock::Clock>) {}
    /// Called once when the query starts, before any other call (but
    /// [`Source::use_clock`]).
    fn open(&mut self, _ctx: &SourceContext) -> Result<()> {
        Ok(())
    }
    /// Called once when the query starts, in place of [`Source::open`]:
    /// with the source's directory on the checkpoint's storage. A source
    /// that keeps its log there implements it (and
    /// [`Source::log_on_storage`]); the default calls `open`.
    fn open_on(&mut self, ctx: &SourceContext, _storage: &SourceStorage) -> Result<()> {
        self.open(ctx)
    }
    /// Whether the source runs with a checkpoint on object storage: it keeps
    /// no log of its own, or keeps it only through [`Source::open_on`]'s
    /// storage (default false: a source that may write under
    /// `SourceContext::metadata_dir` needs a local checkpoint).
    fn log_on_storage(&self) -> bool {
        false
    }
    /// The offset up to which data is available now, given that batches so
    /// far ended at `start`, within the source's per-trigger limit. `None`:
    /// no data has ever been available.
    fn latest_offset(&mut self, start: Option<&Offset>) -> Result<Option<Offset>>;
    /// Whether the next batch may be planned and read while the last one
    /// still runs (`weir.readAhead`): [`Source::latest_offset`] and
    /// [`Source::get_batch`] write nothing durable (no log of the source's
    /// own) and may be called again for the same batch (a read ahead the
    /// batch does not take is read again: what the source logs about it,
    /// such as lost Kafka offsets, it logs twice; totals count at
    /// [`Source::commit`]), and [`Source::metrics`] describes the last
    /// read (`latest_offset` then `get_batch`). The next batch's
    /// read then runs on a worker of the pool, the source moved there
    /// until it is done. Default false.
    fn reads_ahead(&self) -> bool {
        false
    }
    /// The rows in `(start, end]`.
    fn get_batch(&mut self, start: Option<&Offset>, end: &Offset) -> Result<Vec<RecordBatch>>;
    /// Batches up to `end` are committed: data before it may be released.
    fn commit(&mut self, _end: &Offset) -> Result<()> {
        Ok(())
    }
    /// For the available-now trigger: fix the target at what is available now;
    /// `latest_offset` must not go past it afterwards.
    fn prepare_for_available_now(&mut self) -> Result<()> {
        Ok(())
    }
    /// Source-specific metrics of the batch just run, reported in progress
    /// as Spark's `SourceProgress.metrics` (e.g. the Kafka source's
    /// `maxOffsetsBehindLatest`, a decoder's `malformedRecords`).
    fn metrics(&self) -> BTreeMap<String, String> {
        BTreeMap::new()
    }
    /// The query is stopping.
    fn stop(&mut self) {}
    /// Scale-out: the Kafka topics whose partitions the processes of a
    /// group divide among themselves. The default: this source cannot be
    /// divided, with the reason.
    fn shared_input(&self) -> Result<SharedInput> {
        Err(crate::error::WeirError::Config(format!(
            "scale-out divides a Kafka source's partitions among processes; {} cannot be divided: read the input from Kafka (subscribe), or run the query in one process",
            self.description()
        )))
    }
    /// Scale-out: a copy of this source, not yet opened, reading only
    /// `partitions` (topic, partition): one task's share of
    /// [`Source::shared_input`].
    fn for_partitions(&self, _partitions: &[(String, i32)]) -> Result<BoxSource> {
        self.shared_input()?;
        Err(crate::error::WeirError::Config(format!(
            "{} cannot be divided among the tasks of a scale-out query",
            self.description()
        )))
    }
}

/// A boxed source, as the builder takes it.
pub type BoxSource = Box<dyn Source>;

impl<S: Source + 'static> From<S> for BoxSource {
    fn from(s: S) -> BoxSource {
        Box::new(s)
    }
}
