//! The repartition topic between a scale-out query's two stages
//! ([`topic_name`]): the first stage writes each row as a JSON object
//! (stamped with its batch's watermark and its task, which the second
//! stage's watermark follows) keyed by the stateful operator's key columns, with
//! the exactly-once Kafka sink (one transaction per batch, per task); the
//! second stage reads it with `read_committed`, so a first-stage batch
//! re-run after a crash is seen once.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int64Array, StringArray};
use arrow::datatypes::{DataType, Field as ArrowField, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use weir_plan::{DataType as PlanType, Field};

use super::stages::Split;
use super::watermarks::TaskWatermarks;
use crate::error::{Result, WeirError};
use crate::sink::{BoxSink, KafkaSink, Sink, SinkContext};
use crate::source::kafka::{KafkaAdmin, KafkaSource, StartingOffsets};
use crate::source::{
    BoxSource, DecodeExt, Offset, SharedInput, Source, SourceContext, SourceStorage,
};

/// Creates the topic (`partitions` partitions) when missing; an existing
/// one must have as many (its rows are spread by key over them: another
/// count would send a key's later rows to another task than its state).
pub(crate) fn create(
    admin: &KafkaAdmin,
    prefix: &str,
    query_id: &str,
    split: &Split,
    partitions: usize,
) -> Result<String> {
    let topic = topic_name(prefix, query_id, split.operator.1);
    // Kept until read (as Kafka Streams does): no time-based retention,
    // which could delete rows the second stage has not read yet; the
    // second stage's owners purge what their tasks have committed.
    admin.create_topic_with_config(
        &topic,
        partitions.max(1) as i32,
        &[("retention.ms", "-1"), ("cleanup.policy", "delete")],
    )?;
    let have = admin.partitions(&topic)?;
    if have != partitions.max(1) {
        return Err(WeirError::Config(format!(
            "repartition topic `{topic}` has {have} partitions but the query asks for {partitions} (spark.sql.shuffle.partitions, default the input's partition count); a key's state lives in the task of its partition, so the count cannot change: set spark.sql.shuffle.partitions={have}, or use a new query name, checkpoint and group"
        )));
    }
    Ok(topic)
}

/// `<query name>-<query id, first 8>-repartition-<operator position>`: the
/// query id (its checkpoint's) keeps a new checkpoint of a query of the
/// same name from reading the rows an older one left in the topic.
pub fn topic_name(query: &str, query_id: &str, operator: usize) -> String {
    let id: String = query_id.chars().filter(|c| *c != '-').take(8).collect();
    format!("{query}-{id}-repartition-{operator}")
}

/// The first stage's sink: each row as JSON, keyed by the route columns.
pub(crate) fn sink(input: &SharedInput, topic: &str, split: &Split) -> BoxSink {
    let keys: Vec<&str> = split.route_by.iter().map(|s| s.as_str()).collect();
    // Every row crosses the broker twice: LZ4 batches cut the broker's CPU
    // by ~40% in scripts/scale_bench.sh (a `kafka.compression.type` of the
    // query's own overrides it).
    let mut s = KafkaSink::new(&input.bootstrap)
        .topic(topic)
        .key_columns(&keys)
        .whole_rows()
        .option("kafka.compression.type", "lz4");
    for (k, v) in &input.kafka_conf {
        s = s.option(&format!("kafka.{k}"), v);
    }
    Box::new(s)
}

/// The second stage's source: the topic's rows decoded back to `fields`
/// and the stamp columns (see [`StampedSource`], which drops them).
pub(crate) fn source(input: &SharedInput, topic: &str, mut fields: Vec<Field>) -> BoxSource {
    fields.push(Field::new(BATCH_WATERMARK, PlanType::Int64));
    fields.push(Field::new(WRITER, PlanType::String));
    let mut s = KafkaSource::new(&input.bootstrap)
        .subscribe(topic)
        .starting_offsets(StartingOffsets::Earliest);
    for (k, v) in &input.kafka_conf {
        s = s.option(&format!("kafka.{k}"), v);
    }
    if let Some(n) = input.max_offsets_per_trigger {
        s = s.max_offsets_per_trigger(n);
    }
    Box::new(s.from_json("value", fields))
}

/// The hidden column carrying the watermark of the first-stage batch that
/// wrote a row (ms).
pub(crate) const BATCH_WATERMARK: &str = "__weir_batch_watermark";
/// The hidden column naming the first-stage task that wrote a row.
pub(crate) const WRITER: &str = "__weir_writer";

/// The first stage's sink: each row with its batch's watermark and its
/// task's name (what the second stage's watermark follows), then written
/// by the exactly-once Kafka sink.
pub(crate) struct StampedSink {
    inner: BoxSink,
    marks: Arc<TaskWatermarks>,
    /// The last rows' schema and it with the two stamp columns.
    stamped: Option<(SchemaRef, SchemaRef)>,
}

impl StampedSink {
    /// Stamps the rows `inner` writes for the task of `marks`.
    pub(crate) fn new(inner: BoxSink, marks: Arc<TaskWatermarks>) -> StampedSink {
        StampedSink {
            inner,
            marks,
            stamped: None,
        }
    }
}

/// `schema` with the two stamp columns after its own.
fn stamped_schema(schema: &Schema) -> SchemaRef {
    let mut fields: Vec<ArrowField> = schema.fields().iter().map(|f| (**f).clone()).collect();
    fields.push(ArrowField::new(BATCH_WATERMARK, DataType::Int64, false));
    fields.push(ArrowField::new(WRITER, DataType::Utf8, false));
    Arc::new(Schema::new(fields))
}

impl Sink for StampedSink {
    fn description(&self) -> String {
        self.inner.description()
    }

    fn kind(&self) -> weir_plan::SinkKind {
        self.inner.kind()
    }

    fn open(&mut self, ctx: &SinkContext) -> Result<()> {
        let mut ctx = ctx.clone();
        ctx.schema = stamped_schema(&ctx.schema);
        self.inner.open(&ctx)
    }

    fn add_batch(&mut self, batch_id: i64, batches: &[RecordBatch]) -> Result<()> {
        let wm = self.marks.batch_watermark(batch_id).ok_or_else(|| {
            WeirError::Config(format!(
                "scale-out: batch {batch_id} of task {} has no watermark recorded",
                self.marks.task()
            ))
        })?;
        let stamped = batches
            .iter()
            .map(|b| {
                let n = b.num_rows();
                let mut columns = b.columns().to_vec();
                columns.push(Arc::new(Int64Array::from(vec![wm; n])) as ArrayRef);
                columns.push(Arc::new(StringArray::from(vec![self.marks.task(); n])) as ArrayRef);
                let schema = match &self.stamped {
                    Some((base, s)) if *base == b.schema() => s.clone(),
                    _ => {
                        let s = stamped_schema(&b.schema());
                        self.stamped = Some((b.schema(), s.clone()));
                        s
                    }
                };
                RecordBatch::try_new(schema, columns)
                    .map_err(|e| WeirError::Config(format!("scale-out: stamping rows: {e}")))
            })
            .collect::<Result<Vec<_>>>()?;
        self.inner.add_batch(batch_id, &stamped)
    }
}

/// The second stage's source: the repartition topic's rows, decoded; each
/// row's batch watermark is noted for its writer (see
/// `query/shared_watermark.rs`) and the two hidden columns are dropped.
pub(crate) struct StampedSource {
    inner: BoxSource,
    marks: Arc<TaskWatermarks>,
    schema: SchemaRef,
}

impl StampedSource {
    /// Reads `inner` (decoding the stamped rows) for the task of `marks`.
    pub(crate) fn new(inner: BoxSource, marks: Arc<TaskWatermarks>) -> StampedSource {
        let all = inner.schema();
        let fields: Vec<ArrowField> = all
            .fields()
            .iter()
            .filter(|f| f.name() != BATCH_WATERMARK && f.name() != WRITER)
            .map(|f| (**f).clone())
            .collect();
        StampedSource {
            inner,
            marks,
            schema: Arc::new(Schema::new(fields)),
        }
    }

    fn unstamp(&self, b: &RecordBatch) -> Result<RecordBatch> {
        let s = b.schema();
        let col = |name: &str| {
            s.index_of(name).map_err(|_| {
                WeirError::Config(format!(
                    "scale-out: a repartition row lacks `{name}`; the topic was written by something else than this query's first stage"
                ))
            })
        };
        let (wi, ti) = (col(BATCH_WATERMARK)?, col(WRITER)?);
        let wms = arrow::compute::cast(b.column(wi), &DataType::Int64)
            .map_err(|e| WeirError::Config(format!("scale-out: {e}")))?;
        let wms = wms.as_primitive::<arrow::datatypes::Int64Type>();
        let writers = arrow::compute::cast(b.column(ti), &DataType::Utf8)
            .map_err(|e| WeirError::Config(format!("scale-out: {e}")))?;
        let writers = writers.as_string::<i32>();
        let mut seen: BTreeMap<&str, i64> = BTreeMap::new();
        for i in 0..b.num_rows() {
            if wms.is_valid(i) && writers.is_valid(i) {
                let e = seen.entry(writers.value(i)).or_insert(i64::MIN);
                *e = (*e).max(wms.value(i));
            }
        }
        for (w, wm) in seen {
            self.marks.read_from(w, wm);
        }
        let keep: Vec<usize> = (0..s.fields().len())
            .filter(|i| *i != wi && *i != ti)
            .collect();
        b.project(&keep)
            .map_err(|e| WeirError::Config(format!("scale-out: {e}")))
    }
}

impl Source for StampedSource {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn description(&self) -> String {
        self.inner.description()
    }
    fn use_clock(&mut self, clock: Arc<dyn crate::clock::Clock>) {
        self.inner.use_clock(clock)
    }
    fn open(&mut self, ctx: &SourceContext) -> Result<()> {
        self.inner.open(ctx)
    }
    fn open_on(&mut self, ctx: &SourceContext, storage: &SourceStorage) -> Result<()> {
        self.inner.open_on(ctx, storage)
    }
    fn log_on_storage(&self) -> bool {
        self.inner.log_on_storage()
    }
    fn latest_offset(&mut self, start: Option<&Offset>) -> Result<Option<Offset>> {
        self.inner.latest_offset(start)
    }
    fn get_batch(&mut self, start: Option<&Offset>, end: &Offset) -> Result<Vec<RecordBatch>> {
        let batches = self.inner.get_batch(start, end)?;
        batches.iter().map(|b| self.unstamp(b)).collect()
    }
    fn commit(&mut self, end: &Offset) -> Result<()> {
        self.inner.commit(end)
    }
    fn prepare_for_available_now(&mut self) -> Result<()> {
        self.inner.prepare_for_available_now()
    }
    fn metrics(&self) -> BTreeMap<String, String> {
        self.inner.metrics()
    }
    fn stop(&mut self) {
        self.inner.stop()
    }
}
