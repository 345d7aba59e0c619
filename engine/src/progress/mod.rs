//! Progress reports with Spark's field names and nesting
//! (`StreamingQueryProgress`), and the listener interface.

pub mod held;
pub mod listener;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use listener::{QueryListener, QueryStartedEvent, QueryTerminatedEvent};

/// One micro-batch's progress, as Spark's `StreamingQueryProgress`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamingQueryProgress {
    /// The query id (stable across restarts).
    pub id: String,
    /// This run's id.
    pub run_id: String,
    /// The query name.
    pub name: Option<String>,
    /// When the trigger started (ISO-8601).
    pub timestamp: String,
    /// The batch id.
    pub batch_id: i64,
    /// How long the batch took, trigger to report (ms; Spark's
    /// `batchDuration`, the `triggerExecution` of `durationMs`). Absent
    /// from reports written before it: read as 0.
    #[serde(default)]
    pub batch_duration: i64,
    /// Rows read from all sources.
    pub num_input_rows: i64,
    /// Input rows per second since the previous trigger.
    pub input_rows_per_second: f64,
    /// Rows processed per second of this batch's processing.
    pub processed_rows_per_second: f64,
    /// Time spent per phase (ms): addBatch, getBatch, latestOffset,
    /// queryPlanning, triggerExecution, walCommit, commitOffsets.
    pub duration_ms: BTreeMap<String, i64>,
    /// Event-time statistics and the watermark (ISO-8601): avg, max, min, watermark.
    pub event_time: BTreeMap<String, String>,
    /// One entry per stateful operator.
    pub state_operators: Vec<StateOperatorProgress>,
    /// One entry per source.
    pub sources: Vec<SourceProgress>,
    /// The sink.
    pub sink: SinkProgress,
}

impl StreamingQueryProgress {
    /// Spark-style pretty JSON.
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

/// A stateful operator's metrics for one batch (Spark's `StateOperatorProgress`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StateOperatorProgress {
    /// Operator name (`stateStoreSave` for aggregations).
    pub operator_name: String,
    /// Keys in state after the batch.
    pub num_rows_total: i64,
    /// Keys written by the batch.
    pub num_rows_updated: i64,
    /// Time to apply updates (ms).
    pub all_updates_time_ms: i64,
    /// Keys removed (evicted) by the batch.
    pub num_rows_removed: i64,
    /// Time to remove (ms).
    pub all_removals_time_ms: i64,
    /// Time to commit state (ms).
    pub commit_time_ms: i64,
    /// Bytes of state in memory.
    pub memory_used_bytes: i64,
    /// Late rows dropped (after partial aggregation, as Spark counts).
    pub num_rows_dropped_by_watermark: i64,
    /// State partitions.
    pub num_shuffle_partitions: i64,
    /// State store instances.
    pub num_state_store_instances: i64,
    /// Provider-specific metrics, and weir's own (see [`held`]): the
    /// operator's next eviction time and its late rows routed aside.
    pub custom_metrics: BTreeMap<String, i64>,
}

impl StateOperatorProgress {
    /// Zeroed metrics for an operator.
    pub fn new(name: &str) -> StateOperatorProgress {
        StateOperatorProgress {
            operator_name: name.to_string(),
            num_rows_total: 0,
            num_rows_updated: 0,
            all_updates_time_ms: 0,
            num_rows_removed: 0,
            all_removals_time_ms: 0,
            commit_time_ms: 0,
            memory_used_bytes: 0,
            num_rows_dropped_by_watermark: 0,
            num_shuffle_partitions: 1,
            num_state_store_instances: 1,
            custom_metrics: BTreeMap::new(),
        }
    }
}

/// A source's progress for one batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceProgress {
    /// The source's description.
    pub description: String,
    /// Offset before the batch.
    pub start_offset: Option<serde_json::Value>,
    /// Offset after the batch.
    pub end_offset: Option<serde_json::Value>,
    /// The latest offset the source reported.
    pub latest_offset: Option<serde_json::Value>,
    /// Rows read.
    pub num_input_rows: i64,
    /// Input rows per second.
    pub input_rows_per_second: f64,
    /// Processed rows per second.
    pub processed_rows_per_second: f64,
    /// Source-specific metrics (Spark's `metrics`, e.g. the Kafka source's
    /// `maxOffsetsBehindLatest`), and the source's watermark (see [`held`]);
    /// left out of the JSON when empty.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metrics: BTreeMap<String, String>,
}

/// The sink's progress for one batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SinkProgress {
    /// The sink's description.
    pub description: String,
    /// Rows written.
    pub num_output_rows: i64,
}

/// Formats epoch milliseconds as Spark does in progress JSON: `2024-01-01T12:00:00.000Z`.
pub fn format_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        .unwrap_or_else(|| ms.to_string())
}

/// A query's current status (Spark's `StreamingQueryStatus`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueryStatus {
    /// What the query is doing.
    pub message: String,
    /// Whether a source has data not yet processed.
    pub is_data_available: bool,
    /// Whether a trigger is running.
    pub is_trigger_active: bool,
}

impl std::fmt::Display for QueryStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&serde_json::to_string_pretty(self).unwrap_or_default())
    }
}
