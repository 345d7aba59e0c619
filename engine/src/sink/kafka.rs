//! The Kafka sink (Spark's `kafka` stream format), on librdkafka, exactly
//! once by default (beyond Spark, whose Kafka sink is at-least-once).
//!
//! Each result row becomes one record. Columns, as in Spark: `value` (string
//! or binary, required), `key` (string or binary, optional), `topic` (string;
//! the `topic` option wins over it), `partition` (int, optional) and
//! `headers` (`array<struct<key: string, value: binary>>`, optional). Beyond
//! Spark, an aggregation's rows can be written without a `select` into that
//! shape: [`KafkaSink::json_values`] writes each row as a JSON object and
//! [`KafkaSink::key_columns`] builds the key from columns.
//!
//! ## Exactly once
//!
//! The producer is transactional, with `transactional.id` = `weir-<query
//! id>` (the query id is the checkpoint's, stable across restarts), and each
//! micro-batch is one transaction. Starting the sink fences any older
//! producer of the same query (a zombie can no longer commit) and aborts its
//! open transaction. Inside each transaction the sink also commits, through
//! Kafka's `sendOffsetsToTransaction`, offset `batch id + 1` for partition 0
//! of a *marker topic* (the output topic) in consumer group `weir-<query
//! id>`. That marker is committed atomically with the batch's records: after
//! a crash anywhere, the group's committed offset says exactly which batches
//! are in Kafka. A batch the engine re-runs after a restart (its `commits/N`
//! was never written) whose id is at or below the marker is skipped, so a
//! `read_committed` reader sees every batch once.
//!
//! Why not the alternatives: a marker file under the checkpoint cannot be
//! written atomically with the Kafka commit (a crash between the two
//! duplicates the batch), and a batch id in a record header would need the
//! output topic's tail scanned on every start and says nothing for an empty
//! batch or a topic other writers share.
//!
//! The marker belongs to the query, not to the producer: its group is
//! always `weir-<query id>`, whatever [`KafkaSink::transactional_id`] says,
//! and its metadata names the query (`weir query <id> batch <n>`). A new
//! checkpoint is a new query and starts clean, even when it reuses a
//! configured `transactionalId` and writes the same topic (before, it read
//! the old query's marker and silently skipped its own first batches). A
//! marker in the query's group that names another query is refused at start
//! with an error: something else wrote into this query's group. (A
//! checkpoint written by an older weir, whose marker lived in the group named
//! by its configured `transactionalId`, is still read from there when that
//! marker names this query.)
//!
//! With a `topic` column instead of the `topic` option, the marker goes to
//! the first topic the query writes (recorded once under the checkpoint in
//! `sinks/kafka/marker-topic`) unless [`KafkaSink::marker_topic`] names one.
//!
//! ## Bounded delivery
//!
//! A batch's whole delivery (queueing every record, then the flush, or the
//! transaction's marker and commit) must finish within one deadline,
//! [`KafkaSink::delivery_timeout`] (`deliveryTimeoutMs`, default 120 s, the
//! Java producer's `delivery.timeout.ms`); librdkafka's `message.timeout.ms`
//! is set to it as well. While the brokers are down the batch fails at that
//! deadline with an error naming the bootstrap servers, which ends the query
//! (`await_termination` returns it) instead of waiting once per full send
//! queue. Starting the sink (fencing, reading the marker) is bounded by the
//! same timeout.
//!
//! ## At least once
//!
//! [`KafkaSink::at_least_once`]: an idempotent producer without
//! transactions, flushed at the end of each batch; a batch re-run after a
//! crash is written again.
//!
//! | option | builder | meaning |
//! |---|---|---|
//! | `kafka.bootstrap.servers` | [`KafkaSink::new`] | `host:port,...` (required) |
//! | `topic` | [`KafkaSink::topic`] | the topic of every row (else the `topic` column) |
//! | `deliveryGuarantee` | [`KafkaSink::at_least_once`] | `exactly-once` (default) or `at-least-once` |
//! | `transactionalId` | [`KafkaSink::transactional_id`] | default `weir-<query id>` |
//! | `markerTopic` | [`KafkaSink::marker_topic`] | where the batch marker is committed |
//! | `deliveryTimeoutMs` | [`KafkaSink::delivery_timeout`] | the bound on one batch's delivery (default 120000) |
//! | `valueFormat` | [`KafkaSink::json_values`] | `column` (default: the `value` column) or `json` |
//! | `keyColumns` | [`KafkaSink::key_columns`] | comma-separated; one column: its text, several: a JSON object |
//! | `kafka.*` | `option` | passed to librdkafka's producer |

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use arrow::array::{Array, AsArray, ListArray, StructArray};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::RecordBatch;
use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientConfig, Offset as KafkaOffset, TopicPartitionList};

use super::exactly_once;
use super::{BoxSink, Sink, SinkContext};
use crate::error::{Result, WeirError};
use crate::failpoint::failpoint;
use crate::source::kafka::retry::retry_transient_within;
use crate::storage::{Created, Storage};

/// The default bound on one batch's delivery: the Java producer's
/// `delivery.timeout.ms` default.
pub const DEFAULT_DELIVERY_TIMEOUT: Duration = Duration::from_secs(120);

/// How a Kafka sink delivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryGuarantee {
    /// One transaction per batch; replays skipped (the default).
    ExactlyOnce,
    /// An idempotent producer without transactions; replays are written again.
    AtLeastOnce,
}

/// Records delivery failures (reported by librdkafka asynchronously).
#[derive(Default)]
struct Delivery {
    failed: Mutex<Option<String>>,
    delivered: AtomicU64,
}

impl Delivery {
    /// The first delivery failure since the last call, if any (and forgets it).
    fn take_failure(&self) -> Option<String> {
        self.failed.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

impl ClientContext for Delivery {}

impl ProducerContext for Delivery {
    type DeliveryOpaque = ();
    fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
        match r {
            Ok(_) => {
                self.delivered.fetch_add(1, Ordering::Relaxed);
            }
            Err((e, m)) => {
                use rdkafka::message::Message;
                let mut f = self.failed.lock().unwrap();
                f.get_or_insert_with(|| {
                    format!("delivery to {}-{} failed: {e}", m.topic(), m.partition())
                });
            }
        }
    }
}

/// Where each record field comes from in the result rows.
#[derive(Debug, Clone, Default)]
struct Layout {
    topic: Option<usize>,
    value: Option<usize>,
    key: Option<usize>,
    partition: Option<usize>,
    headers: Option<usize>,
    /// Columns of the JSON value (valueFormat=json).
    json_value: Vec<usize>,
    /// Columns of a built key.
    key_cols: Vec<usize>,
}

struct Runtime {
    producer: BaseProducer<Delivery>,
    layout: Layout,
    query_id: String,
    marker: Option<Marker>,
    /// The highest batch id known to be in Kafka.
    last_committed: Option<i64>,
}

struct Marker {
    consumer: BaseConsumer,
    group: String,
    topic: Option<String>,
    /// `sinks/kafka/` on the checkpoint's storage, where
    /// [`MARKER_TOPIC`] is recorded.
    file: Storage,
}

/// The file under `sinks/kafka/` naming the topic the batch markers go to
/// (with a `topic` column and no marker topic configured).
const MARKER_TOPIC: &str = "marker-topic";

/// Writes each batch's rows to Kafka.
pub struct KafkaSink {
    bootstrap: Option<String>,
    topic: Option<String>,
    guarantee: DeliveryGuarantee,
    transactional_id: Option<String>,
    marker_topic: Option<String>,
    json_values: bool,
    key_columns: Vec<String>,
    /// Every column in the JSON value, none read as `key`, `topic`, ...
    /// (a scale-out repartition topic's rows).
    whole_rows: bool,
    kafka_conf: BTreeMap<String, String>,
    /// The bound on a batch's delivery (and on the sink's start).
    timeout: Duration,
    option_error: Option<String>,
    rt: Option<Runtime>,
}

impl KafkaSink {
    /// A sink writing to the cluster at `bootstrap_servers` (`host:port,...`).
    pub fn new(bootstrap_servers: &str) -> KafkaSink {
        KafkaSink {
            bootstrap: Some(bootstrap_servers.to_string()),
            topic: None,
            guarantee: DeliveryGuarantee::ExactlyOnce,
            transactional_id: None,
            marker_topic: None,
            json_values: false,
            key_columns: Vec::new(),
            whole_rows: false,
            kafka_conf: BTreeMap::new(),
            timeout: DEFAULT_DELIVERY_TIMEOUT,
            option_error: None,
            rt: None,
        }
    }

    /// A sink configured only by options (`kafka.bootstrap.servers` among them).
    pub fn from_options<'a>(options: impl IntoIterator<Item = (&'a str, &'a str)>) -> KafkaSink {
        let mut s = KafkaSink::new("");
        s.bootstrap = None;
        for (k, v) in options {
            s = s.option(k, v);
        }
        s
    }

    /// Every row goes to `topic` (Spark's `topic` option; wins over a `topic` column).
    pub fn topic(mut self, topic: &str) -> Self {
        self.topic = Some(topic.to_string());
        self
    }

    /// At-least-once delivery: no transactions, faster; a re-run batch is written again.
    pub fn at_least_once(mut self) -> Self {
        self.guarantee = DeliveryGuarantee::AtLeastOnce;
        self
    }

    /// The delivery guarantee (default exactly once).
    pub fn delivery_guarantee(mut self, g: DeliveryGuarantee) -> Self {
        self.guarantee = g;
        self
    }

    /// The producer's `transactional.id` (default `weir-<query id>`); two
    /// queries running at once must never share one (each fences the other).
    /// The batch marker does not depend on it: it is kept per query id, so a
    /// new checkpoint reusing this id starts clean (see the module docs).
    pub fn transactional_id(mut self, id: &str) -> Self {
        self.transactional_id = Some(id.to_string());
        self
    }

    /// The topic whose partition 0 carries the batch marker (default: the
    /// `topic` option, else the first topic written). It must exist.
    pub fn marker_topic(mut self, topic: &str) -> Self {
        self.marker_topic = Some(topic.to_string());
        self
    }

    /// The bound on one batch's whole delivery (default
    /// [`DEFAULT_DELIVERY_TIMEOUT`], 120 s; at least 1 ms): past it the batch
    /// fails, naming the brokers, and the query stops with that error. Also
    /// sets librdkafka's `message.timeout.ms` (a `kafka.message.timeout.ms`
    /// option wins; at most 15 minutes with exactly once, the broker's
    /// default `transaction.max.timeout.ms`) and bounds the sink's start.
    pub fn delivery_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Writes each row as a JSON object of its columns (all but `topic`,
    /// `key`, `partition`, `headers` and the key columns) instead of
    /// requiring a `value` column. Timestamps are ISO-8601 strings, windows
    /// `{"start": .., "end": ..}`.
    pub fn json_values(mut self) -> Self {
        self.json_values = true;
        self
    }

    /// Builds the key from these columns (when there is no `key` column):
    /// one column gives its text, several a JSON object.
    pub fn key_columns(mut self, columns: &[&str]) -> Self {
        self.key_columns = columns.iter().map(|c| c.to_string()).collect();
        self
    }

    /// Writes every column into the JSON value (none is read as the
    /// record's `key`, `topic`, `partition` or `headers`), keyed by the key
    /// columns: how a scale-out query's first stage writes its rows to the
    /// repartition topic, to be read back whole.
    pub(crate) fn whole_rows(mut self) -> Self {
        self.json_values = true;
        self.whole_rows = true;
        self
    }

    /// Sets an option by name (case-insensitive); `kafka.` options go to
    /// librdkafka. A name or value the connector table refuses
    /// ([`weir_plan::connectors::SINKS`]) fails the query's start with the
    /// table's message, the one `stream_query!` gives.
    pub fn option(mut self, key: &str, value: &str) -> Self {
        if let Err(e) = crate::connector::check_sink_option("kafka", key, value) {
            self.fail(e.to_string());
            return self;
        }
        let lower = key.to_ascii_lowercase();
        match lower.as_str() {
            "kafka.bootstrap.servers" => self.bootstrap = Some(value.to_string()),
            "topic" => self.topic = Some(value.to_string()),
            "deliveryguarantee" => match value.to_ascii_lowercase().as_str() {
                "exactly-once" | "exactly_once" => self.guarantee = DeliveryGuarantee::ExactlyOnce,
                "at-least-once" | "at_least_once" => self.guarantee = DeliveryGuarantee::AtLeastOnce,
                _ => self.fail(format!("deliveryGuarantee `{value}`: use exactly-once or at-least-once")),
            },
            "transactionalid" => self.transactional_id = Some(value.to_string()),
            "markertopic" => self.marker_topic = Some(value.to_string()),
            "deliverytimeoutms" => match value.trim().parse::<u64>() {
                Ok(ms) if ms > 0 => return self.delivery_timeout(Duration::from_millis(ms)),
                _ => self.fail(format!(
                    "deliveryTimeoutMs `{value}` is not a positive number of milliseconds"
                )),
            },
            "valueformat" => match value.to_ascii_lowercase().as_str() {
                "json" => self.json_values = true,
                "column" => self.json_values = false,
                _ => self.fail(format!("valueFormat `{value}`: use column or json")),
            },
            "keycolumns" => {
                self.key_columns = value
                    .split(',')
                    .map(|c| c.trim().to_string())
                    .filter(|c| !c.is_empty())
                    .collect()
            }
            "kafka.transactional.id" => self.transactional_id = Some(value.to_string()),
            _ if lower.starts_with("kafka.") => {
                self.kafka_conf
                    .insert(key["kafka.".len()..].to_string(), value.to_string());
            }
            _ => self.fail(format!(
                "unknown Kafka sink option `{key}` (known: kafka.bootstrap.servers, topic, deliveryGuarantee, transactionalId, markerTopic, deliveryTimeoutMs, valueFormat, keyColumns, kafka.*)"
            )),
        }
        self
    }

    fn fail(&mut self, m: String) {
        self.option_error.get_or_insert(m);
    }

    fn err(&self, message: impl Into<String>) -> WeirError {
        WeirError::Sink {
            sink: self.description(),
            message: message.into(),
        }
    }

    fn layout(&self, schema: &SchemaRef) -> Result<Layout> {
        let find =
            |name: &str, ok: &dyn Fn(&DataType) -> bool, want: &str| -> Result<Option<usize>> {
                match schema.index_of(name) {
                    Ok(i) if ok(schema.field(i).data_type()) => Ok(Some(i)),
                    Ok(i) => Err(self.err(format!(
                        "column `{name}` is {}, it must be {want}",
                        schema.field(i).data_type()
                    ))),
                    Err(_) => Ok(None),
                }
            };
        let text_or_bytes = |t: &DataType| {
            matches!(
                t,
                DataType::Utf8
                    | DataType::LargeUtf8
                    | DataType::Utf8View
                    | DataType::Binary
                    | DataType::LargeBinary
                    | DataType::BinaryView
            )
        };
        if self.whole_rows && self.topic.is_some() {
            let mut l = Layout::default();
            for k in &self.key_columns {
                l.key_cols.push(
                    schema
                        .index_of(k)
                        .map_err(|_| self.err(format!("key column `{k}` is not in the result")))?,
                );
            }
            l.json_value = (0..schema.fields().len()).collect();
            return Ok(l);
        }
        let mut l = Layout {
            topic: if self.topic.is_some() {
                None
            } else {
                find(
                    "topic",
                    &|t| matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View),
                    "a string",
                )?
            },
            value: find("value", &text_or_bytes, "a string or binary")?,
            key: find("key", &text_or_bytes, "a string or binary")?,
            partition: find("partition", &|t| matches!(t, DataType::Int32), "an int")?,
            headers: find(
                "headers",
                &|t| matches!(t, DataType::List(f) if matches!(f.data_type(), DataType::Struct(fs) if fs.len() == 2)),
                "array<struct<key: string, value: binary>>",
            )?,
            ..Layout::default()
        };
        if self.topic.is_none() && l.topic.is_none() {
            return Err(self.err("no topic: set the `topic` option (KafkaSink::topic) or give the rows a string `topic` column"));
        }
        for k in &self.key_columns {
            l.key_cols.push(
                schema
                    .index_of(k)
                    .map_err(|_| self.err(format!("key column `{k}` is not in the result")))?,
            );
        }
        if self.json_values {
            let special = ["topic", "key", "partition", "headers"];
            l.json_value = (0..schema.fields().len())
                .filter(|i| {
                    !special.contains(&schema.field(*i).name().as_str()) && !l.key_cols.contains(i)
                })
                .collect();
        } else if l.value.is_none() {
            return Err(self.err(format!(
                "the result has no `value` column (it has: {}); select one (string or binary), or call KafkaSink::json_values() to write each row as JSON",
                schema
                    .fields()
                    .iter()
                    .map(|f| f.name().as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        Ok(l)
    }

    fn kerr(&self, what: &str, e: KafkaError) -> WeirError {
        let fenced = matches!(&e, KafkaError::Transaction(t) if t.is_fatal())
            || e.rdkafka_error_code() == Some(RDKafkaErrorCode::ProducerFenced);
        if fenced {
            return self.err(format!(
                "{what}: {e}. Another producer with the same transactional.id (another run of this query?) has fenced this one; only one instance of a query may run"
            ));
        }
        let brokers = self.bootstrap.as_deref().unwrap_or("?");
        let unreachable = matches!(
            e.rdkafka_error_code(),
            Some(
                RDKafkaErrorCode::OperationTimedOut
                    | RDKafkaErrorCode::RequestTimedOut
                    | RDKafkaErrorCode::MessageTimedOut
                    | RDKafkaErrorCode::BrokerTransportFailure
                    | RDKafkaErrorCode::AllBrokersDown
                    | RDKafkaErrorCode::Resolve
            )
        );
        if unreachable {
            return self.err(format!(
                "{what}: {e} (Kafka at {brokers}, timeout {:?}); is the broker up and reachable? (deliveryTimeoutMs sets the bound)",
                self.timeout
            ));
        }
        self.err(format!("{what}: {e} (Kafka at {brokers})"))
    }

    /// Reads the committed marker of `consumer`'s group: the highest batch
    /// id committed to Kafka and the marker's metadata.
    fn read_marker(
        &self,
        consumer: &BaseConsumer,
        group: &str,
        topic: &str,
    ) -> Result<Option<(i64, String)>> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(topic, 0);
        let got = retry_transient_within(self.timeout, |left| {
            consumer.committed_offsets(tpl.clone(), left)
        })
        .map_err(|e| {
            self.kerr(
                &format!("cannot read the batch marker of group `{group}`"),
                e,
            )
        })?;
        let e = got.elements();
        let Some(e) = e.first() else { return Ok(None) };
        match e.offset() {
            KafkaOffset::Offset(o) => Ok(Some((o - 1, e.metadata().to_string()))),
            _ => Ok(None),
        }
    }

    /// The highest batch id of query `query_id` known to be in Kafka: the
    /// marker in the query's own group, refused when it names another query;
    /// else (a checkpoint of an older weir, whose marker group was a
    /// configured `transactionalId`) that group's marker when it names this
    /// query. A new query finds nothing and starts clean.
    fn last_committed(&self, m: &Marker, query_id: &str) -> Result<Option<i64>> {
        let Some(topic) = &m.topic else {
            return Ok(None);
        };
        if let Some((last, meta)) = self.read_marker(&m.consumer, &m.group, topic)? {
            return match marker_query(&meta) {
                Some(q) if q != query_id => Err(self.err(format!(
                    "the batch marker in consumer group `{}` (topic `{topic}` partition 0) is `{meta}`: it names query {q}, not this checkpoint's query {query_id}. Another writer committed into this query's group; delete that group (kafka-consumer-groups --delete --group {}) if nothing else uses it, or start from a new checkpoint",
                    m.group, m.group
                ))),
                _ => Ok(Some(last)),
            };
        }
        let Some(legacy) = self.transactional_id.as_deref().filter(|t| *t != m.group) else {
            return Ok(None);
        };
        let consumer = marker_consumer(self.bootstrap.as_deref().unwrap_or_default(), legacy)
            .map_err(|e| self.kerr("cannot create the marker consumer", e))?;
        match self.read_marker(&consumer, legacy, topic)? {
            Some((last, meta)) if marker_query(&meta) == Some(query_id) => {
                tracing::info!(group = %legacy, "Kafka sink: batch marker carried over from the transactionalId's group (written by an older weir)");
                Ok(Some(last))
            }
            Some((_, meta)) => {
                tracing::info!(group = %legacy, "Kafka sink: group `{legacy}` holds another query's batch marker (`{meta}`); this query keeps its own in `{}`", m.group);
                Ok(None)
            }
            None => Ok(None),
        }
    }

    fn send_all(&self, batches: &[RecordBatch], deadline: Instant) -> Result<u64> {
        let rt = self
            .rt
            .as_ref()
            .ok_or_else(|| self.err("used before open()"))?;
        let mut n = 0u64;
        for b in batches.iter().filter(|b| b.num_rows() > 0) {
            let l = &rt.layout;
            let values_json = if l.json_value.is_empty() {
                None
            } else {
                Some(json_lines(&b.project(&l.json_value)?)?)
            };
            let key_lines = match l.key_cols.as_slice() {
                [] => None,
                [one] if matches!(b.column(*one).data_type(), DataType::Utf8) => Some(
                    (0..b.num_rows())
                        .map(|i| {
                            let c = b.column(*one).as_string::<i32>();
                            c.is_valid(i).then(|| c.value(i).as_bytes().to_vec())
                        })
                        .collect::<Vec<_>>(),
                ),
                cols => {
                    let lines = json_lines(&b.project(cols)?)?;
                    Some(
                        lines
                            .into_iter()
                            .map(|line| {
                                if cols.len() == 1 {
                                    // {"col": v} -> v
                                    let v: serde_json::Value =
                                        serde_json::from_slice(&line).unwrap_or_default();
                                    v.as_object()
                                        .and_then(|o| o.values().next())
                                        .map(|x| x.to_string().into_bytes())
                                } else {
                                    Some(line)
                                }
                            })
                            .collect(),
                    )
                }
            };
            let bytes_col = |i: usize| -> Result<arrow::array::BinaryArray> {
                Ok(arrow::compute::cast(b.column(i), &DataType::Binary)?
                    .as_binary::<i32>()
                    .clone())
            };
            let value_col = l.value.map(bytes_col).transpose()?;
            let key_col = l.key.map(bytes_col).transpose()?;
            let topic_col = l
                .topic
                .map(|i| arrow::compute::cast(b.column(i), &DataType::Utf8))
                .transpose()?;
            let partition_col = l.partition.map(|i| {
                b.column(i)
                    .as_primitive::<arrow::datatypes::Int32Type>()
                    .clone()
            });
            let headers_col = l
                .headers
                .and_then(|i| b.column(i).as_any().downcast_ref::<ListArray>().cloned());
            for i in 0..b.num_rows() {
                let topic: &str = match (&self.topic, &topic_col) {
                    (Some(t), _) => t,
                    (None, Some(c)) => {
                        let c = c.as_string::<i32>();
                        if c.is_null(i) {
                            return Err(self.err(format!("row {i} has a null topic")));
                        }
                        c.value(i)
                    }
                    (None, None) => unreachable!("checked in layout"),
                };
                let value: Option<&[u8]> = match (&values_json, &value_col) {
                    (Some(lines), _) => Some(&lines[i]),
                    (None, Some(c)) => c.is_valid(i).then(|| c.value(i)),
                    (None, None) => None,
                };
                let key: Option<&[u8]> = match (&key_col, &key_lines) {
                    (Some(c), _) => c.is_valid(i).then(|| c.value(i)),
                    (None, Some(k)) => k[i].as_deref(),
                    (None, None) => None,
                };
                let mut rec: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic);
                if let Some(v) = value {
                    rec = rec.payload(v);
                }
                if let Some(k) = key {
                    rec = rec.key(k);
                }
                if let Some(p) = &partition_col {
                    if p.is_valid(i) {
                        rec = rec.partition(p.value(i));
                    }
                }
                if let Some(h) = &headers_col {
                    if h.is_valid(i) {
                        rec = rec.headers(headers(&h.value(i)));
                    }
                }
                self.send_one(rec, deadline)?;
                n += 1;
                if n % 1024 == 0 {
                    self.rt
                        .as_ref()
                        .expect("open")
                        .producer
                        .poll(Duration::ZERO);
                }
            }
        }
        Ok(n)
    }

    /// Queues one record; while librdkafka's queue is full, serves delivery
    /// reports until it has room, failing at the batch's `deadline` (or at the
    /// first failed delivery: the broker is down or rejects the records).
    fn send_one(&self, mut rec: BaseRecord<'_, [u8], [u8]>, deadline: Instant) -> Result<()> {
        let p = &self.rt.as_ref().expect("open").producer;
        loop {
            match p.send(rec) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    self.check_delivery()?;
                    if Instant::now() >= deadline {
                        return Err(self.kerr(
                            "the send queue stayed full until the batch's delivery deadline",
                            KafkaError::MessageProduction(RDKafkaErrorCode::MessageTimedOut),
                        ));
                    }
                    p.poll(remaining(deadline).min(Duration::from_millis(50)));
                    rec = r;
                }
                Err((e, r)) => {
                    return Err(self.kerr(&format!("cannot send a record to `{}`", r.topic), e))
                }
            }
        }
    }

    fn check_delivery(&self) -> Result<()> {
        let rt = self.rt.as_ref().expect("open");
        let failed = rt.producer.context().take_failure();
        if let Some(f) = failed {
            return Err(self.err(format!(
                "{f} (Kafka at {})",
                self.bootstrap.as_deref().unwrap_or("?")
            )));
        }
        Ok(())
    }

    /// Waits for every queued record of batch `batch_id` to be delivered
    /// by `deadline` ([`flush_promptly`]); a failed delivery is the error
    /// (it says more than the wait's timeout).
    fn deliver(&self, batch_id: i64, deadline: Instant) -> Result<()> {
        let rt = self.rt.as_ref().expect("open");
        let flushed = flush_promptly(&rt.producer, deadline);
        self.check_delivery()?;
        flushed.map_err(|e| {
            self.kerr(
                &format!("cannot deliver batch {batch_id} within the delivery timeout"),
                e,
            )
        })
    }

    fn add_transactional(&mut self, batch_id: i64, batches: &[RecordBatch]) -> Result<()> {
        let marker = self.rt.as_ref().and_then(|r| r.last_committed);
        if exactly_once::written_before(marker, batch_id) {
            exactly_once::log_skipped(&self.description(), batch_id);
            return Ok(());
        }
        if batches.iter().all(|b| b.num_rows() == 0) {
            return Ok(()); // a re-run writes nothing either: nothing to fence
        }
        self.ensure_marker_topic(batches)?;
        let deadline = Instant::now() + self.timeout;
        {
            let rt = self.rt.as_ref().expect("open");
            rt.producer
                .begin_transaction()
                .map_err(|e| self.kerr("cannot begin a transaction", e))?;
        }
        let result = (|| -> Result<()> {
            self.send_all(batches, deadline)?;
            let rt = self.rt.as_ref().expect("open");
            let m = rt.marker.as_ref().expect("exactly once has a marker");
            let topic = m.topic.as_deref().expect("ensured above");
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition_offset(topic, 0, KafkaOffset::Offset(batch_id + 1))
                .map_err(|e| self.kerr("marker", e))?;
            if let Some(mut e) = tpl.find_partition(topic, 0) {
                e.set_metadata(format!("weir query {} batch {batch_id}", rt.query_id));
            }
            let cgm = m
                .consumer
                .group_metadata()
                .ok_or_else(|| self.err("no consumer group metadata for the batch marker"))?;
            retry_transient_within(remaining(deadline), |left| {
                rt.producer.send_offsets_to_transaction(&tpl, &cgm, left)
            })
            .map_err(|e| self.kerr("cannot add the batch marker to the transaction", e))?;
            // The rows are queued (and possibly sent), the marker added: a
            // crash now leaves an open transaction the restart aborts.
            failpoint("kafka_after_send", batch_id);
            // A failed delivery says more than the commit's refusal would.
            self.deliver(batch_id, deadline)?;
            retry_transient_within(remaining(deadline), |left| {
                rt.producer.commit_transaction(left)
            })
            .map_err(|e| {
                self.kerr(
                    &format!("cannot commit the transaction of batch {batch_id}"),
                    e,
                )
            })?;
            // Rows and marker committed; commits/N not yet written: the
            // restart re-runs the batch and the marker skips it.
            failpoint("kafka_after_commit", batch_id);
            Ok(())
        })();
        match result {
            Ok(()) => {
                if let Some(rt) = &mut self.rt {
                    rt.last_committed = Some(batch_id);
                }
                Ok(())
            }
            Err(e) => {
                let rt = self.rt.as_ref().expect("open");
                // Best effort, briefly: a restart's init_transactions aborts it anyway.
                let abort = remaining(deadline).max(Duration::from_secs(1));
                if let Err(a) = rt.producer.abort_transaction(abort) {
                    tracing::warn!("aborting the transaction of batch {batch_id} failed too: {a}");
                }
                let _ = rt.producer.context().take_failure();
                Err(e)
            }
        }
    }

    /// With a `topic` column: the marker goes to the first topic written,
    /// recorded under the checkpoint before the first transaction.
    fn ensure_marker_topic(&mut self, batches: &[RecordBatch]) -> Result<()> {
        let rt = self.rt.as_mut().expect("open");
        let m = rt.marker.as_mut().expect("exactly once has a marker");
        if m.topic.is_some() {
            return Ok(());
        }
        let col = rt.layout.topic.expect("no topic option: a topic column");
        let first = batches
            .iter()
            .find(|b| b.num_rows() > 0)
            .map(|b| arrow::compute::cast(b.column(col), &DataType::Utf8))
            .transpose()?
            .and_then(|c| {
                let c = c.as_string::<i32>();
                c.is_valid(0).then(|| c.value(0).to_string())
            });
        let Some(t) = first else {
            return Err(WeirError::Sink {
                sink: "KafkaSink".into(),
                message: "the first row has a null topic".into(),
            });
        };
        // Create-once: a restart reads it back (and never writes it again),
        // so every marker of the query is looked up in the topic it went
        // to. A different topic recorded meanwhile is another run's.
        match m.file.put_create(MARKER_TOPIC, t.as_bytes())? {
            Created::Created => {}
            Created::Exists if m.file.get(MARKER_TOPIC)?.as_deref() == Some(t.as_bytes()) => {}
            Created::Exists => {
                return Err(WeirError::checkpoint(
                    m.file.display_path(MARKER_TOPIC),
                    "another run of this query recorded a different marker topic at the same time: only one run may use a checkpoint location; stop the other run",
                ))
            }
        }
        m.topic = Some(t);
        Ok(())
    }
}

/// The time left until `deadline` (zero once it passed).
fn remaining(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

/// Waits until every record queued on `producer` is delivered or failed,
/// serving its delivery reports, by `deadline`.
///
/// rdkafka's `flush` (which its `commit_transaction` calls first) polls in
/// 100 ms slices that never end early, so a batch delivered in 4 ms waited
/// 100 ms: the Kafka pipeline's batches spent most of their sink time there.
/// This serves what is queued without blocking and sleeps 1 ms between
/// looks (a timed `poll` shorter than a few ms would spin: rdkafka rounds
/// its remaining wait down to whole milliseconds); the flush inside
/// `commit_transaction` then finds nothing in flight and returns at once.
/// Past the first 10 ms (a slow or busy broker) the pause doubles up to
/// 16 ms, so that many tasks waiting at once do not wake a thousand times
/// a second each.
fn flush_promptly(producer: &BaseProducer<Delivery>, deadline: Instant) -> KafkaResult<()> {
    const PROMPT: Duration = Duration::from_millis(10);
    const MAX_PAUSE: Duration = Duration::from_millis(16);
    let start = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        // Serves at most one queued event (delivery reports come one per
        // produce request), never blocking.
        producer.poll(Duration::ZERO);
        if producer.in_flight_count() == 0 {
            return Ok(());
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut));
        }
        std::thread::sleep(pause.min(deadline - now));
        if now - start >= PROMPT {
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }
}

/// The query id a marker's metadata (`weir query <id> batch <n>`) names.
fn marker_query(meta: &str) -> Option<&str> {
    let rest = meta.strip_prefix("weir query ")?;
    let (id, _) = rest.rsplit_once(" batch ")?;
    Some(id)
}

/// A consumer of the marker group `group`, for reading and committing the
/// batch marker (never for reading records).
fn marker_consumer(bootstrap: &str, group: &str) -> rdkafka::error::KafkaResult<BaseConsumer> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
}

/// Rows as JSON object lines (Arrow's JSON writer: timestamps ISO-8601).
fn json_lines(b: &RecordBatch) -> Result<Vec<Vec<u8>>> {
    let mut w = arrow::json::LineDelimitedWriter::new(Vec::new());
    w.write(b)?;
    w.finish()?;
    let buf = w.into_inner();
    Ok(buf
        .split(|c| *c == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect())
}

/// One row's headers from `array<struct<key, value>>`.
fn headers(list: &dyn Array) -> OwnedHeaders {
    let mut out = OwnedHeaders::new();
    let Some(s) = list.as_any().downcast_ref::<StructArray>() else {
        return out;
    };
    let keys = arrow::compute::cast(s.column(0), &DataType::Utf8).ok();
    let vals = arrow::compute::cast(s.column(1), &DataType::Binary).ok();
    if let (Some(k), Some(v)) = (keys, vals) {
        let (k, v) = (k.as_string::<i32>(), v.as_binary::<i32>());
        for i in 0..s.len() {
            if k.is_null(i) {
                continue;
            }
            out = out.insert(Header {
                key: k.value(i),
                value: v.is_valid(i).then(|| v.value(i)),
            });
        }
    }
    out
}

/// `format("kafka")`: every option as [`KafkaSink::option`] reads it.
pub(super) fn from_options(
    o: &super::SinkOptions,
) -> std::result::Result<super::BoxSink, weir_plan::connectors::OptionError> {
    Ok(Box::new(KafkaSink::from_options(o.given())))
}

impl Sink for KafkaSink {
    fn for_task(&self, task: &str, _mode: weir_plan::OutputMode) -> Result<BoxSink> {
        // One transactional producer per task (Kafka Streams' exactly-once
        // v2): the task's query id names it, so the task's next owner
        // fences the last one; a configured id gets the task appended.
        Ok(Box::new(KafkaSink {
            bootstrap: self.bootstrap.clone(),
            topic: self.topic.clone(),
            guarantee: self.guarantee,
            transactional_id: self
                .transactional_id
                .as_ref()
                .map(|t| format!("{t}-{task}")),
            marker_topic: self.marker_topic.clone(),
            json_values: self.json_values,
            key_columns: self.key_columns.clone(),
            whole_rows: self.whole_rows,
            kafka_conf: self.kafka_conf.clone(),
            timeout: self.timeout,
            option_error: self.option_error.clone(),
            rt: None,
        }))
    }

    fn description(&self) -> String {
        let mode = match self.guarantee {
            DeliveryGuarantee::ExactlyOnce => "exactly-once",
            DeliveryGuarantee::AtLeastOnce => "at-least-once",
        };
        format!(
            "KafkaSink[{}, {mode}]",
            self.topic.as_deref().unwrap_or("topic column")
        )
    }

    fn kind(&self) -> weir_plan::SinkKind {
        if self.json_values {
            weir_plan::SinkKind::KafkaJson
        } else {
            weir_plan::SinkKind::Kafka
        }
    }

    fn open(&mut self, ctx: &SinkContext) -> Result<()> {
        if let Some(e) = &self.option_error {
            return Err(self.err(e.clone()));
        }
        if let Some(t) = &self.topic {
            crate::connector::check_sink_option("kafka", "topic", t)?;
        }
        let bootstrap = match &self.bootstrap {
            Some(b) if !b.trim().is_empty() => b.clone(),
            _ => {
                return Err(
                    self.err("kafka.bootstrap.servers is required: KafkaSink::new(\"host:port\")")
                )
            }
        };
        let layout = self.layout(&ctx.schema)?;
        let query_id = ctx.query_id.clone();
        let mut conf = ClientConfig::new();
        let exactly_once = self.guarantee == DeliveryGuarantee::ExactlyOnce;
        let mut timeout_ms = self.timeout.as_millis().min(i32::MAX as u128) as u64;
        if exactly_once {
            // A transaction may not outlive the broker's default
            // transaction.max.timeout.ms (15 minutes).
            timeout_ms = timeout_ms.min(900_000);
        }
        conf.set("bootstrap.servers", &bootstrap)
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("linger.ms", "5")
            // No record outlives the batch's delivery deadline in the queue.
            .set("message.timeout.ms", timeout_ms.to_string());
        let txn_id = self
            .transactional_id
            .clone()
            .unwrap_or_else(|| format!("weir-{query_id}"));
        if exactly_once {
            // librdkafka wants message.timeout.ms <= transaction.timeout.ms.
            conf.set("transactional.id", &txn_id)
                .set("transaction.timeout.ms", timeout_ms.max(60_000).to_string());
        }
        for (k, v) in &self.kafka_conf {
            conf.set(k, v);
        }
        let producer: BaseProducer<Delivery> = conf
            .create_with_context(Delivery::default())
            .map_err(|e| self.kerr("cannot create the Kafka producer", e))?;
        let mut marker = None;
        if exactly_once {
            // Fences older producers of this query and aborts their open transaction.
            retry_transient_within(self.timeout, |left| producer.init_transactions(left)).map_err(
                |e| {
                    self.kerr(
                        &format!("cannot init transactions for transactional.id `{txn_id}`"),
                        e,
                    )
                },
            )?;
            // The marker is the query's, whatever the transactional id.
            let group = format!("weir-{query_id}");
            let consumer = marker_consumer(&bootstrap, &group)
                .map_err(|e| self.kerr("cannot create the marker consumer", e))?;
            let file = ctx.checkpoint.child("sinks/kafka")?;
            let topic = match self.marker_topic.clone().or_else(|| self.topic.clone()) {
                Some(t) => Some(t),
                None => file
                    .get(MARKER_TOPIC)?
                    .map(|b| String::from_utf8_lossy(&b).trim().to_string()),
            };
            marker = Some(Marker {
                consumer,
                group,
                topic,
                file,
            });
        }
        let last_committed = match &marker {
            Some(m) => self.last_committed(m, &query_id)?,
            None => None,
        };
        if let Some(c) = last_committed {
            tracing::info!(transactional_id = %txn_id, "Kafka sink: batches up to {c} are already in Kafka");
        }
        self.rt = Some(Runtime {
            producer,
            layout,
            query_id,
            marker,
            last_committed,
        });
        Ok(())
    }

    fn add_batch(&mut self, batch_id: i64, batches: &[RecordBatch]) -> Result<()> {
        match self.guarantee {
            DeliveryGuarantee::ExactlyOnce => self.add_transactional(batch_id, batches),
            DeliveryGuarantee::AtLeastOnce => {
                let deadline = Instant::now() + self.timeout;
                self.send_all(batches, deadline)?;
                self.deliver(batch_id, deadline)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{Field, Schema};
    use std::sync::Arc;

    #[test]
    fn layout_needs_a_topic_and_a_value() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("page", DataType::Utf8, true),
            Field::new("views", DataType::Int64, true),
        ]));
        let e = KafkaSink::new("x:1")
            .layout(&schema)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no topic"), "{e}");
        let e = KafkaSink::new("x:1")
            .topic("t")
            .layout(&schema)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no `value` column") && e.contains("page, views"),
            "{e}"
        );
        let l = KafkaSink::new("x:1")
            .topic("t")
            .json_values()
            .key_columns(&["page"])
            .layout(&schema)
            .unwrap();
        assert_eq!(l.json_value, vec![1]);
        assert_eq!(l.key_cols, vec![0]);
    }

    #[test]
    fn rows_become_json_lines() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("page", DataType::Utf8, true),
            Field::new("n", DataType::Int64, true),
        ]));
        let b = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(arrow::array::StringArray::from(vec!["/a", "/b"])),
                Arc::new(arrow::array::Int64Array::from(vec![1, 2])),
            ],
        )
        .unwrap();
        let lines = json_lines(&b).unwrap();
        assert_eq!(lines[1], br#"{"page":"/b","n":2}"#.to_vec());
    }

    #[test]
    fn options_parse() {
        let s = KafkaSink::from_options([
            ("kafka.bootstrap.servers", "h:1"),
            ("topic", "out"),
            ("deliveryGuarantee", "at-least-once"),
            ("valueFormat", "json"),
            ("keyColumns", "page, window"),
        ]);
        assert!(s.option_error.is_none());
        assert_eq!(s.guarantee, DeliveryGuarantee::AtLeastOnce);
        assert_eq!(s.key_columns, vec!["page", "window"]);
        assert_eq!(s.description(), "KafkaSink[out, at-least-once]");
        let s = KafkaSink::new("h:1").option("deliveryTimeoutMs", "2500");
        assert!(s.option_error.is_none());
        assert_eq!(s.timeout, Duration::from_millis(2500));
        assert_eq!(KafkaSink::new("h:1").timeout, DEFAULT_DELIVERY_TIMEOUT);
        let s = KafkaSink::new("h:1").option("deliveryTimeoutMs", "0");
        assert!(s.option_error.unwrap().contains("deliveryTimeoutMs"));
        // Names and values are checked by the connector table first.
        let s = KafkaSink::new("h:1").option("topics", "x");
        assert!(s
            .option_error
            .unwrap()
            .starts_with("unknown option `topics` for the kafka sink (options of kafka: kafka.bootstrap.servers, topic,"));
        let s = KafkaSink::new("h:1").option("valueFormat", "avro");
        assert_eq!(
            s.option_error.unwrap(),
            "unknown valueFormat `avro` (valueFormats: column, json)"
        );
        let s = KafkaSink::new("h:1").option("kafka.transactional.id", "t");
        assert_eq!(s.transactional_id.as_deref(), Some("t"));
    }

    #[test]
    fn marker_metadata_names_its_query() {
        assert_eq!(marker_query("weir query abc-1 batch 7"), Some("abc-1"));
        assert_eq!(
            marker_query("weir query a batch b batch 7"),
            Some("a batch b")
        );
        assert_eq!(marker_query(""), None);
        assert_eq!(marker_query("someone else's metadata"), None);
    }
}
