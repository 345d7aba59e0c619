//! The Kafka source (Spark's `kafka` stream format), on librdkafka.
//!
//! Rows have Spark's schema: `key: binary, value: binary, topic: string,
//! partition: int, offset: bigint, timestamp: timestamp, timestampType: int`
//! and, with `includeHeaders`, `headers: array<struct<key: string, value: binary>>`.
//! Decode `value` into typed columns with [`crate::source::DecodeExt::from_json`].
//!
//! The engine assigns partitions and seeks itself, as Spark does: a batch's
//! offsets are the next offset to read per topic-partition, written to the
//! offsets log in Spark's JSON (`{"clicks":{"0":42,"1":40}}`), so a restart
//! reads exactly the logged ranges again. The offsets a new query starts from
//! (`startingOffsets`, resolved when the query first opens) are kept under the
//! checkpoint (`sources/<i>/initial-offsets`, written once, on the
//! checkpoint's storage: a local directory or an `s3://` prefix), as Spark
//! keeps them.
//!
//! The options, their defaults and the rules their values must follow are
//! weir-plan's connector table ([`weir_plan::connectors`]), which
//! `stream_query!` checks a declared `kafka(...)` source with too: a value
//! one refuses the other refuses, with the same message (an empty `assign`,
//! which Spark reads as assigning nothing, is refused by both). Spark
//! options weir does not have (`minOffsetsPerTrigger`, `maxTriggerDelay`)
//! are refused by name, saying why. Reading them is `kafka/options.rs`;
//! which partitions are read and where a new query starts in each is
//! `kafka/discovery.rs`; offsets as Spark logs them and the per-batch cap
//! are `kafka/offsets.rs`.
//!
//! | option (Spark's name) | builder | meaning |
//! |---|---|---|
//! | `kafka.bootstrap.servers` | [`KafkaSource::new`] | `host:port,...` (required) |
//! | `subscribe` | [`KafkaSource::subscribe`] | comma-separated topics |
//! | `subscribePattern` | [`KafkaSource::subscribe_pattern`] | a regex matched against whole topic names; topics created later are picked up |
//! | `assign` | [`KafkaSource::assign`] | `{"topicA":[0,1]}` |
//! | `startingOffsets` | [`KafkaSource::starting_offsets`] | `earliest`, `latest` (default) or `{"t":{"0":23,"1":-2}}` (-2 earliest, -1 latest; every partition) |
//! | `startingTimestamp` | [`KafkaSource::starting_timestamp`] | epoch ms: each partition starts at its first record at or after it |
//! | `startingOffsetsByTimestamp` | `option` | `{"t":{"0":1700000000000}}` |
//! | `startingOffsetsByTimestampStrategy` | `option` | `error` (default) or `latest` when no record is that new |
//! | `maxOffsetsPerTrigger` | [`KafkaSource::max_offsets_per_trigger`] | a cap per batch, split across partitions in proportion to lag (default 1,000,000, unlike Spark: see below) |
//! | `minPartitions` | [`KafkaSource::min_partitions`] | accepted; weir reads each partition of a batch whole (partitions in parallel) and does not split partitions |
//! | `failOnDataLoss` | [`KafkaSource::fail_on_data_loss`] | `true` (default): fail naming topic, partition and lost range; `false`: skip, warn and count (`lostOffsets` metric) |
//! | `includeHeaders` | [`KafkaSource::include_headers`] | add the `headers` column |
//! | `kafkaConsumer.pollTimeoutMs` | `option` | how long a read may make no progress (default 120000) |
//! | `group.id`, `kafka.group.id` | [`KafkaSource::group_id`] | beyond Spark: commit each batch's end offsets to this consumer group, so lag shows in Kafka's tools |
//! | `groupIdPrefix` | `option` | prefix of the generated group id when none is set |
//! | `kafka.*` | `option` | passed to librdkafka (e.g. `kafka.isolation.level`) |
//!
//! The `headers` column's type (`list<struct<key, value>>`) has no name in
//! weir's plan types yet: it reaches sinks and `foreach_batch` as it is, but
//! SQL expressions (`filter`, `select`) cannot name it.
//!
//! New partitions (of a subscribed topic, or of a topic that starts matching
//! the pattern) are read from offset 0. Where weir differs from Spark: the
//! consumer's `isolation.level` is librdkafka's default, `read_committed`
//! (Spark's Java consumer reads uncommitted), so aborted transactions are
//! never read; set `kafka.isolation.level=read_uncommitted` for Spark's.
//!
//! Progress reports carry Spark's Kafka metrics (`minOffsetsBehindLatest`,
//! `maxOffsetsBehindLatest`, `avgOffsetsBehindLatest`) and weir's `lostOffsets`
//! (offsets skipped as lost in this batch with `failOnDataLoss=false`),
//! `invalidTimestamps` and `invalidHeaderKeys`.
//!
//! ## Bad records and bounded batches
//!
//! No record can stop a query. A record timestamp that does not fit a
//! microsecond timestamp (`ms * 1000` overflows) becomes a null `timestamp`
//! (its `timestampType` kept); a header key that is not UTF-8 is decoded
//! lossily (invalid bytes become U+FFFD). Such records are kept and counted
//! in the batch's `invalidTimestamps` and `invalidHeaderKeys` metrics.
//!
//! A batch is read into memory whole, so it is bounded by default: without
//! `maxOffsetsPerTrigger` a batch reads at most
//! [`DEFAULT_MAX_OFFSETS_PER_TRIGGER`] (1,000,000) offsets, split across
//! partitions like an explicit cap. Spark has no default cap (its executors
//! stream each partition's records through the plan); weir holds a batch's
//! rows in one process, and `startingOffsets=earliest` on a large topic
//! would otherwise exhaust memory in the first batch. The backlog is read
//! over several batches instead, every record exactly once; the
//! available-now trigger reads the same way until it reaches its target.
//!
//! ## Reading a batch
//!
//! Each partition is read by its own consumer, kept from one batch to the
//! next (Spark's executors cache one consumer per topic-partition the same
//! way). A batch's partitions are read in parallel (rayon tasks); a
//! batch that starts where the partition's last one ended continues without
//! assigning or seeking again, on records librdkafka prefetched meanwhile
//! (up to 5,000 records or 2 MB per partition: `kafka.queued.min.messages`,
//! `kafka.queued.max.messages.kbytes`; up to 1 MB a fetch,
//! `kafka.max.partition.fetch.bytes`); a read
//! returns as soon as every partition reached the batch's end offset. A
//! partition whose batch does not continue the last one (the first batch, a
//! replay after a restart, offsets skipped as lost) is assigned at the
//! batch's start first. Either way a batch reads exactly the records of its
//! logged ranges, each once, so a replayed batch reads the same records.

pub mod admin;
mod discovery;
mod fetch;
pub mod offsets;
mod options;
mod queue;
mod reader;
pub(crate) mod retry;
mod rows;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{ClientConfig, Offset as KafkaOffset, TopicPartitionList};

pub use admin::KafkaAdmin;
pub use offsets::{PartitionOffsets, TopicPartition};
/// The rdkafka crate weir's Kafka connectors are built on (for custom clients).
pub use rdkafka;
pub use rows::{headers_type, kafka_schema};

use options::{KafkaOptions, Strategy};
use weir_plan::connectors;

use super::{BoxSource, Offset, Source, SourceContext, SourceStorage};
use crate::error::{Result, WeirError};
use crate::storage::Created;

/// Where a new query starts reading (Spark's `startingOffsets` and friends).
#[derive(Debug, Clone, PartialEq)]
pub enum StartingOffsets {
    /// Each partition's earliest available offset.
    Earliest,
    /// Each partition's end: only records produced after the query starts (Spark's default).
    Latest,
    /// Per topic-partition offsets; [`offsets::EARLIEST`] (-2) and [`offsets::LATEST`] (-1) allowed.
    Offsets(PartitionOffsets),
    /// The first record at or after this time (epoch ms), in every partition.
    Timestamp(i64),
    /// The first record at or after each partition's own time (epoch ms).
    ByTimestamp(PartitionOffsets),
}

/// Counters for one batch and for the life of the source.
#[derive(Debug, Default, Clone)]
struct Metrics {
    behind: Option<(i64, i64, f64)>,
    lost_batch: i64,
    /// Lost offsets of committed batches.
    lost_total: i64,
    /// Each read's lost offsets, until its batch commits.
    lost_waiting: super::read_counts::ReadCounts,
    /// Records of this batch kept despite bad data.
    repaired: rows::Repaired,
}

struct Runtime {
    /// For metadata, offset lookups and group commits (it reads no records).
    consumer: BaseConsumer,
    /// How each partition's reader is configured.
    reader_conf: ClientConfig,
    /// The partitions' readers, kept across batches.
    readers: BTreeMap<TopicPartition, reader::PartitionReader>,
    /// Where a new query starts; partitions not in it start at 0.
    initial: PartitionOffsets,
    /// The available-now target.
    cap: Option<PartitionOffsets>,
}

/// A Kafka topic (or topics) as a stream. Configure with the typed builder
/// methods or Spark's option names ([`KafkaSource::option`]), both checked
/// by weir-plan's connector table ([`weir_plan::connectors`]), as
/// `stream_query!` checks a declared source: a refused option fails
/// `start()` with the table's message.
pub struct KafkaSource {
    options: KafkaOptions,
    rt: Option<Runtime>,
    metrics: Metrics,
}

const META_TIMEOUT: Duration = Duration::from_secs(30);

/// The file in the source's checkpoint directory holding the offsets a new
/// query starts from (`v1` then Spark's offsets JSON).
const INITIAL_OFFSETS: &str = "initial-offsets";

/// The cap on offsets per batch when `maxOffsetsPerTrigger` is not set
/// (Spark has none; see the module docs for why weir has one).
pub const DEFAULT_MAX_OFFSETS_PER_TRIGGER: u64 = 1_000_000;

impl KafkaSource {
    /// A source reading from the cluster at `bootstrap_servers`
    /// (`host:port,...`); choose topics with `subscribe`, `subscribe_pattern`
    /// or `assign`.
    pub fn new(bootstrap_servers: &str) -> KafkaSource {
        KafkaSource::with(KafkaOptions::new(Some(bootstrap_servers)))
    }

    fn with(options: KafkaOptions) -> KafkaSource {
        KafkaSource {
            options,
            rt: None,
            metrics: Metrics::default(),
        }
    }

    /// A source configured only by Spark-named options
    /// (`kafka.bootstrap.servers` among them).
    pub fn from_options<'a>(options: impl IntoIterator<Item = (&'a str, &'a str)>) -> KafkaSource {
        let mut s = KafkaSource::with(KafkaOptions::new(None));
        for (k, v) in options {
            s = s.option(k, v);
        }
        s
    }

    /// Reads these topics (comma-separated, Spark's `subscribe`).
    pub fn subscribe(mut self, topics: &str) -> Self {
        self.options.subscribe("subscribe", topics);
        self
    }

    /// Reads every topic whose whole name matches `pattern` (Spark's
    /// `subscribePattern`), including topics created while the query runs.
    pub fn subscribe_pattern(mut self, pattern: &str) -> Self {
        self.options.subscribe_pattern("subscribePattern", pattern);
        self
    }

    /// Reads exactly these topic-partitions (Spark's `assign`; at least one,
    /// each partition from 0).
    pub fn assign(mut self, partitions: &[(&str, i32)]) -> Self {
        self.options.assign_partitions(partitions);
        self
    }

    /// Where a new query starts (default [`StartingOffsets::Latest`]); a
    /// restarted query resumes from its checkpoint instead. Per-partition
    /// offsets are checked as Spark's `startingOffsets` JSON is.
    pub fn starting_offsets(mut self, s: StartingOffsets) -> Self {
        self.options.starting_offsets(s);
        self
    }

    /// Starts each partition at its first record at or after `epoch_ms`
    /// (Spark's `startingTimestamp`; wins over `starting_offsets`).
    pub fn starting_timestamp(mut self, epoch_ms: i64) -> Self {
        self.options.starting_timestamp = Some(epoch_ms);
        self
    }

    /// At most `n` offsets per batch over all partitions, split in proportion
    /// to each partition's lag (Spark's `maxOffsetsPerTrigger`, at least 1;
    /// default [`DEFAULT_MAX_OFFSETS_PER_TRIGGER`], where Spark has no cap).
    pub fn max_offsets_per_trigger(mut self, n: u64) -> Self {
        let n = connectors::count("maxOffsetsPerTrigger", n, i64::MAX as u64);
        self.options.max_offsets = self.options.keep(n).or(self.options.max_offsets);
        self
    }

    /// Spark's `minPartitions`: accepted for compatibility; weir reads each
    /// batch in one process and does not split Kafka partitions.
    pub fn min_partitions(mut self, n: usize) -> Self {
        self.options.min_partitions = Some(n);
        self
    }

    /// `true` (default): fail when offsets to read are gone (retention,
    /// deleted records or topic), naming topic, partition and range; `false`:
    /// skip them with a warning and count them in the `lostOffsets` metric.
    pub fn fail_on_data_loss(mut self, yes: bool) -> Self {
        self.options.fail_on_data_loss = yes;
        self
    }

    /// Adds the `headers` column (Spark's `includeHeaders`).
    pub fn include_headers(mut self, yes: bool) -> Self {
        self.options.include_headers = yes;
        self
    }

    /// Commits each batch's end offsets to consumer group `group` once the
    /// batch is committed (beyond Spark, so lag shows in Kafka's tooling).
    /// The checkpoint, not the group, decides where a restart resumes.
    pub fn group_id(mut self, group: &str) -> Self {
        self.options.group_id = Some(group.to_string());
        self
    }

    /// Sets an option by Spark's name (case-insensitive). `kafka.`-prefixed
    /// options go to librdkafka. An unknown or invalid option fails `start()`
    /// with the connector table's message.
    pub fn option(mut self, key: &str, value: &str) -> Self {
        self.options.set(key, value);
        self
    }

    /// Offsets skipped as lost so far (with `failOnDataLoss=false`), in
    /// committed batches (each counted once, however often it was read).
    pub fn lost_offsets(&self) -> i64 {
        self.metrics.lost_total
    }

    /// The same configuration reading exactly `partitions` (one scale-out
    /// task's share).
    fn for_task(&self, partitions: &[(String, i32)]) -> KafkaSource {
        KafkaSource::with(self.options.for_partitions(partitions))
    }

    /// The bootstrap servers, once every option is accepted and complete.
    fn validated(&self) -> Result<String> {
        self.options.validate().map_err(|e| self.err(e))
    }

    fn err(&self, message: impl Into<String>) -> WeirError {
        WeirError::Source {
            source_name: self.description(),
            message: message.into(),
        }
    }

    fn kerr(&self, what: &str, e: KafkaError) -> WeirError {
        self.err(format!("{what}: {e}"))
    }

    fn consumer(&self) -> Result<&BaseConsumer> {
        self.rt
            .as_ref()
            .map(|r| &r.consumer)
            .ok_or_else(|| self.err("used before open()"))
    }

    /// Handles offsets `[from, to)` of `tp` being gone: an error naming them
    /// (failOnDataLoss=true) or a warning and a count.
    fn data_loss(&mut self, tp: &TopicPartition, from: i64, to: i64, why: &str) -> Result<()> {
        let range = if to > from {
            format!("offsets [{from}, {to}) ({} records)", to - from)
        } else {
            format!("offsets from {from}")
        };
        if self.options.fail_on_data_loss {
            return Err(self.err(format!(
                "data loss in topic `{}` partition {}: {range} can no longer be read: {why}. Some data may have been lost because it is not available in Kafka any more; either it was aged out by retention, deleted, or the topic was deleted before all of it was processed. If you want the query to go on in such cases, set the source option failOnDataLoss to false",
                tp.0, tp.1
            )));
        }
        tracing::warn!(topic = %tp.0, partition = tp.1, "data loss: {range} skipped: {why} (failOnDataLoss=false)");
        let n = (to - from).max(0);
        self.metrics.lost_batch += n;
        Ok(())
    }

    fn parse_offsets(&self, v: &Offset) -> Result<PartitionOffsets> {
        offsets::from_json(v).map_err(|e| {
            self.err(format!(
                "the offsets log holds `{v}`, which is not Kafka source offsets ({e}); was the checkpoint written by another source?"
            ))
        })
    }

    /// Where each partition of `end` starts: its logged start, the query's
    /// initial offset, or 0 for a partition that appeared since.
    fn starts(&self, start: Option<&Offset>) -> Result<PartitionOffsets> {
        match start {
            Some(s) => self.parse_offsets(s),
            None => Ok(self
                .rt
                .as_ref()
                .map(|r| r.initial.clone())
                .unwrap_or_default()),
        }
    }
}

impl Source for KafkaSource {
    fn shared_input(&self) -> Result<super::SharedInput> {
        let bootstrap = self.validated()?;
        match &self.options.strategy {
            Some(Strategy::Subscribe(topics)) => Ok(super::SharedInput {
                bootstrap,
                topics: topics.clone(),
                kafka_conf: self.options.kafka_conf.clone(),
                max_offsets_per_trigger: self.options.max_offsets,
            }),
            Some(Strategy::Pattern(..)) => Err(self.err(
                "scale-out divides the partitions of named topics among processes: use subscribe with the topics' names instead of subscribePattern",
            )),
            Some(Strategy::Assign(_)) => Err(self.err(
                "scale-out lets the consumer group assign partitions to processes: use subscribe instead of assign",
            )),
            None => Err(self.err(
                "choose the topics: one of subscribe, subscribePattern or assign (Spark's rule)",
            )),
        }
    }

    fn for_partitions(&self, partitions: &[(String, i32)]) -> Result<BoxSource> {
        self.shared_input()?;
        Ok(Box::new(self.for_task(partitions)))
    }

    fn schema(&self) -> SchemaRef {
        kafka_schema(self.options.include_headers)
    }

    fn description(&self) -> String {
        let what = match &self.options.strategy {
            Some(Strategy::Subscribe(v)) => format!("Subscribe[{}]", v.join(",")),
            Some(Strategy::Pattern(p, _)) => format!("SubscribePattern[{p}]"),
            Some(Strategy::Assign(v)) => format!(
                "Assign[{}]",
                v.iter()
                    .map(|(t, p)| format!("{t}-{p}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => "?".into(),
        };
        format!("KafkaV2[{what}]")
    }

    fn open(&mut self, ctx: &SourceContext) -> Result<()> {
        self.open_on(ctx, &SourceStorage::local(ctx))
    }

    fn log_on_storage(&self) -> bool {
        true
    }

    fn open_on(&mut self, _ctx: &SourceContext, storage: &SourceStorage) -> Result<()> {
        let bootstrap = self.validated()?;
        if let Some(n) = self.options.min_partitions {
            tracing::info!("minPartitions={n} accepted; weir reads each Kafka partition whole and does not split it");
        }
        let mut conf = ClientConfig::new();
        let group = self.options.group_id.clone().unwrap_or_else(|| {
            format!(
                "{}-{}",
                self.options.group_prefix,
                uuid::Uuid::new_v4().simple()
            )
        });
        conf.set("bootstrap.servers", &bootstrap)
            .set("group.id", &group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "error")
            .set("enable.partition.eof", "false")
            .set("allow.auto.create.topics", "false")
            // Up to 1 MB per fetch (Kafka's default, so Spark's too; `kafka.*`
            // options override all of these). Each partition has a consumer
            // of its own, and a fetch response stays in memory while its
            // records do: 4 MB cost 50-75 MB more peak RSS in kafka_bench
            // (4 partitions, at 50k, 200k and 1M offsets per trigger) for no
            // speed (events/s within the runs' spread at each).
            .set("max.partition.fetch.bytes", "1048576")
            // A fetch that reaches a partition's end waits up to this long
            // for more (the broker answers as soon as a record arrives): an
            // idle partition's reader asks twice a second, not 50 times.
            .set("fetch.wait.max.ms", "500")
            // Each partition's reader prefetches the next records while a
            // batch is processed, up to 5,000 records or 2 MB: a queued
            // record keeps its whole fetch response alive, so deeper queues
            // cost memory (100 MB more peak RSS in kafka_bench with a queue
            // of 10,000 records or 4 MB, measured with 4 MB fetches) for no
            // speed ...
            .set("queued.min.messages", "5000")
            .set("queued.max.messages.kbytes", "2048")
            // ... and fetches again soon after a batch drained its queue
            // (librdkafka's default backs off a whole second).
            .set("fetch.queue.backoff.ms", "5");
        for (k, v) in &self.options.kafka_conf {
            conf.set(k, v);
        }
        // The partition readers take records many at a time, and each record
        // taken moves the consumer's position: an end-of-partition event
        // would move it too, and cost a reposition (and a warning) each
        // time a reader reached its partition's end (librdkafka's own
        // option; Spark's consumer has none).
        if !conf
            .get("enable.partition.eof")
            .is_some_and(|v| v.eq_ignore_ascii_case("false") || v == "0")
        {
            tracing::warn!(
                "kafka.enable.partition.eof is not used: the Kafka source's readers need it false"
            );
            conf.set("enable.partition.eof", "false");
        }
        let consumer: BaseConsumer = conf
            .create()
            .map_err(|e| self.kerr("cannot create the Kafka consumer", e))?;
        self.rt = Some(Runtime {
            consumer,
            reader_conf: conf,
            readers: BTreeMap::new(),
            initial: PartitionOffsets::new(),
            cap: None,
        });
        // A new query fixes its starting offsets once; a restart reads them back.
        let dir = &storage.metadata;
        let damaged = |e: String| {
            WeirError::checkpoint(
                dir.display_path(INITIAL_OFFSETS),
                format!("damaged initial offsets ({e}); restore the file or start with a new checkpoint location"),
            )
        };
        let parse = |this: &Self, bytes: &[u8]| -> Result<PartitionOffsets> {
            let text = std::str::from_utf8(bytes).map_err(|e| damaged(e.to_string()))?;
            let v: serde_json::Value = serde_json::from_str(text.lines().nth(1).unwrap_or("{}"))
                .map_err(|e| damaged(e.to_string()))?;
            this.parse_offsets(&v)
        };
        let initial = match dir.get(INITIAL_OFFSETS)? {
            Some(bytes) => parse(self, &bytes)?,
            None => {
                let o = self.resolve_initial()?;
                let bytes = format!("v1\n{}", offsets::to_json(&o));
                match dir.put_create(INITIAL_OFFSETS, bytes.as_bytes())? {
                    Created::Created => o,
                    // This run's own write, retried after a lost answer.
                    Created::Exists
                        if dir.get(INITIAL_OFFSETS)?.as_deref() == Some(bytes.as_bytes()) =>
                    {
                        o
                    }
                    Created::Exists => {
                        return Err(WeirError::checkpoint(
                            dir.display_path(INITIAL_OFFSETS),
                            "another run of this query fixed its starting offsets at the same time: only one run may use a checkpoint location; stop the other run",
                        ))
                    }
                }
            }
        };
        if let Some(rt) = &mut self.rt {
            rt.initial = initial;
        }
        Ok(())
    }

    /// Yes: it reads the topics and writes nothing (the query's
    /// checkpoint holds its offsets).
    fn reads_ahead(&self) -> bool {
        true
    }

    fn latest_offset(&mut self, start: Option<&Offset>) -> Result<Option<Offset>> {
        self.metrics.lost_batch = 0;
        let from = self.starts(start)?;
        let parts = self.discover()?;
        for tp in from.keys() {
            if !parts.contains(tp) {
                let at = from[tp];
                self.data_loss(tp, at, at, "the partition is gone (was the topic deleted?)")?;
            }
        }
        if parts.is_empty() && start.is_none() {
            return Ok(None);
        }
        let ends = self.list_offsets(&parts, KafkaOffset::End)?;
        let mut latest = PartitionOffsets::new();
        let mut starts = PartitionOffsets::new();
        for tp in &parts {
            let hi = ends[tp];
            let f = from.get(tp).copied().unwrap_or(0);
            if hi < f {
                self.data_loss(
                    tp,
                    f,
                    f,
                    &format!(
                        "its latest offset went back from {f} to {hi} (was the topic re-created?)"
                    ),
                )?;
            }
            latest.insert(tp.clone(), hi);
            starts.insert(tp.clone(), f.min(hi));
        }
        let mut until = latest.clone();
        if let Some(cap) = self.rt.as_ref().and_then(|r| r.cap.clone()) {
            for (tp, u) in until.iter_mut() {
                *u = match cap.get(tp) {
                    Some(c) => (*c).min(*u).max(starts[tp]),
                    None => starts[tp],
                };
            }
        }
        let limit = self
            .options
            .max_offsets
            .unwrap_or(DEFAULT_MAX_OFFSETS_PER_TRIGGER);
        until = offsets::rate_limit(limit, &starts, &until);
        let behind: Vec<i64> = until.iter().map(|(tp, u)| latest[tp] - u).collect();
        self.metrics.behind = (!behind.is_empty()).then(|| {
            (
                *behind.iter().min().unwrap_or(&0),
                *behind.iter().max().unwrap_or(&0),
                behind.iter().sum::<i64>() as f64 / behind.len() as f64,
            )
        });
        Ok(Some(offsets::to_json(&until)))
    }

    fn get_batch(&mut self, start: Option<&Offset>, end: &Offset) -> Result<Vec<RecordBatch>> {
        self.metrics.repaired = Default::default();
        let end_offset = end;
        let from = self.starts(start)?;
        let end = self.parse_offsets(end)?;
        let to_read: BTreeSet<TopicPartition> = end
            .iter()
            .filter(|(tp, to)| from.get(*tp).is_none_or(|f| f < *to))
            .map(|(tp, _)| tp.clone())
            .collect();
        if let Some(rt) = &mut self.rt {
            // Partitions gone from the source: their readers are closed.
            rt.readers.retain(|tp, _| end.contains_key(tp));
        }
        let earliest = self.list_offsets(&to_read, KafkaOffset::Beginning)?;
        let mut ranges = Vec::new();
        for (tp, &to) in &end {
            if !to_read.contains(tp) {
                continue;
            }
            let lo = earliest[tp];
            let f = match from.get(tp) {
                Some(f) => *f,
                None => {
                    // A partition that appeared since the last batch: from its start (Spark).
                    if lo > 0 {
                        self.data_loss(
                            tp,
                            0,
                            lo.min(to),
                            &format!("the added partition starts at offset {lo} instead of 0"),
                        )?;
                    }
                    lo.min(to)
                }
            };
            if f >= to {
                continue;
            }
            let f = if lo > f {
                let l = lo.min(to);
                self.data_loss(
                    tp,
                    f,
                    l,
                    &format!("the partition's earliest offset is now {lo}"),
                )?;
                l
            } else {
                f
            };
            if f < to {
                ranges.push((tp.clone(), f, to));
            }
        }
        let rows = self.read(ranges)?;
        let lost = self.metrics.lost_batch.max(0) as u64;
        self.metrics.lost_waiting.read(end_offset, lost);
        Ok(rows)
    }

    fn commit(&mut self, end: &Offset) -> Result<()> {
        self.metrics.lost_total += self.metrics.lost_waiting.committed(end) as i64;
        if self.options.group_id.is_none() {
            return Ok(());
        }
        let end = self.parse_offsets(end)?;
        let mut tpl = TopicPartitionList::new();
        for ((t, p), o) in &end {
            let _ = tpl.add_partition_offset(t, *p, KafkaOffset::Offset(*o));
        }
        if tpl.count() == 0 {
            return Ok(());
        }
        if let Err(e) = self.consumer()?.commit(&tpl, CommitMode::Sync) {
            // Informational only: the checkpoint decides where a restart resumes.
            tracing::warn!(source = %self.description(), "could not commit offsets to consumer group: {e}");
        }
        Ok(())
    }

    fn prepare_for_available_now(&mut self) -> Result<()> {
        let parts = self.discover()?;
        let cap = self.list_offsets(&parts, KafkaOffset::End)?;
        if let Some(rt) = &mut self.rt {
            rt.cap = Some(cap);
        }
        Ok(())
    }

    fn metrics(&self) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        if let Some((min, max, avg)) = self.metrics.behind {
            m.insert("minOffsetsBehindLatest".into(), min.to_string());
            m.insert("maxOffsetsBehindLatest".into(), max.to_string());
            m.insert("avgOffsetsBehindLatest".into(), format!("{avg:.1}"));
        }
        if !self.options.fail_on_data_loss {
            m.insert("lostOffsets".into(), self.metrics.lost_batch.to_string());
        }
        let r = self.metrics.repaired;
        m.insert("invalidTimestamps".into(), r.timestamps.to_string());
        m.insert("invalidHeaderKeys".into(), r.header_keys.to_string());
        m
    }

    fn stop(&mut self) {
        if let Some(rt) = &self.rt {
            let _ = rt.consumer.unassign();
        }
        self.rt = None;
    }
}

/// The Kafka source from its options, checked by the connector table
/// ([`super::from_options`]); the strategy rule is checked when it starts.
pub(super) fn from_options(
    o: &super::SourceOptions,
) -> std::result::Result<BoxSource, connectors::OptionError> {
    Ok(Box::new(KafkaSource::from_options(o.given())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_use_sparks_names() {
        let s = KafkaSource::from_options([
            ("kafka.bootstrap.servers", "127.0.0.1:1"),
            ("subscribe", "a, b"),
            ("startingOffsets", r#"{"a":{"0":-2},"b":{"0":5}}"#),
            ("maxOffsetsPerTrigger", "100"),
            ("failOnDataLoss", "false"),
            ("includeHeaders", "true"),
            ("kafka.isolation.level", "read_uncommitted"),
        ]);
        assert_eq!(s.validated().unwrap(), "127.0.0.1:1");
        assert_eq!(s.description(), "KafkaV2[Subscribe[a,b]]");
        assert_eq!(s.options.max_offsets, Some(100));
        assert!(!s.options.fail_on_data_loss);
        assert_eq!(s.schema().fields().len(), 8);
        assert_eq!(s.options.kafka_conf["isolation.level"], "read_uncommitted");
        match &s.options.starting {
            StartingOffsets::Offsets(o) => assert_eq!(o[&("b".to_string(), 0)], 5),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_options_are_reported_at_open() {
        let open = |mut s: KafkaSource| {
            s.open(&SourceContext {
                metadata_dir: std::env::temp_dir(),
                sync: false,
                default_parallelism: 1,
            })
            .unwrap_err()
            .to_string()
        };
        let e = open(
            KafkaSource::new("x:1")
                .subscribe("a")
                .subscribe_pattern("b.*"),
        );
        assert!(
            e.contains("needs exactly one of `subscribe`, `subscribePattern` and `assign`"),
            "{e}"
        );
        let e = open(KafkaSource::new("x:1").option("startingOfsets", "earliest"));
        assert!(
            e.contains("unknown option `startingOfsets` for the kafka source"),
            "{e}"
        );
        let e = open(
            KafkaSource::new("x:1")
                .subscribe("a")
                .option("failOnDataLoss", "maybe"),
        );
        assert!(e.contains("`failOnDataLoss` takes true or false"), "{e}");
        let e = open(
            KafkaSource::new("x:1")
                .subscribe("a")
                .option("endingOffsets", "latest"),
        );
        assert!(e.contains("batch queries"), "{e}");
        let e = open(
            KafkaSource::new("x:1")
                .subscribe("a")
                .max_offsets_per_trigger(0),
        );
        assert!(
            e.contains("`maxOffsetsPerTrigger` takes a whole number of at least 1"),
            "{e}"
        );
        // Scale-out refuses the same way.
        let s = KafkaSource::new("x:1").assign(&[]);
        let e = s.shared_input().unwrap_err().to_string();
        assert!(
            e.contains(&connectors::assign("assign", "{}").unwrap_err().to_string()),
            "{e}"
        );
    }

    #[test]
    fn the_sources_schema_is_the_connector_tables() {
        // The table (weir-plan) holds Spark's columns; the source declares
        // them with their Arrow types, `headers` last with includeHeaders.
        let columns = |s: SchemaRef| -> Vec<(String, arrow::datatypes::DataType)> {
            s.fields()
                .iter()
                .map(|f| (f.name().clone(), f.data_type().clone()))
                .collect()
        };
        let table: Vec<_> = connectors::KAFKA_SCHEMA
            .iter()
            .map(|f| (f.name.to_string(), crate::row::arrow_type(f.dtype)))
            .collect();
        assert_eq!(columns(KafkaSource::new("x:1").schema()), table);
        let with_headers = columns(KafkaSource::new("x:1").include_headers(true).schema());
        assert_eq!(with_headers[..table.len()], table[..]);
        assert_eq!(
            with_headers[table.len()..],
            [(connectors::KAFKA_HEADERS.to_string(), headers_type())]
        );
    }
}
