//! Kafka source offsets: per topic-partition positions as Spark writes them
//! to the offsets log (`{"clicks":{"0":42,"1":40}}`, each the next offset to
//! read), the `startingOffsets` forms, and Spark's `maxOffsetsPerTrigger`
//! split across partitions in proportion to their lag.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// A topic and partition.
pub type TopicPartition = (String, i32);

/// Next offset to read, per topic-partition, in (topic, partition) order.
pub type PartitionOffsets = BTreeMap<TopicPartition, i64>;

/// In `startingOffsets` JSON: the partition's earliest offset (Spark's `-2`).
pub const EARLIEST: i64 = -2;
/// In `startingOffsets` JSON: the partition's latest offset (Spark's `-1`).
pub const LATEST: i64 = -1;

/// Offsets as Spark's `KafkaSourceOffset` JSON: `{"topic":{"partition":offset}}`.
pub fn to_json(offsets: &PartitionOffsets) -> Value {
    let mut topics: Map<String, Value> = Map::new();
    for ((t, p), o) in offsets {
        let e = topics
            .entry(t.clone())
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(m) = e {
            m.insert(p.to_string(), Value::from(*o));
        }
    }
    Value::Object(topics)
}

/// Parses `{"topic":{"partition":offset}}` (also the `startingOffsets` and
/// `assign`-with-offsets form). Errors say what is wrong.
pub fn from_json(v: &Value) -> Result<PartitionOffsets, String> {
    let obj = v
        .as_object()
        .ok_or_else(|| format!("expected {{\"topic\":{{\"0\":23}}}}, found {v}"))?;
    let mut out = PartitionOffsets::new();
    for (topic, parts) in obj {
        let parts = parts.as_object().ok_or_else(|| {
            format!("topic `{topic}`: expected {{\"partition\": offset}}, found {parts}")
        })?;
        for (p, o) in parts {
            let p: i32 = p
                .parse()
                .map_err(|_| format!("topic `{topic}`: `{p}` is not a partition number"))?;
            let o = o
                .as_i64()
                .ok_or_else(|| format!("{topic}-{p}: `{o}` is not an offset"))?;
            out.insert((topic.clone(), p), o);
        }
    }
    Ok(out)
}

/// Parses Spark's `assign` option, `{"topic":[0,1]}`, by the connector
/// table's rule ([`weir_plan::connectors::assign`]), as `stream_query!` and
/// [`super::KafkaSource::assign`] check it.
pub fn parse_assign(text: &str) -> Result<Vec<TopicPartition>, String> {
    weir_plan::connectors::assign("assign", text).map_err(|e| e.to_string())
}

/// Spark's `KafkaMicroBatchStream.rateLimit`: at most `limit` offsets in
/// total, each partition taking its share in proportion to its lag (a
/// partition with a share below one still gets one, so none starves; no
/// partition goes past its `until`). `from` holds every partition's start.
pub fn rate_limit(
    limit: u64,
    from: &PartitionOffsets,
    until: &PartitionOffsets,
) -> PartitionOffsets {
    let sizes: BTreeMap<&TopicPartition, i64> = until
        .iter()
        .filter_map(|(tp, end)| {
            let begin = *from.get(tp)?;
            // Saturating: a damaged log's negative start must not panic.
            let size = end.saturating_sub(begin);
            (size > 0).then_some((tp, size))
        })
        .collect();
    let total: f64 = sizes.values().map(|s| *s as f64).sum();
    if total < 1.0 {
        return until.clone();
    }
    until
        .iter()
        .map(|(tp, end)| {
            let v = match sizes.get(tp) {
                Some(size) => {
                    let begin = from[tp];
                    let prorate = limit as f64 * (*size as f64 / total);
                    let prorate = if prorate < 1.0 {
                        prorate.ceil()
                    } else {
                        prorate.floor()
                    } as i64;
                    begin.saturating_add(prorate).min(*end)
                }
                None => *end,
            };
            (tp.clone(), v)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_negative_start_from_a_damaged_log_does_not_panic_the_rate_limit() {
        let tp = ("t".to_string(), 0);
        let from: PartitionOffsets = [(tp.clone(), -3)].into_iter().collect();
        let until: PartitionOffsets = [(tp.clone(), 5)].into_iter().collect();
        assert_eq!(rate_limit(10, &from, &until)[&tp], 5);
        let from: PartitionOffsets = [(tp.clone(), i64::MIN)].into_iter().collect();
        assert_eq!(rate_limit(10, &from, &until)[&tp], i64::MIN + 10);
    }

    #[test]
    fn assign_refuses_partitions_out_of_range() {
        assert!(parse_assign(r#"{"t":[4294967296]}"#).is_err());
        assert!(parse_assign(r#"{"t":[-1]}"#).is_err());
        assert_eq!(parse_assign(r#"{"t":[1,0]}"#).unwrap().len(), 2);
    }

    use super::*;

    fn offs(v: &[(&str, i32, i64)]) -> PartitionOffsets {
        v.iter()
            .map(|(t, p, o)| ((t.to_string(), *p), *o))
            .collect()
    }

    #[test]
    fn json_round_trips_in_sparks_shape() {
        let o = offs(&[("clicks", 0, 5), ("clicks", 1, 7), ("views", 0, 1)]);
        let j = to_json(&o);
        assert_eq!(j.to_string(), r#"{"clicks":{"0":5,"1":7},"views":{"0":1}}"#);
        assert_eq!(from_json(&j).unwrap(), o);
        assert!(from_json(&serde_json::json!({"t": {"x": 1}})).is_err());
        assert!(from_json(&serde_json::json!([1])).is_err());
    }

    #[test]
    fn assign_parses_topic_partition_lists() {
        assert_eq!(
            parse_assign(r#"{"b":[1,0],"a":[2]}"#).unwrap(),
            vec![("a".into(), 2), ("b".into(), 0), ("b".into(), 1)]
        );
        assert!(parse_assign("[1]").is_err());
        // Spark assigns nothing here; weir refuses it, as the macro does.
        assert!(parse_assign("{}").is_err());
        assert!(parse_assign(r#"{"t":[]}"#).is_err());
    }

    #[test]
    fn rate_limit_splits_by_lag_like_spark() {
        // lags 100, 50, 10 (total 160); limit 32 -> 20, 10, 2
        let from = offs(&[("t", 0, 0), ("t", 1, 0), ("t", 2, 0)]);
        let until = offs(&[("t", 0, 100), ("t", 1, 50), ("t", 2, 10)]);
        assert_eq!(
            rate_limit(32, &from, &until),
            offs(&[("t", 0, 20), ("t", 1, 10), ("t", 2, 2)])
        );
        // a tiny share rounds up to one offset
        let until = offs(&[("t", 0, 1000), ("t", 1, 1), ("t", 2, 0)]);
        assert_eq!(
            rate_limit(10, &from, &until),
            offs(&[("t", 0, 9), ("t", 1, 1), ("t", 2, 0)])
        );
        // nothing to read: until as is
        assert_eq!(rate_limit(10, &until, &until), until);
    }
}
