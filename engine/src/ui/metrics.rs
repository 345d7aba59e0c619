//! `GET /metrics`: every query's last progress in Prometheus' text format.
//!
//! Each UI server has its own registry; each scrape sets the gauges
//! afresh from each query's [`last_progress`](crate::StreamingQuery::last_progress),
//! so what Prometheus reads is what the JSON API shows. Every series has
//! the labels `name` (the query name, empty when unnamed), `id` and
//! `run_id`. Durations and the watermark are in milliseconds, as in
//! Spark's progress JSON:
//!
//! | metric | extra labels | from the last progress |
//! |---|---|---|
//! | `weir_query_active` | | 1 while the query runs, 0 once it stopped or failed |
//! | `weir_query_failed` | | 1 when the query ended with an error |
//! | `weir_query_latest_batch_id` | | `batchId` |
//! | `weir_query_last_progress_timestamp_ms` | | `timestamp` (epoch ms; alert on a stale one) |
//! | `weir_query_input_rows` | | `numInputRows` |
//! | `weir_query_input_rows_per_second` | | `inputRowsPerSecond` |
//! | `weir_query_processed_rows_per_second` | | `processedRowsPerSecond` |
//! | `weir_query_batch_duration_ms` | | `durationMs.triggerExecution` |
//! | `weir_query_operation_duration_ms` | `operation` | each `durationMs` entry (`addBatch` holds the sink's write and commit, `commitOffsets` the checkpoint's commit) |
//! | `weir_query_watermark_ms` | | `eventTime.watermark` (epoch ms), when the query has one |
//! | `weir_query_output_rows` | | `sink.numOutputRows` |
//! | `weir_state_rows_total`, `weir_state_rows_updated`, `weir_state_rows_removed` | `operator`, `operator_name` | `stateOperators[i].numRowsTotal`, `numRowsUpdated`, `numRowsRemoved` |
//! | `weir_state_memory_used_bytes` | `operator`, `operator_name` | `memoryUsedBytes` |
//! | `weir_state_rows_dropped_by_watermark` | `operator`, `operator_name` | `numRowsDroppedByWatermark` |
//! | `weir_state_commit_time_ms` | `operator`, `operator_name` | `commitTimeMs` |
//! | `weir_state_custom_metric` | `operator`, `operator_name`, `metric` | each `customMetrics` entry: `nextEvictionTimeMs` (epoch ms: when the earliest open window closes), `nextEvictionWindowStartMs`, `numLateRowsToSideOutput` (late rows sent to the side output), ... |
//! | `weir_source_input_rows` | `source`, `source_index` | `sources[i].numInputRows` |
//! | `weir_source_lag_offsets` | `source`, `source_index` | offsets the source has beyond this batch's end, summed over partitions (Kafka) |
//! | `weir_source_metric` | `source`, `source_index`, `metric` | each numeric `sources[i].metrics` entry (Kafka: `maxOffsetsBehindLatest`, ...; a watermarked source: `maxEventTimeMs`, `watermarkMs`, `watermarkDelayMs`, `holdsWatermark`) |

use std::sync::Mutex;

use prometheus::{Encoder, GaugeVec, Opts, Registry, TextEncoder};
use serde_json::Value;

use crate::error::{Result, WeirError};
use crate::progress::{SourceProgress, StreamingQueryProgress};
use crate::StreamingQuery;

const QUERY: &[&str] = &["name", "id", "run_id"];
const OPERATION: &[&str] = &["name", "id", "run_id", "operation"];
const OPERATOR: &[&str] = &["name", "id", "run_id", "operator", "operator_name"];
const OPERATOR_METRIC: &[&str] = &[
    "name",
    "id",
    "run_id",
    "operator",
    "operator_name",
    "metric",
];
const SOURCE: &[&str] = &["name", "id", "run_id", "source", "source_index"];
const SOURCE_METRIC: &[&str] = &["name", "id", "run_id", "source", "source_index", "metric"];

/// The gauges of one UI server's `/metrics`.
pub(crate) struct Metrics {
    registry: Registry,
    gauges: Gauges,
    /// One scrape at a time: each resets and refills the gauges.
    scrape: Mutex<()>,
}

struct Gauges {
    active: GaugeVec,
    failed: GaugeVec,
    batch_id: GaugeVec,
    progress_ts: GaugeVec,
    input_rows: GaugeVec,
    input_rate: GaugeVec,
    process_rate: GaugeVec,
    batch_ms: GaugeVec,
    operation_ms: GaugeVec,
    watermark: GaugeVec,
    output_rows: GaugeVec,
    state_total: GaugeVec,
    state_updated: GaugeVec,
    state_removed: GaugeVec,
    state_memory: GaugeVec,
    state_dropped: GaugeVec,
    state_commit_ms: GaugeVec,
    state_custom: GaugeVec,
    source_rows: GaugeVec,
    source_lag: GaugeVec,
    source_metric: GaugeVec,
}

impl Gauges {
    fn all(&self) -> [&GaugeVec; 21] {
        [
            &self.active,
            &self.failed,
            &self.batch_id,
            &self.progress_ts,
            &self.input_rows,
            &self.input_rate,
            &self.process_rate,
            &self.batch_ms,
            &self.operation_ms,
            &self.watermark,
            &self.output_rows,
            &self.state_total,
            &self.state_updated,
            &self.state_removed,
            &self.state_memory,
            &self.state_dropped,
            &self.state_commit_ms,
            &self.state_custom,
            &self.source_rows,
            &self.source_lag,
            &self.source_metric,
        ]
    }
}

/// Sets the gauge of `vec` with these label values (a label count mismatch,
/// a bug, is logged instead of panicking the UI).
fn set(vec: &GaugeVec, labels: &[&str], v: f64) {
    match vec.get_metric_with_label_values(labels) {
        Ok(g) => g.set(v),
        Err(e) => tracing::warn!("weir /metrics: {e}"),
    }
}

impl Metrics {
    /// A registry with every weir gauge.
    pub(crate) fn new() -> Result<Metrics> {
        let registry = Registry::new();
        let gauge = |name: &str, help: &str, labels: &[&str]| -> Result<GaugeVec> {
            let g = GaugeVec::new(Opts::new(name, help), labels)
                .map_err(|e| WeirError::Config(format!("metric {name}: {e}")))?;
            registry
                .register(Box::new(g.clone()))
                .map_err(|e| WeirError::Config(format!("metric {name}: {e}")))?;
            Ok(g)
        };
        let gauges = Gauges {
            active: gauge(
                "weir_query_active",
                "1 while the query runs, 0 once it stopped or failed.",
                QUERY,
            )?,
            failed: gauge(
                "weir_query_failed",
                "1 when the query ended with an error.",
                QUERY,
            )?,
            batch_id: gauge(
                "weir_query_latest_batch_id",
                "The last batch's id.",
                QUERY,
            )?,
            progress_ts: gauge(
                "weir_query_last_progress_timestamp_ms",
                "When the last batch's trigger started (epoch ms).",
                QUERY,
            )?,
            input_rows: gauge(
                "weir_query_input_rows",
                "Rows the last batch read from all sources (numInputRows).",
                QUERY,
            )?,
            input_rate: gauge(
                "weir_query_input_rows_per_second",
                "Input rows per second since the previous trigger (inputRowsPerSecond).",
                QUERY,
            )?,
            process_rate: gauge(
                "weir_query_processed_rows_per_second",
                "Rows processed per second of the last batch (processedRowsPerSecond).",
                QUERY,
            )?,
            batch_ms: gauge(
                "weir_query_batch_duration_ms",
                "The last batch's duration (durationMs.triggerExecution).",
                QUERY,
            )?,
            operation_ms: gauge(
                "weir_query_operation_duration_ms",
                "The last batch's time per phase (durationMs).",
                OPERATION,
            )?,
            watermark: gauge(
                "weir_query_watermark_ms",
                "The event-time watermark (epoch ms; eventTime.watermark).",
                QUERY,
            )?,
            output_rows: gauge(
                "weir_query_output_rows",
                "Rows the last batch wrote to the sink (sink.numOutputRows).",
                QUERY,
            )?,
            state_total: gauge(
                "weir_state_rows_total",
                "Keys in the operator's state after the last batch (numRowsTotal).",
                OPERATOR,
            )?,
            state_updated: gauge(
                "weir_state_rows_updated",
                "Keys the last batch wrote (numRowsUpdated).",
                OPERATOR,
            )?,
            state_removed: gauge(
                "weir_state_rows_removed",
                "Keys the last batch removed (numRowsRemoved).",
                OPERATOR,
            )?,
            state_memory: gauge(
                "weir_state_memory_used_bytes",
                "Bytes of the operator's state in memory (memoryUsedBytes).",
                OPERATOR,
            )?,
            state_dropped: gauge(
                "weir_state_rows_dropped_by_watermark",
                "Late rows the last batch dropped (numRowsDroppedByWatermark).",
                OPERATOR,
            )?,
            state_commit_ms: gauge(
                "weir_state_commit_time_ms",
                "Time to commit the operator's state in the last batch (commitTimeMs).",
                OPERATOR,
            )?,
            state_custom: gauge(
                "weir_state_custom_metric",
                "The operator's customMetrics, e.g. nextEvictionTimeMs (epoch ms: when its earliest open window closes) and numLateRowsToSideOutput.",
                OPERATOR_METRIC,
            )?,
            source_rows: gauge(
                "weir_source_input_rows",
                "Rows the last batch read from the source.",
                SOURCE,
            )?,
            source_lag: gauge(
                "weir_source_lag_offsets",
                "Offsets the source has beyond the last batch's end, summed over partitions.",
                SOURCE,
            )?,
            source_metric: gauge(
                "weir_source_metric",
                "The source's own metrics (sources[i].metrics), e.g. Kafka's maxOffsetsBehindLatest.",
                SOURCE_METRIC,
            )?,
        };
        Ok(Metrics {
            registry,
            gauges,
            scrape: Mutex::new(()),
        })
    }

    /// The text exposition of these queries' gauges.
    pub(crate) fn render(&self, queries: &[StreamingQuery]) -> String {
        let _one = self.scrape.lock().unwrap_or_else(|p| p.into_inner());
        for g in self.gauges.all() {
            g.reset();
        }
        for q in queries {
            self.fill(q);
        }
        let mut out = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::warn!("weir /metrics: {e}");
        }
        String::from_utf8(out).unwrap_or_default()
    }

    fn fill(&self, q: &StreamingQuery) {
        let g = &self.gauges;
        let q_labels = [q.name().unwrap_or(""), q.id(), q.run_id()];
        set(&g.active, &q_labels, f64::from(u8::from(q.is_active())));
        set(
            &g.failed,
            &q_labels,
            f64::from(u8::from(q.exception().is_some())),
        );
        let Some(p) = q.last_progress() else {
            return;
        };
        set(&g.batch_id, &q_labels, p.batch_id as f64);
        if let Some(ms) = iso_ms(&p.timestamp) {
            set(&g.progress_ts, &q_labels, ms as f64);
        }
        set(&g.input_rows, &q_labels, p.num_input_rows as f64);
        set(&g.input_rate, &q_labels, p.input_rows_per_second);
        set(&g.process_rate, &q_labels, p.processed_rows_per_second);
        if let Some(ms) = p.duration_ms.get("triggerExecution") {
            set(&g.batch_ms, &q_labels, *ms as f64);
        }
        for (op, ms) in &p.duration_ms {
            set(
                &g.operation_ms,
                &[q_labels[0], q_labels[1], q_labels[2], op],
                *ms as f64,
            );
        }
        if let Some(ms) = p.event_time.get("watermark").and_then(|w| iso_ms(w)) {
            set(&g.watermark, &q_labels, ms as f64);
        }
        set(&g.output_rows, &q_labels, p.sink.num_output_rows as f64);
        self.fill_state(&q_labels, &p);
        self.fill_sources(&q_labels, &p);
    }

    fn fill_state(&self, q: &[&str; 3], p: &StreamingQueryProgress) {
        let g = &self.gauges;
        for (i, op) in p.state_operators.iter().enumerate() {
            let index = i.to_string();
            let l = [q[0], q[1], q[2], &index, &op.operator_name];
            set(&g.state_total, &l, op.num_rows_total as f64);
            set(&g.state_updated, &l, op.num_rows_updated as f64);
            set(&g.state_removed, &l, op.num_rows_removed as f64);
            set(&g.state_memory, &l, op.memory_used_bytes as f64);
            set(
                &g.state_dropped,
                &l,
                op.num_rows_dropped_by_watermark as f64,
            );
            set(&g.state_commit_ms, &l, op.commit_time_ms as f64);
            for (k, v) in &op.custom_metrics {
                let l = [q[0], q[1], q[2], &index, &op.operator_name, k];
                set(&g.state_custom, &l, *v as f64);
            }
        }
    }

    fn fill_sources(&self, q: &[&str; 3], p: &StreamingQueryProgress) {
        let g = &self.gauges;
        for (i, s) in p.sources.iter().enumerate() {
            let index = i.to_string();
            let l = [q[0], q[1], q[2], &s.description, &index];
            set(&g.source_rows, &l, s.num_input_rows as f64);
            if let Some(lag) = lag_offsets(s) {
                set(&g.source_lag, &l, lag as f64);
            }
            for (k, v) in &s.metrics {
                if let Ok(v) = v.trim().parse::<f64>() {
                    set(
                        &g.source_metric,
                        &[q[0], q[1], q[2], &s.description, &index, k],
                        v,
                    );
                }
            }
        }
    }
}

fn iso_ms(s: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.timestamp_millis())
}

/// Offsets per partition of a Kafka-style offset (`{"topic": {"0": 12}}`).
fn partition_offsets(v: &Value) -> Option<Vec<((String, String), i64)>> {
    let mut out = Vec::new();
    for (topic, parts) in v.as_object()? {
        for (part, off) in parts.as_object()? {
            out.push(((topic.clone(), part.clone()), off.as_i64()?));
        }
    }
    Some(out)
}

/// How far the source's latest offsets are beyond the batch's end, summed
/// over partitions: from `latestOffset` when it is ahead of `endOffset`,
/// else from the Kafka source's `avgOffsetsBehindLatest` (times the
/// partitions of `endOffset`). `None` for sources without partitioned
/// offsets.
pub(crate) fn lag_offsets(s: &SourceProgress) -> Option<i64> {
    let end = partition_offsets(s.end_offset.as_ref()?)?;
    if let Some(latest) = s.latest_offset.as_ref().and_then(partition_offsets) {
        if latest != end {
            let ends: std::collections::HashMap<_, _> = end.into_iter().collect();
            return Some(
                latest
                    .iter()
                    .map(|(tp, l)| (l - ends.get(tp).copied().unwrap_or(0)).max(0))
                    .sum(),
            );
        }
    }
    let avg: f64 = s.metrics.get("avgOffsetsBehindLatest")?.parse().ok()?;
    Some((avg * end.len() as f64).round() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn source(end: Value, latest: Value, avg: Option<&str>) -> SourceProgress {
        SourceProgress {
            description: "KafkaV2[Subscribe[t]]".into(),
            start_offset: None,
            end_offset: Some(end),
            latest_offset: Some(latest),
            num_input_rows: 0,
            input_rows_per_second: 0.0,
            processed_rows_per_second: 0.0,
            metrics: avg
                .map(|a| [("avgOffsetsBehindLatest".to_string(), a.to_string())].into())
                .unwrap_or_default(),
        }
    }

    #[test]
    fn the_grafana_dashboard_names_only_metrics_weir_exports() {
        use prometheus::core::Collector;
        let m = Metrics::new().unwrap();
        let names: Vec<String> = m
            .gauges
            .all()
            .iter()
            .flat_map(|g| g.desc().into_iter().map(|d| d.fq_name.clone()))
            .collect();
        let dashboard: Value =
            serde_json::from_str(include_str!("../../../examples/grafana/weir.json")).unwrap();
        let mut used = 0;
        for panel in dashboard["panels"].as_array().unwrap() {
            for t in panel["targets"].as_array().unwrap() {
                let expr = t["expr"].as_str().unwrap();
                let re = weir_names(expr);
                assert!(!re.is_empty(), "{expr}");
                for n in re {
                    assert!(names.contains(&n), "{n} (in `{expr}`) is not exported");
                    used += 1;
                }
            }
        }
        assert!(used >= 20, "{used}");
    }

    /// The `weir_...` identifiers in a PromQL expression.
    fn weir_names(expr: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut rest = expr;
        while let Some(i) = rest.find("weir_") {
            let tail = &rest[i..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            out.push(tail[..end].to_string());
            rest = &tail[end..];
        }
        out
    }

    #[test]
    fn lag_is_latest_minus_end_summed_over_partitions() {
        let s = source(
            json!({"t": {"0": 10, "1": 5}}),
            json!({"t": {"0": 14, "1": 5, "2": 3}}),
            None,
        );
        assert_eq!(lag_offsets(&s), Some(7));
        // The latest is not reported apart from the end: the source's average.
        let s = source(
            json!({"t": {"0": 10, "1": 5}}),
            json!({"t": {"0": 10, "1": 5}}),
            Some("3.5"),
        );
        assert_eq!(lag_offsets(&s), Some(7));
        // Not Kafka-shaped: no lag.
        let s = source(json!(12), json!(12), None);
        assert_eq!(lag_offsets(&s), None);
    }
}
