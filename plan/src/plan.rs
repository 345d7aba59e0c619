//! The stream plan: sources, a DAG of nodes each applying a list of ops,
//! the output mode and the engine settings that change semantics.
//!
//! The JSON form is the conformance format (`shared/conformance/README.md`):
//! `serde_json::from_value::<StreamPlan>(scenario["plan"])` reads it.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::duration::Duration;
use crate::expr::Expr;
use crate::types::{DataType, Field};

/// A whole streaming query as data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamPlan {
    /// Streaming sources by name, each with its schema.
    pub sources: BTreeMap<String, SourceDecl>,
    /// Static (batch) tables by name, for stream-static joins.
    #[serde(default, rename = "static", skip_serializing_if = "BTreeMap::is_empty")]
    pub statics: BTreeMap<String, StaticDecl>,
    /// Nodes in dependency order; each reads a source, a static table or an earlier node.
    pub nodes: Vec<Node>,
    /// The id of the node whose rows go to the sink.
    pub result: String,
    /// How the sink receives the result table.
    pub output_mode: OutputMode,
    /// Settings that change semantics.
    #[serde(default)]
    pub conf: Conf,
    /// The sink, when known (rules check sink/mode combinations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sink: Option<SinkDecl>,
    /// The trigger, when known (rules check what continuous processing allows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<TriggerDecl>,
    /// The consumer group of a query spread over many processes
    /// (`scale_out`), if it is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_out: Option<String>,
}

/// The sink as the rules see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SinkDecl {
    /// Which sink.
    pub kind: SinkKind,
    /// Whether a checkpoint location was given.
    pub checkpoint: bool,
}

/// The kinds of sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SinkKind {
    /// Spark's `console`.
    Console,
    /// Spark's `memory`.
    Memory,
    /// Files (parquet, json, csv): append only.
    File,
    /// `foreach_batch`.
    ForeachBatch,
    /// Kafka: needs a `value` column.
    Kafka,
    /// Kafka, writing each whole row as a JSON value (weir's
    /// `KafkaSink::json_values`, beyond Spark): no `value` column needed.
    KafkaJson,
    /// Spark's `noop`: each batch computed and dropped.
    Noop,
    /// Any other sink (user-defined).
    Other,
}

impl SinkKind {
    /// Whether a query writing to this sink must be given a checkpoint
    /// location. Console, memory and noop sinks run on a temporary one when
    /// none is given (Spark's `useTempCheckpointLocation`); every other sink
    /// needs one. Unlike Spark, which also gives `foreachBatch` a temporary
    /// checkpoint, weir requires a real one for `foreach_batch` too.
    pub fn needs_checkpoint(self) -> bool {
        !matches!(self, SinkKind::Console | SinkKind::Memory | SinkKind::Noop)
    }

    /// Spark's name for the sink format.
    pub fn name(self) -> &'static str {
        match self {
            SinkKind::Console => "console",
            SinkKind::Memory => "memory",
            SinkKind::File => "file",
            SinkKind::ForeachBatch => "foreachBatch",
            SinkKind::Kafka | SinkKind::KafkaJson => "kafka",
            SinkKind::Noop => "noop",
            SinkKind::Other => "custom",
        }
    }
}

/// The trigger as the rules see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TriggerDecl {
    /// As soon as possible.
    Default,
    /// Fixed interval (ms).
    ProcessingTime(u64),
    /// Everything available now, then stop.
    AvailableNow,
    /// One batch, then stop.
    Once,
    /// Continuous processing with a checkpoint interval (ms).
    Continuous(u64),
}

/// A streaming source as the plan sees it: its schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceDecl {
    /// The columns the source produces.
    pub schema: Vec<Field>,
}

/// A static table: schema and (for tests) inline rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StaticDecl {
    /// The table's columns.
    pub schema: Vec<Field>,
    /// Inline rows; tables backed by files leave this empty.
    #[serde(default)]
    pub rows: Vec<BTreeMap<String, Value>>,
}

/// A literal value in a static table row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// Text (also timestamps, in ISO-8601).
    Str(String),
}

/// One node of the plan: an input and the ops applied to it in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// The node's id, referenced by later nodes and by `result`.
    pub id: String,
    /// A source name, a static table name or an earlier node's id.
    pub input: String,
    /// The ops, applied in order.
    #[serde(default)]
    pub ops: Vec<Op>,
}

/// One operation. Expressions are trees ([`Expr`]), written as SQL text
/// in the plan format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Keep the rows where `predicate` is true.
    Filter {
        /// A boolean expression.
        predicate: Expr,
    },
    /// Project to exactly these columns.
    Select {
        /// Output columns in order.
        columns: Vec<SelectItem>,
    },
    /// Add (or replace) one column.
    WithColumn {
        /// The column's name.
        name: String,
        /// Its expression.
        expr: Expr,
    },
    /// Declare `column` as event time with a lateness bound.
    Watermark {
        /// The event-time column (a timestamp).
        column: String,
        /// The delay threshold, e.g. `"10 minutes"`.
        delay: Duration,
    },
    /// Group by keys (time windows and columns) and aggregate.
    Aggregate {
        /// Grouping keys, in output order.
        keys: Vec<GroupKey>,
        /// Aggregates, in output order after the keys.
        aggs: Vec<AggSpec>,
    },
    /// Drop rows whose key columns were seen before.
    Dedup {
        /// The key columns.
        columns: Vec<String>,
        /// `dropDuplicatesWithinWatermark` rather than `dropDuplicates`.
        #[serde(default)]
        within_watermark: bool,
    },
    /// Join with another node or a static table; this node's rows are the left side.
    Join {
        /// The right side: a node id or a static table name.
        right: String,
        /// The join type.
        how: JoinType,
        /// The join condition, or absent when `using` is given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        on: Option<Expr>,
        /// Equi-join on these same-named columns.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        using: Option<Vec<String>>,
    },
    /// Sort the rows.
    Sort {
        /// Sort keys, most significant first.
        by: Vec<SortKey>,
    },
    /// Keep the first `n` rows.
    Limit {
        /// How many rows.
        n: u64,
    },
}

impl Op {
    /// The op's name as written in the plan format.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Filter { .. } => "filter",
            Op::Select { .. } => "select",
            Op::WithColumn { .. } => "with_column",
            Op::Watermark { .. } => "watermark",
            Op::Aggregate { .. } => "aggregate",
            Op::Dedup { .. } => "dedup",
            Op::Join { .. } => "join",
            Op::Sort { .. } => "sort",
            Op::Limit { .. } => "limit",
        }
    }

    /// True for ops that keep state across micro-batches.
    pub fn is_stateful(&self) -> bool {
        matches!(self, Op::Aggregate { .. } | Op::Dedup { .. })
    }
}

/// One output column of a select.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SelectItem {
    /// The expression.
    pub expr: Expr,
    /// Output name.
    #[serde(rename = "as")]
    pub alias: String,
}

/// A grouping key: a time window or a plain column.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum GroupKey {
    /// `window(col, size[, slide]) AS alias`.
    Window {
        /// The window definition.
        window: WindowSpec,
        /// Output column name (Spark's default is `window`).
        #[serde(rename = "as", default = "default_window_alias")]
        alias: String,
    },
    /// A column of the input.
    Column {
        /// The column name.
        column: String,
    },
}

fn default_window_alias() -> String {
    "window".to_string()
}

impl GroupKey {
    /// The output column name of this key.
    pub fn output_name(&self) -> &str {
        match self {
            GroupKey::Window { alias, .. } => alias,
            GroupKey::Column { column } => column,
        }
    }
}

/// A tumbling (no slide) or sliding time window over a timestamp.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowSpec {
    /// The timestamp column; absent when `expr` is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<String>,
    /// An expression instead of a column: `window_time(<window column>)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expr: Option<String>,
    /// Window length, e.g. `"10 minutes"` (empty for a session window).
    #[serde(default)]
    pub size: Duration,
    /// Slide interval; equal to `size` (tumbling) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slide: Option<Duration>,
    /// A session window (Spark's `session_window(col, gap)`): a session
    /// closes after this long without events for its key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gap: Option<Duration>,
}

impl WindowSpec {
    /// The column the window is computed from: `column`, or the argument of
    /// `window_time(...)` in `expr`.
    pub fn time_column(&self) -> Option<String> {
        if let Some(c) = &self.column {
            return Some(c.clone());
        }
        let e = self.expr.as_deref()?.trim();
        let lower = e.to_ascii_lowercase();
        let inner = lower.strip_prefix("window_time(")?.strip_suffix(')')?;
        let start = "window_time(".len();
        Some(e[start..start + inner.len()].trim().to_string())
    }

    /// True for a session window.
    pub fn is_session(&self) -> bool {
        self.gap.is_some()
    }

    /// True when the window is `window_time(<window column>)` of an earlier window.
    pub fn is_window_time(&self) -> bool {
        self.column.is_none() && self.expr.is_some()
    }
}

/// An aggregate function applied to a column (or `*`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AggSpec {
    /// The function.
    #[serde(rename = "fn")]
    pub func: AggFn,
    /// The input column, or `*` for `count(*)`.
    pub column: String,
    /// Output name.
    #[serde(rename = "as")]
    pub alias: String,
}

/// The aggregate functions. What each takes, returns and stores is in the
/// catalogue ([`crate::aggregates`]); a new function is a variant here and an
/// entry there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AggFn {
    /// `count(*)` or `count(col)` (non-null values).
    Count,
    /// Sum; bigint for integers, double for doubles (Spark's result types).
    Sum,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
    /// Average, always double.
    Avg,
    /// `count(DISTINCT col)`: not supported on streams (Spark's rule).
    CountDistinct,
    /// `approx_count_distinct(col[, rsd])`: HyperLogLog++ (Spark's).
    ApproxCountDistinct {
        /// The relative standard deviation asked for (Spark's default 0.05).
        rsd: Rsd,
    },
    /// `first(col[, ignoreNulls])`: the first value in arrival order.
    First {
        /// Skip nulls (Spark's default: false, a null first row is the result).
        ignore_nulls: bool,
    },
    /// `last(col[, ignoreNulls])`: the last value in arrival order.
    Last {
        /// Skip nulls (Spark's default: false).
        ignore_nulls: bool,
    },
    /// `stddev_samp` (`stddev`, `std`): sample standard deviation.
    StddevSamp,
    /// `stddev_pop`: population standard deviation.
    StddevPop,
    /// `var_samp` (`variance`): sample variance.
    VarSamp,
    /// `var_pop`: population variance.
    VarPop,
    /// `collect_list(col)` (`array_agg`): the non-null values in arrival
    /// order, as an array (bounded per group).
    CollectList,
    /// `collect_set(col)`: the distinct non-null values, as an array in
    /// the order they first arrived (bounded per group).
    CollectSet,
}

impl AggFn {
    /// The function's SQL name (Spark's canonical one, not an alias).
    pub fn name(self) -> &'static str {
        self.def().name
    }

    /// The result type over an input of type `input` (None for `*`), or
    /// `None` when the function does not take that type.
    pub fn result_type(self, input: Option<DataType>) -> Option<DataType> {
        self.def().result_type(input)
    }
}

/// The relative standard deviation of `approx_count_distinct`, kept in
/// millionths so that plans compare exactly. Between 0.01 and 0.39 (Spark
/// needs at most 0.39; below 0.01 a group's sketch would pass 16 KiB).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "f64", into = "f64")]
pub struct Rsd(u32);

impl Rsd {
    /// Spark's default, 0.05.
    pub const DEFAULT: Rsd = Rsd(50_000);
    /// The smallest accepted.
    pub const MIN: f64 = 0.01;
    /// The largest accepted (Spark's: the sketch needs at least 4 index bits).
    pub const MAX: f64 = 0.39;

    /// An rsd, or why it cannot be one.
    pub fn new(rsd: f64) -> Result<Rsd, String> {
        if !(Rsd::MIN..=Rsd::MAX).contains(&rsd) {
            return Err(format!(
                "approx_count_distinct's relative standard deviation must be between {} and {} (got {rsd})",
                Rsd::MIN,
                Rsd::MAX
            ));
        }
        Ok(Rsd((rsd * 1e6).round() as u32))
    }

    /// The value.
    pub fn value(self) -> f64 {
        self.0 as f64 / 1e6
    }

    /// The sketch's index bits, Spark's rule: `ceil(2 * log2(1.106 / rsd))`.
    pub fn precision(self) -> u8 {
        (2.0 * (1.106 / self.value()).log2()).ceil() as u8
    }
}

impl TryFrom<f64> for Rsd {
    type Error = String;
    fn try_from(v: f64) -> Result<Rsd, String> {
        Rsd::new(v)
    }
}

impl From<Rsd> for f64 {
    fn from(r: Rsd) -> f64 {
        r.value()
    }
}

/// The join types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JoinType {
    /// Inner join.
    Inner,
    /// Left outer join.
    LeftOuter,
    /// Right outer join.
    RightOuter,
    /// Full outer join.
    FullOuter,
    /// Left semi join.
    LeftSemi,
    /// Left anti join.
    LeftAnti,
}

impl JoinType {
    /// Spark's name for the join type, as its messages write it.
    pub fn spark_name(self) -> &'static str {
        match self {
            JoinType::Inner => "Inner",
            JoinType::LeftOuter => "LeftOuter",
            JoinType::RightOuter => "RightOuter",
            JoinType::FullOuter => "FullOuter",
            JoinType::LeftSemi => "LeftSemi",
            JoinType::LeftAnti => "LeftAnti",
        }
    }
}

/// One sort key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SortKey {
    /// The column.
    pub column: String,
    /// Descending order.
    #[serde(default)]
    pub desc: bool,
}

/// What the sink receives each trigger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum OutputMode {
    /// Only rows that will never change again (Spark's default).
    #[default]
    Append,
    /// Only rows that changed in this trigger.
    Update,
    /// The whole result table every trigger.
    Complete,
}

impl OutputMode {
    /// Spark's name (`Append`).
    pub fn spark_name(self) -> &'static str {
        match self {
            OutputMode::Append => "Append",
            OutputMode::Update => "Update",
            OutputMode::Complete => "Complete",
        }
    }
}

/// Engine settings that change a query's semantics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conf {
    /// `spark.sql.streaming.noDataMicroBatches.enabled` (default true).
    #[serde(default = "yes")]
    pub no_data_batches: bool,
    /// `spark.sql.streaming.multipleWatermarkPolicy` (default min).
    #[serde(default)]
    pub watermark_policy: WatermarkPolicy,
}

fn yes() -> bool {
    true
}

impl Default for Conf {
    fn default() -> Self {
        Conf {
            no_data_batches: true,
            watermark_policy: WatermarkPolicy::Min,
        }
    }
}

/// How several watermarks combine into the global one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum WatermarkPolicy {
    /// The slowest input decides (Spark's default, safe).
    #[default]
    Min,
    /// The fastest input decides (drops more late data from slower inputs).
    Max,
}

impl StreamPlan {
    /// A plan reading one source, with one node `result` holding `ops`.
    pub fn single(
        source: impl Into<String>,
        schema: Vec<Field>,
        ops: Vec<Op>,
        output_mode: OutputMode,
    ) -> StreamPlan {
        let source = source.into();
        let mut sources = BTreeMap::new();
        sources.insert(source.clone(), SourceDecl { schema });
        StreamPlan {
            sources,
            statics: BTreeMap::new(),
            nodes: vec![Node {
                id: "result".into(),
                input: source,
                ops,
            }],
            result: "result".into(),
            output_mode,
            conf: Conf::default(),
            sink: None,
            trigger: None,
            scale_out: None,
        }
    }

    /// The node with this id.
    pub fn node(&self, id: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// A stable fingerprint of the query's shape (sources, ops, output mode),
    /// recorded in the checkpoint so a changed query is refused on restart.
    pub fn fingerprint(&self) -> String {
        // FNV-1a over a canonical description: stable across builds and platforms.
        let mut desc = String::new();
        for (name, s) in &self.sources {
            desc.push_str(&format!("source {name}:"));
            for f in &s.schema {
                desc.push_str(&format!("{}:{};", f.name, f.dtype));
            }
        }
        for n in &self.nodes {
            desc.push_str(&format!("node {}<-{}:", n.id, n.input));
            for op in &n.ops {
                desc.push_str(&format!("{op:?};"));
            }
        }
        desc.push_str(&format!(
            "result {} mode {:?}",
            self.result, self.output_mode
        ));
        let mut h: u64 = 0xcbf29ce484222325;
        for b in desc.bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
        format!("{h:016x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_conformance_plan_format() {
        let json = r#"{"sources": {"events": {"schema": [{"name": "ts", "type": "timestamp"},
            {"name": "key", "type": "string"}]}},
          "nodes": [{"id": "result", "input": "events", "ops": [
            {"op": "watermark", "column": "ts", "delay": "10 minutes"},
            {"op": "aggregate", "keys": [{"window": {"column": "ts", "size": "10 minutes"}, "as": "window"},
               {"column": "key"}], "aggs": [{"fn": "count", "column": "*", "as": "count"}]}]}],
          "result": "result", "output_mode": "append",
          "conf": {"no_data_batches": true, "watermark_policy": "min"}}"#;
        let p: StreamPlan = serde_json::from_str(json).unwrap();
        assert_eq!(p.output_mode, OutputMode::Append);
        match &p.nodes[0].ops[1] {
            Op::Aggregate { keys, aggs } => {
                assert_eq!(keys[0].output_name(), "window");
                assert_eq!(keys[1].output_name(), "key");
                assert_eq!(aggs[0].func, AggFn::Count);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn window_time_names_its_column() {
        let w = WindowSpec {
            column: None,
            expr: Some("window_time(w10)".into()),
            size: "30 minutes".into(),
            slide: None,
            gap: None,
        };
        assert_eq!(w.time_column().as_deref(), Some("w10"));
        assert!(w.is_window_time());
    }

    #[test]
    fn fingerprint_changes_with_the_query() {
        let schema = vec![Field::new("ts", DataType::Timestamp)];
        let a = StreamPlan::single("s", schema.clone(), vec![], OutputMode::Append);
        let b = StreamPlan::single(
            "s",
            schema,
            vec![Op::Filter {
                predicate: "true".into(),
            }],
            OutputMode::Append,
        );
        assert_eq!(a.fingerprint(), a.clone().fingerprint());
        // Expressions and durations hash as the text they were before
        // they were typed (String fields): checkpoints keep the fingerprint.
        let filter = Op::Filter {
            predicate: "n > 0 AND page <> 'x'".into(),
        };
        assert_eq!(
            format!("{filter:?}"),
            r#"Filter { predicate: "n > 0 AND page <> 'x'" }"#
        );
        let watermark = Op::Watermark {
            column: "ts".into(),
            delay: "10 minutes".into(),
        };
        assert_eq!(
            format!("{watermark:?}"),
            r#"Watermark { column: "ts", delay: "10 minutes" }"#
        );
        assert_ne!(a.fingerprint(), b.fingerprint());
    }
}
