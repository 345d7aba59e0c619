//! The repartition topic between a scale-out query's two stages
//! ([`topic_name`]): the first stage writes each
//! row as a JSON object keyed by the stateful operator's key columns, with
//! the exactly-once Kafka sink (one transaction per batch, per task); the
//! second stage reads it with `read_committed`, so a first-stage batch
//! re-run after a crash is seen once.

use weir_plan::Field;

use super::stages::Split;
use crate::error::{Result, WeirError};
use crate::sink::{BoxSink, KafkaSink};
use crate::source::kafka::{KafkaAdmin, KafkaSource, StartingOffsets};
use crate::source::{BoxSource, DecodeExt, SharedInput};

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
    admin.create_topic(&topic, partitions.max(1) as i32)?;
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
pub(crate) fn topic_name(query: &str, query_id: &str, operator: usize) -> String {
    let id: String = query_id.chars().filter(|c| *c != '-').take(8).collect();
    format!("{query}-{id}-repartition-{operator}")
}

/// The first stage's sink: each row as JSON, keyed by the route columns.
pub(crate) fn sink(input: &SharedInput, topic: &str, split: &Split) -> BoxSink {
    let keys: Vec<&str> = split.route_by.iter().map(|s| s.as_str()).collect();
    let mut s = KafkaSink::new(&input.bootstrap)
        .topic(topic)
        .key_columns(&keys)
        .whole_rows();
    for (k, v) in &input.kafka_conf {
        s = s.option(&format!("kafka.{k}"), v);
    }
    Box::new(s)
}

/// The second stage's source: the topic's rows decoded back to `fields`.
pub(crate) fn source(input: &SharedInput, topic: &str, fields: Vec<Field>) -> BoxSource {
    let mut s = KafkaSource::new(&input.bootstrap)
        .subscribe(topic)
        .starting_offsets(StartingOffsets::Earliest);
    for (k, v) in &input.kafka_conf {
        s = s.option(&format!("kafka.{k}"), v);
    }
    Box::new(s.from_json("value", fields))
}
