//! The state fingerprint of a query, and which changes of a running query
//! keep its checkpoint usable: one definition for the `stream_query!` lock
//! files (at compile time) and the checkpoint's check (at `start()`).
//!
//! A [`StateFingerprint`] holds what a checkpoint's offsets and state depend
//! on: the sources (offsets are recorded per source, in name order), every
//! stateful operator in state-directory order (`state/<id>/`) with its key
//! and value layout and types and its watermark columns, the output mode
//! (what an aggregation keeps), the sink kind and the late-rows side output.
//! [`classify`] compares two fingerprints with Spark's "Recovery Semantics
//! after Changes in a Streaming Query" and returns each difference as a
//! [`Change`]: allowed or refused, where, what, and how to proceed.
//!
//! Filters, projections and other stateless operations are not part of the
//! fingerprint: they may change freely as long as the stateful operators'
//! inputs (the columns and types their state stores) stay the same.
//!
//! ```
//! use weir_plan::state_schema::{classify, StateFingerprint};
//! use weir_plan::{AggFn, AggSpec, DataType, Field, GroupKey, Op, OutputMode, StreamPlan};
//! let schema = vec![Field::new("page", DataType::String), Field::new("n", DataType::Int64)];
//! let agg = |func| Op::Aggregate {
//!     keys: vec![GroupKey::Column { column: "page".into() }],
//!     aggs: vec![AggSpec { func, column: "n".into(), alias: "v".into() }],
//! };
//! let old = StreamPlan::single("clicks", schema.clone(), vec![agg(AggFn::Count)], OutputMode::Update);
//! let new = StreamPlan::single("clicks", schema, vec![agg(AggFn::Sum)], OutputMode::Update);
//! let changes = classify(&StateFingerprint::of(&old), &StateFingerprint::of(&new));
//! assert!(!changes[0].allowed);
//! assert!(changes[0].message.contains("changed from count(n) to sum(n)"));
//! ```

use serde::{Deserialize, Serialize};

use crate::check::{Location, Part};
use crate::plan::{AggFn, GroupKey, JoinType, Op, OutputMode, SinkKind, StreamPlan};
use crate::resolve::{resolve, NodeSchema};
use crate::types::DataType;

/// The version of the fingerprint's format (a lock file records it).
pub const FORMAT_VERSION: u32 = 1;

/// What the refused changes' help says, after the change's own advice.
pub const REFUSED_HELP: &str = "keep the old definition, or run the changed query on a new checkpoint location (its state starts empty)";

/// What a checkpoint's offsets and state depend on, derived from a plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateFingerprint {
    /// [`FORMAT_VERSION`] when written.
    pub version: u32,
    /// The streaming sources, in name order (the order offsets are recorded in).
    pub sources: Vec<SourceState>,
    /// The stateful operators, in state-directory order (`state/<id>/`).
    pub operators: Vec<StatefulOperator>,
    /// The output mode (what an aggregation keeps in its state depends on it).
    pub output_mode: OutputMode,
    /// The sink's kind, when the plan knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sink: Option<SinkKind>,
    /// Whether rows dropped as late go to a side output, when known (the
    /// macro knows; a builder plan does not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_rows: Option<bool>,
    /// The session settings that shape state, which a plan cannot know:
    /// recorded as the rule that applies to them.
    #[serde(default = "SessionRules::current")]
    pub session: SessionRules,
}

/// The rules for the state settings that belong to the session, not the
/// query (they are not in a plan, so the fingerprint records the rule).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRules {
    /// The state store provider (`spark.sql.streaming.stateStore.providerClass`).
    pub state_store: String,
    /// The number of state partitions (`spark.sql.shuffle.partitions`).
    pub state_partitions: String,
}

impl SessionRules {
    /// The rules of this version of weir.
    pub fn current() -> SessionRules {
        SessionRules {
            state_store: "session setting, may change: the memory and RocksDB providers write the same delta and snapshot files".into(),
            state_partitions: "session default when the checkpoint is created, then fixed by the checkpoint: start() refuses another count".into(),
        }
    }
}

/// A streaming source as the checkpoint sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceState {
    /// The source's name in the plan.
    pub name: String,
    /// Its kind (`kafka`, `files`, ...), when known (the macro knows; a plan does not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Its columns.
    pub columns: Vec<StateColumn>,
}

/// A named column and its type (absent when not inferable at compile time).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateColumn {
    /// The name.
    pub name: String,
    /// The type, when known.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<DataType>,
}

/// The kinds of stateful operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperatorKind {
    /// A streaming aggregation (`groupBy(...).agg(...)`).
    Aggregate,
    /// A session-window aggregation.
    SessionWindow,
    /// `dropDuplicates`.
    Dedup,
    /// `dropDuplicatesWithinWatermark`.
    DedupWithinWatermark,
    /// A stream-stream join.
    StreamStreamJoin,
}

impl OperatorKind {
    /// The kind in words, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            OperatorKind::Aggregate => "aggregation",
            OperatorKind::SessionWindow => "session-window aggregation",
            OperatorKind::Dedup => "deduplication",
            OperatorKind::DedupWithinWatermark => "deduplication within the watermark",
            OperatorKind::StreamStreamJoin => "stream-stream join",
        }
    }
}

/// Where an operator is in its plan (not compared: a filter added before
/// it moves it without changing its state).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct OpAt {
    /// Index into `plan.nodes`.
    pub node: usize,
    /// Index into the node's ops.
    pub op: usize,
}

/// One stateful operator's state layout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatefulOperator {
    /// Its index among the stateful operators: its directory `state/<id>/`.
    pub id: usize,
    /// What it is.
    pub kind: OperatorKind,
    /// Where it is in the plan.
    #[serde(default)]
    pub at: OpAt,
    /// The state key: grouping keys, deduplication columns (empty for a join,
    /// whose state keeps whole rows: see `join`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<StateKey>,
    /// The state value: an aggregation's accumulators.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<StateValue>,
    /// The watermarked columns that evict its state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub watermark: Vec<String>,
    /// A join's type, condition and the rows each side stores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join: Option<JoinState>,
}

impl StatefulOperator {
    /// Its name in messages: "stateful operator 0 (aggregation)".
    pub fn describe(&self) -> String {
        format!("stateful operator {} ({})", self.id, self.kind.describe())
    }
}

/// One state key column: a grouping key or a deduplication column.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateKey {
    /// The input column (a window's time column).
    pub column: String,
    /// Its type.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<DataType>,
    /// For a time window: its size, slide and gap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowState>,
    /// The output name (not compared: renaming a key keeps the state).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
}

impl StateKey {
    /// The key as the user wrote it: `page`, `window(ts, "1 minute")`.
    pub fn describe(&self) -> String {
        match &self.window {
            None => self.column.clone(),
            Some(w) => match (&w.gap, &w.slide) {
                (Some(g), _) => format!("session_window({}, \"{g}\")", self.column),
                (None, Some(s)) => format!("window({}, \"{}\", \"{s}\")", self.column, w.size),
                (None, None) => format!("window({}, \"{}\")", self.column, w.size),
            },
        }
    }
}

/// A time window's shape: the groups the state holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowState {
    /// The window size (empty for a session window).
    pub size: String,
    /// The slide, when sliding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slide: Option<String>,
    /// A session window's gap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gap: Option<String>,
}

/// One accumulator of an aggregation's state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateValue {
    /// The aggregate's output name (not compared: the state is positional).
    pub name: String,
    /// The function.
    #[serde(rename = "fn")]
    pub func: AggFn,
    /// The input column (`*` for `count(*)`).
    pub column: String,
    /// The input's type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<DataType>,
}

impl StateValue {
    /// The call as written: `sum(n)`, `count()` for `count(*)`.
    pub fn call(&self) -> String {
        self.func.call(&self.column)
    }
}

/// A stream-stream join's state: the rows of each side, kept until the
/// watermark passes them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JoinState {
    /// The join type.
    pub how: JoinType,
    /// The condition, when given as SQL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on: Option<String>,
    /// The equi-join columns, when given as `using`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub using: Option<Vec<String>>,
    /// The left side's columns (its stored rows).
    pub left: Vec<StateColumn>,
    /// The right side's columns (its stored rows).
    pub right: Vec<StateColumn>,
}

/// Types agree when equal, or when either is unknown (an untyped SQL
/// expression: compared by the engine at run time).
fn types_agree(a: Option<DataType>, b: Option<DataType>) -> bool {
    a.is_none() || b.is_none() || a == b
}

fn columns_of(s: &NodeSchema) -> Vec<StateColumn> {
    s.columns
        .iter()
        .map(|c| StateColumn {
            name: c.name.clone(),
            dtype: c.dtype,
        })
        .collect()
}

/// The schema op `oi` of node `ni` sees as input.
fn input_of(plan: &StreamPlan, ni: usize, oi: usize) -> NodeSchema {
    // Re-resolve a truncated plan, as the rules do: plans are small.
    let mut p = plan.clone();
    p.nodes.truncate(ni + 1);
    p.nodes[ni].ops.truncate(oi);
    p.result = p.nodes[ni].id.clone();
    resolve(&p).0.remove(&p.result).unwrap_or_default()
}

impl StateFingerprint {
    /// The fingerprint of `plan`: what a checkpoint written by it depends on.
    /// The stateful operators are numbered as the engine numbers their state
    /// directories: nodes in order, each node's ops in order, counting
    /// aggregations, deduplications and joins with another stream.
    pub fn of(plan: &StreamPlan) -> StateFingerprint {
        let (schemas, _) = resolve(plan);
        let sources = plan
            .sources
            .iter()
            .map(|(name, s)| SourceState {
                name: name.clone(),
                kind: None,
                columns: s
                    .schema
                    .iter()
                    .map(|f| StateColumn {
                        name: f.name.clone(),
                        dtype: Some(f.dtype),
                    })
                    .collect(),
            })
            .collect();
        let mut operators = Vec::new();
        for (ni, node) in plan.nodes.iter().enumerate() {
            for (oi, op) in node.ops.iter().enumerate() {
                let at = OpAt { node: ni, op: oi };
                let stateful = match op {
                    Op::Aggregate { .. } | Op::Dedup { .. } => true,
                    Op::Join { right, .. } => plan.node(right).is_some(),
                    _ => false,
                };
                if !stateful {
                    continue;
                }
                let input = input_of(plan, ni, oi);
                let typed = |c: &str| input.column(c).and_then(|c| c.dtype);
                let watermarked = |c: &str| input.column(c).is_some_and(|c| c.watermark);
                let id = operators.len();
                let mut o = StatefulOperator {
                    id,
                    kind: OperatorKind::Aggregate,
                    at,
                    keys: vec![],
                    values: vec![],
                    watermark: vec![],
                    join: None,
                };
                match op {
                    Op::Aggregate { keys, aggs } => {
                        for k in keys {
                            let key = match k {
                                GroupKey::Column { column } => StateKey {
                                    column: column.clone(),
                                    dtype: typed(column),
                                    window: None,
                                    alias: None,
                                },
                                GroupKey::Window { window, alias } => {
                                    if window.is_session() {
                                        o.kind = OperatorKind::SessionWindow;
                                    }
                                    let column = window.time_column().unwrap_or_default();
                                    StateKey {
                                        dtype: typed(&column),
                                        column,
                                        window: Some(WindowState {
                                            size: window.size.to_string(),
                                            slide: window.slide.as_ref().map(|d| d.to_string()),
                                            gap: window.gap.as_ref().map(|d| d.to_string()),
                                        }),
                                        alias: Some(alias.clone()),
                                    }
                                }
                            };
                            if watermarked(&key.column) && !o.watermark.contains(&key.column) {
                                o.watermark.push(key.column.clone());
                            }
                            o.keys.push(key);
                        }
                        o.values = aggs
                            .iter()
                            .map(|a| StateValue {
                                name: a.alias.clone(),
                                func: a.func,
                                column: a.column.clone(),
                                input: if a.column == "*" {
                                    None
                                } else {
                                    typed(&a.column)
                                },
                            })
                            .collect();
                    }
                    Op::Dedup {
                        columns,
                        within_watermark,
                    } => {
                        if *within_watermark {
                            o.kind = OperatorKind::DedupWithinWatermark;
                        } else {
                            o.kind = OperatorKind::Dedup;
                        }
                        o.keys = columns
                            .iter()
                            .map(|c| StateKey {
                                column: c.clone(),
                                dtype: typed(c),
                                window: None,
                                alias: None,
                            })
                            .collect();
                        // The engine's event time: the first watermarked column.
                        o.watermark = input
                            .columns
                            .iter()
                            .find(|c| c.watermark)
                            .map(|c| vec![c.name.clone()])
                            .unwrap_or_default();
                    }
                    Op::Join {
                        right,
                        how,
                        on,
                        using,
                    } => {
                        o.kind = OperatorKind::StreamStreamJoin;
                        let right_schema = schemas.get(right).cloned().unwrap_or_default();
                        for side in [&input, &right_schema] {
                            if let Some(c) = side.columns.iter().find(|c| c.watermark) {
                                o.watermark.push(c.name.clone());
                            }
                        }
                        o.join = Some(JoinState {
                            how: *how,
                            on: on.as_ref().map(|e| e.to_string()),
                            using: using.clone(),
                            left: columns_of(&input),
                            right: columns_of(&right_schema),
                        });
                    }
                    _ => unreachable!("only stateful ops reach here"),
                }
                operators.push(o);
            }
        }
        StateFingerprint {
            version: FORMAT_VERSION,
            sources,
            operators,
            output_mode: plan.output_mode,
            sink: plan.sink.as_ref().map(|s| s.kind),
            late_rows: None,
            session: SessionRules::current(),
        }
    }

    /// True when the query has a (session-window) aggregation, whose state
    /// depends on the output mode.
    pub fn aggregates(&self) -> bool {
        self.operators.iter().any(|o| {
            matches!(
                o.kind,
                OperatorKind::Aggregate | OperatorKind::SessionWindow
            )
        })
    }
}

/// What kind of difference a [`Change`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChangeKind {
    /// A source was added, removed or renamed.
    Sources,
    /// A source's kind changed (Kafka to files).
    SourceKind,
    /// A source's columns changed.
    SourceSchema,
    /// A stateful operator was added or removed.
    OperatorCount,
    /// A stateful operator's kind changed at its position.
    OperatorKind,
    /// A grouping key or deduplication column changed.
    Key,
    /// A time window's size, slide or gap changed.
    Window,
    /// A grouping key was renamed in the output.
    KeyRenamed,
    /// An aggregate's function, input or input type changed, or one was added or removed.
    Aggregate,
    /// An aggregate was renamed in the output.
    AggregateRenamed,
    /// An aggregate changed to a function that keeps the same state
    /// (`stddev_samp` to `var_pop`; an rsd of the same sketch precision).
    AggregateSameState,
    /// The watermark columns of a stateful operator changed.
    Watermark,
    /// A join's type changed.
    JoinType,
    /// A join's condition or equi-join columns changed.
    JoinCondition,
    /// The columns a join side stores changed.
    JoinSchema,
    /// The output mode changed.
    OutputMode,
    /// The sink's kind changed.
    Sink,
    /// The late-rows side output was added or removed.
    LateRows,
    /// The fingerprint's own format changed.
    Format,
}

/// One difference between an old and a new fingerprint, classified.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// What kind of difference.
    pub kind: ChangeKind,
    /// True when a checkpoint of the old query stays usable.
    pub allowed: bool,
    /// The stateful operator concerned (its id), if any.
    pub operator: Option<usize>,
    /// Where in the new plan (for a compile error's span); `None` for the query as a whole.
    pub at: Option<Location>,
    /// What changed and why it matters.
    pub message: String,
    /// How to proceed, beyond [`REFUSED_HELP`].
    pub help: Option<String>,
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

struct Changes(Vec<Change>);

impl Changes {
    fn push(
        &mut self,
        kind: ChangeKind,
        allowed: bool,
        op: Option<&StatefulOperator>,
        part: Option<Part>,
        message: String,
        help: Option<&str>,
    ) {
        let at = match (op, part) {
            (Some(o), Some(part)) => Some(Location::Op {
                node: o.at.node,
                op: o.at.op,
                part,
            }),
            _ => None,
        };
        self.0.push(Change {
            kind,
            allowed,
            operator: op.map(|o| o.id),
            at,
            message,
            help: help.map(str::to_string),
        });
    }
}

fn cols(c: &[StateColumn]) -> String {
    c.iter()
        .map(|c| match c.dtype {
            Some(t) => format!("{}: {}", c.name, t.name()),
            None => c.name.clone(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn keys(k: &[StateKey]) -> String {
    k.iter()
        .map(StateKey::describe)
        .collect::<Vec<_>>()
        .join(", ")
}

fn type_name(t: Option<DataType>) -> &'static str {
    t.map(DataType::name).unwrap_or("unknown")
}

/// Classifies every difference between the fingerprint a checkpoint (or lock
/// file) was written with, `old`, and the query starting now, `new`, by
/// Spark's recovery semantics: changes to the number or kind of sources, to
/// the stateful operators (their number, kind, order, keys, aggregates,
/// windows, watermark columns, join type, condition and stored columns) and
/// to the output mode of an aggregation are refused; a source's columns
/// (when no stateful input changes), aggregate and key renames, the sink
/// (except to a file sink), the late-rows side output and everything
/// stateless are allowed. Empty when nothing the checkpoint depends on changed.
pub fn classify(old: &StateFingerprint, new: &StateFingerprint) -> Vec<Change> {
    let mut ch = Changes(Vec::new());
    if old.version > FORMAT_VERSION {
        ch.push(
            ChangeKind::Format,
            false,
            None,
            None,
            format!(
                "the state fingerprint was written by a newer weir (format {}, this weir reads up to {FORMAT_VERSION})",
                old.version
            ),
            Some("upgrade weir to the version that wrote it"),
        );
        return ch.0;
    }
    classify_sources(old, new, &mut ch);
    classify_operators(old, new, &mut ch);
    if old.output_mode != new.output_mode {
        let refused = old.aggregates() || new.aggregates();
        ch.push(
            ChangeKind::OutputMode,
            !refused,
            None,
            None,
            if refused {
                format!(
                    "the output mode changed from {} to {}: an aggregation's state depends on it (complete mode keeps every group, append and update evict the groups the watermark passed), so the result would differ from a fresh run",
                    old.output_mode.spark_name(),
                    new.output_mode.spark_name()
                )
            } else {
                format!(
                    "the output mode changed from {} to {} (no aggregation: the state does not depend on it)",
                    old.output_mode.spark_name(),
                    new.output_mode.spark_name()
                )
            },
            refused.then_some("keep the old output mode"),
        );
    }
    if let (Some(o), Some(n)) = (old.sink, new.sink) {
        if o != n {
            let to_file = n == SinkKind::File;
            ch.push(
                ChangeKind::Sink,
                !to_file,
                None,
                None,
                if to_file {
                    format!("the sink changed from {} to a file sink: a file sink keeps its own log of the batches it wrote, which would start in the middle of this checkpoint's batches (Spark refuses it too)", o.name())
                } else {
                    format!(
                        "the sink changed from {} to {} (it receives only the new batches)",
                        o.name(),
                        n.name()
                    )
                },
                to_file.then_some("write files from a new checkpoint location"),
            );
        }
    }
    if let (Some(o), Some(n)) = (old.late_rows, new.late_rows) {
        if o != n {
            ch.push(
                ChangeKind::LateRows,
                true,
                None,
                None,
                format!(
                    "the late-rows side output was {} (a sink, not state)",
                    if n { "added" } else { "removed" }
                ),
                None,
            );
        }
    }
    ch.0
}

fn classify_sources(old: &StateFingerprint, new: &StateFingerprint, ch: &mut Changes) {
    let names = |f: &StateFingerprint| f.sources.iter().map(|s| s.name.clone()).collect::<Vec<_>>();
    let (on, nn) = (names(old), names(new));
    if on != nn {
        let msg = if on.len() != nn.len() {
            format!(
                "the number of input sources changed from {} ({}) to {} ({}): a checkpoint records one offset per source",
                on.len(),
                on.join(", "),
                nn.len(),
                nn.join(", ")
            )
        } else {
            format!(
                "the input sources changed from ({}) to ({}): a checkpoint records each source's offsets by its place among the sources",
                on.join(", "),
                nn.join(", ")
            )
        };
        ch.push(ChangeKind::Sources, false, None, None, msg, None);
        return;
    }
    for (o, n) in old.sources.iter().zip(&new.sources) {
        if let (Some(ok), Some(nk)) = (&o.kind, &n.kind) {
            if ok != nk {
                ch.push(
                    ChangeKind::SourceKind,
                    false,
                    None,
                    None,
                    format!(
                        "source `{}` changed from {ok} to {nk}: the checkpoint's offsets are {ok} offsets",
                        n.name
                    ),
                    None,
                );
            }
        }
        if o.columns != n.columns {
            ch.push(
                ChangeKind::SourceSchema,
                true,
                None,
                None,
                format!(
                    "source `{}`'s columns changed from [{}] to [{}] (no stateful operator's state changes with them)",
                    n.name,
                    cols(&o.columns),
                    cols(&n.columns)
                ),
                None,
            );
        }
    }
}

fn classify_operators(old: &StateFingerprint, new: &StateFingerprint, ch: &mut Changes) {
    let kinds = |f: &StateFingerprint| {
        f.operators
            .iter()
            .map(|o| o.kind.describe())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if old.operators.len() != new.operators.len() {
        // Point at the first operator that is not where it was.
        let first = new
            .operators
            .iter()
            .zip(&old.operators)
            .position(|(n, o)| n.kind != o.kind)
            .unwrap_or(old.operators.len().min(new.operators.len()));
        let added = new.operators.len() > old.operators.len();
        ch.push(
            ChangeKind::OperatorCount,
            false,
            new.operators.get(first).or(new.operators.last()),
            Some(Part::Whole),
            format!(
                "the stateful operators changed from [{}] to [{}]: a stateful operator was {}, and each operator's state is kept by its position",
                kinds(old),
                kinds(new),
                if added { "added" } else { "removed" }
            ),
            None,
        );
        return;
    }
    for (o, n) in old.operators.iter().zip(&new.operators) {
        if o.kind != n.kind {
            ch.push(
                ChangeKind::OperatorKind,
                false,
                Some(n),
                Some(Part::Whole),
                format!(
                    "stateful operator {} changed from {} to {}: its state is a {}'s",
                    n.id,
                    o.kind.describe(),
                    n.kind.describe(),
                    o.kind.describe()
                ),
                None,
            );
            continue;
        }
        match n.kind {
            OperatorKind::Aggregate | OperatorKind::SessionWindow => {
                classify_keys(o, n, "grouping keys", ch);
                classify_aggregates(o, n, ch);
            }
            OperatorKind::Dedup | OperatorKind::DedupWithinWatermark => {
                classify_keys(o, n, "deduplication columns", ch);
            }
            OperatorKind::StreamStreamJoin => classify_join(o, n, ch),
        }
        if o.watermark != n.watermark {
            ch.push(
                ChangeKind::Watermark,
                false,
                Some(n),
                Some(Part::Whole),
                format!(
                    "the watermark of {} changed from [{}] to [{}]: when its state is evicted depends on it",
                    n.describe(),
                    o.watermark.join(", "),
                    n.watermark.join(", ")
                ),
                Some("keep the watermark on the same column (its delay may change)"),
            );
        }
    }
}

fn classify_keys(o: &StatefulOperator, n: &StatefulOperator, what: &str, ch: &mut Changes) {
    let key_part = |i: usize| match n.kind {
        OperatorKind::Dedup | OperatorKind::DedupWithinWatermark => Part::Column(i),
        _ => Part::Key(i),
    };
    if o.keys.len() != n.keys.len()
        || o.keys
            .iter()
            .zip(&n.keys)
            .any(|(a, b)| a.column != b.column || a.window.is_some() != b.window.is_some())
    {
        let i = o
            .keys
            .iter()
            .zip(&n.keys)
            .position(|(a, b)| a.column != b.column)
            .unwrap_or(o.keys.len().min(n.keys.len()));
        let part = if i < n.keys.len() {
            key_part(i)
        } else {
            Part::Whole
        };
        ch.push(
            ChangeKind::Key,
            false,
            Some(n),
            Some(part),
            format!(
                "the {what} of {} changed from [{}] to [{}]: its state is keyed by [{}]",
                n.describe(),
                keys(&o.keys),
                keys(&n.keys),
                keys(&o.keys)
            ),
            None,
        );
        return;
    }
    for (i, (a, b)) in o.keys.iter().zip(&n.keys).enumerate() {
        if !types_agree(a.dtype, b.dtype) {
            ch.push(
                ChangeKind::Key,
                false,
                Some(n),
                Some(key_part(i)),
                format!(
                    "the type of key `{}` of {} changed from {} to {}: its state's keys are {}",
                    b.column,
                    n.describe(),
                    type_name(a.dtype),
                    type_name(b.dtype),
                    type_name(a.dtype)
                ),
                Some("cast the column back to its old type before the operator"),
            );
        } else if a.window != b.window {
            ch.push(
                ChangeKind::Window,
                false,
                Some(n),
                Some(Part::KeySize(i)),
                format!(
                    "the window of {} changed from {} to {}: its state holds the old windows",
                    n.describe(),
                    a.describe(),
                    b.describe()
                ),
                None,
            );
        } else if a.alias != b.alias {
            ch.push(
                ChangeKind::KeyRenamed,
                true,
                Some(n),
                Some(key_part(i)),
                format!(
                    "key {} of {} was renamed from `{}` to `{}` (the state does not store names)",
                    b.describe(),
                    n.describe(),
                    a.alias.as_deref().unwrap_or(&a.column),
                    b.alias.as_deref().unwrap_or(&b.column)
                ),
                None,
            );
        }
    }
}

fn classify_aggregates(o: &StatefulOperator, n: &StatefulOperator, ch: &mut Changes) {
    let calls = |v: &[StateValue]| {
        v.iter()
            .map(|a| format!("{}: {}", a.name, a.call()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if o.values.len() != n.values.len() {
        let i = o
            .values
            .iter()
            .zip(&n.values)
            .position(|(a, b)| !a.func.same_state(b.func) || a.column != b.column)
            .unwrap_or(o.values.len().min(n.values.len()));
        let part = if i < n.values.len() {
            Part::Agg(i)
        } else {
            Part::Whole
        };
        ch.push(
            ChangeKind::Aggregate,
            false,
            Some(n),
            Some(part),
            format!(
                "the aggregates of {} changed from {{{}}} to {{{}}}: its state stores one accumulator per aggregate, {} of them",
                n.describe(),
                calls(&o.values),
                calls(&n.values),
                o.values.len()
            ),
            None,
        );
        return;
    }
    for (i, (a, b)) in o.values.iter().zip(&n.values).enumerate() {
        if !a.func.same_state(b.func) || a.column != b.column {
            ch.push(
                ChangeKind::Aggregate,
                false,
                Some(n),
                Some(Part::Agg(i)),
                format!(
                    "aggregate `{}` changed from {} to {}: the state of existing checkpoints stores {}",
                    b.name,
                    a.call(),
                    b.call(),
                    stores(a)
                ),
                None,
            );
        } else if !types_agree(a.input, b.input) {
            ch.push(
                ChangeKind::Aggregate,
                false,
                Some(n),
                Some(Part::Agg(i)),
                format!(
                    "the input of aggregate `{}` ({}) changed type from {} to {}: its accumulator in the state is of {}",
                    b.name,
                    b.call(),
                    type_name(a.input),
                    type_name(b.input),
                    type_name(a.input)
                ),
                Some("cast the column back to its old type before the aggregation"),
            );
        } else if a.func != b.func {
            ch.push(
                ChangeKind::AggregateSameState,
                true,
                Some(n),
                Some(Part::Agg(i)),
                format!(
                    "aggregate `{}` changed from {} to {}: both keep {} in the state, so the result continues from the checkpoint",
                    b.name,
                    a.call(),
                    b.call(),
                    stores(a)
                ),
                None,
            );
        } else if a.name != b.name {
            ch.push(
                ChangeKind::AggregateRenamed,
                true,
                Some(n),
                Some(Part::Agg(i)),
                format!(
                    "aggregate {} was renamed from `{}` to `{}` (the state does not store names)",
                    b.call(),
                    a.name,
                    b.name
                ),
                None,
            );
        }
    }
}

/// What an aggregate's accumulator holds, in words.
fn stores(a: &StateValue) -> String {
    let of = if a.column == "*" {
        "rows".to_string()
    } else {
        format!("`{}`", a.column)
    };
    a.func.def().stores.replace("{of}", &of)
}

fn classify_join(o: &StatefulOperator, n: &StatefulOperator, ch: &mut Changes) {
    let (Some(oj), Some(nj)) = (&o.join, &n.join) else {
        return;
    };
    if oj.how != nj.how {
        ch.push(
            ChangeKind::JoinType,
            false,
            Some(n),
            Some(Part::Whole),
            format!(
                "the type of {} changed from {} to {}: which rows its state keeps, and what it emits when they expire, depend on it",
                n.describe(),
                oj.how.spark_name(),
                nj.how.spark_name()
            ),
            None,
        );
    }
    if oj.on != nj.on || oj.using != nj.using {
        let cond = |j: &JoinState| match (&j.on, &j.using) {
            (Some(on), _) => format!("on `{on}`"),
            (None, Some(u)) => format!("using [{}]", u.join(", ")),
            (None, None) => "no condition".into(),
        };
        ch.push(
            ChangeKind::JoinCondition,
            false,
            Some(n),
            Some(Part::Whole),
            format!(
                "the condition of {} changed from {} to {}: its state is matched by the old equi-join columns and time bounds",
                n.describe(),
                cond(oj),
                cond(nj)
            ),
            None,
        );
    }
    for (side, a, b) in [
        ("left", &oj.left, &nj.left),
        ("right", &oj.right, &nj.right),
    ] {
        let same = a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|(x, y)| x.name == y.name && types_agree(x.dtype, y.dtype));
        if !same {
            ch.push(
                ChangeKind::JoinSchema,
                false,
                Some(n),
                Some(Part::Whole),
                format!(
                    "the {side} input of {} changed from [{}] to [{}]: its state stores the {side} side's rows as they were",
                    n.describe(),
                    cols(a),
                    cols(b)
                ),
                Some("keep the columns before the join as they were; project after the join instead"),
            );
        }
    }
}

/// The refused changes among `changes`, as one sentence each joined by
/// `"; "` (the checkpoint's error), or `None` when every change is allowed.
pub fn refusals(changes: &[Change]) -> Option<String> {
    let refused: Vec<&str> = changes
        .iter()
        .filter(|c| !c.allowed)
        .map(|c| c.message.as_str())
        .collect();
    (!refused.is_empty()).then(|| refused.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{AggSpec, Node, SelectItem, WindowSpec};
    use crate::types::Field;

    fn events() -> Vec<Field> {
        vec![
            Field::new("ts", DataType::Timestamp),
            Field::new("page", DataType::String),
            Field::new("user", DataType::String),
            Field::new("n", DataType::Int64),
            Field::new("x", DataType::Float64),
        ]
    }

    fn agg(func: AggFn, column: &str, alias: &str) -> AggSpec {
        AggSpec {
            func,
            column: column.into(),
            alias: alias.into(),
        }
    }

    fn col(c: &str) -> GroupKey {
        GroupKey::Column { column: c.into() }
    }

    fn window(size: &str) -> GroupKey {
        GroupKey::Window {
            window: WindowSpec {
                column: Some("ts".into()),
                expr: None,
                size: size.into(),
                slide: None,
                gap: None,
            },
            alias: "window".into(),
        }
    }

    fn wm() -> Op {
        Op::Watermark {
            column: "ts".into(),
            delay: "10 minutes".into(),
        }
    }

    /// The page views query: watermark, window + page, count and sum.
    fn views(pre: Vec<Op>, keys: Vec<GroupKey>, aggs: Vec<AggSpec>, post: Vec<Op>) -> StreamPlan {
        let mut ops = pre;
        ops.push(Op::Aggregate { keys, aggs });
        ops.extend(post);
        StreamPlan::single("clicks", events(), ops, OutputMode::Update)
    }

    fn base() -> StreamPlan {
        views(
            vec![wm()],
            vec![window("1 minute"), col("page")],
            vec![
                agg(AggFn::Count, "*", "views"),
                agg(AggFn::Sum, "n", "total"),
            ],
            vec![],
        )
    }

    fn changes(old: &StreamPlan, new: &StreamPlan) -> Vec<Change> {
        classify(&StateFingerprint::of(old), &StateFingerprint::of(new))
    }

    fn refused(old: &StreamPlan, new: &StreamPlan) -> Change {
        let c = changes(old, new);
        let r: Vec<_> = c.iter().filter(|c| !c.allowed).cloned().collect();
        assert_eq!(r.len(), 1, "one refused change expected: {c:#?}");
        r[0].clone()
    }

    #[test]
    fn the_fingerprint_records_each_stateful_operator() {
        let f = StateFingerprint::of(&base());
        assert_eq!(f.sources[0].name, "clicks");
        assert_eq!(f.operators.len(), 1);
        let o = &f.operators[0];
        assert_eq!(o.kind, OperatorKind::Aggregate);
        assert_eq!(o.at, OpAt { node: 0, op: 1 });
        assert_eq!(o.keys[1].dtype, Some(DataType::String));
        assert_eq!(o.keys[0].describe(), "window(ts, \"1 minute\")");
        assert_eq!(o.values[1].input, Some(DataType::Int64));
        assert_eq!(o.watermark, ["ts"]);
        // Serde round trip: what a lock file and a checkpoint store.
        let json = serde_json::to_string(&f).unwrap();
        assert_eq!(serde_json::from_str::<StateFingerprint>(&json).unwrap(), f);
    }

    #[test]
    fn stateless_changes_are_not_in_the_fingerprint() {
        let filtered = views(
            vec![
                Op::Filter {
                    predicate: "n > 0".into(),
                },
                Op::WithColumn {
                    name: "extra".into(),
                    expr: "upper(user)".into(),
                },
                wm(),
            ],
            vec![window("1 minute"), col("page")],
            vec![
                agg(AggFn::Count, "*", "views"),
                agg(AggFn::Sum, "n", "total"),
            ],
            vec![Op::Filter {
                predicate: "views > 1".into(),
            }],
        );
        assert_eq!(changes(&base(), &filtered), vec![]);
        let mut new = base();
        new.trigger = Some(crate::plan::TriggerDecl::ProcessingTime(1000));
        assert_eq!(changes(&base(), &new), vec![]);
    }

    /// Spark compares the state's layout: a switch between functions that
    /// keep the same state continues from it; another one is refused.
    #[test]
    fn a_switch_between_functions_of_one_state_is_allowed_others_refused() {
        use crate::plan::Rsd;
        let with = |f: AggFn| {
            views(
                vec![wm()],
                vec![window("1 minute"), col("page")],
                vec![agg(f, "n", "spread")],
                vec![],
            )
        };
        let c = changes(&with(AggFn::StddevSamp), &with(AggFn::VarPop));
        assert_eq!(c.len(), 1, "{c:#?}");
        assert!(c[0].allowed);
        assert_eq!(c[0].kind, ChangeKind::AggregateSameState);
        assert_eq!(
            c[0].message,
            "aggregate `spread` changed from stddev_samp(n) to var_pop(n): both keep the count, mean and sum of squared deviations of `n` in the state, so the result continues from the checkpoint"
        );
        let acd = |r: f64| AggFn::ApproxCountDistinct {
            rsd: Rsd::new(r).unwrap(),
        };
        // 0.05 and 0.049 both make a sketch of 2^9 registers; 0.01 of 2^14.
        assert!(changes(&with(acd(0.05)), &with(acd(0.049)))
            .iter()
            .all(|c| c.allowed));
        let c = refused(&with(acd(0.05)), &with(acd(0.01)));
        assert_eq!(
            c.message,
            "aggregate `spread` changed from approx_count_distinct(n) to approx_count_distinct(n, 0.01): the state of existing checkpoints stores a HyperLogLog++ sketch of `n`"
        );
        let first = |ignore_nulls| AggFn::First { ignore_nulls };
        refused(&with(first(false)), &with(first(true)));
        refused(
            &with(first(false)),
            &with(AggFn::Last {
                ignore_nulls: false,
            }),
        );
        refused(&with(AggFn::StddevSamp), &with(AggFn::Avg));
        // Unchanged: nothing to report.
        assert!(changes(&with(acd(0.01)), &with(acd(0.01))).is_empty());
    }

    #[test]
    fn a_changed_aggregate_function_is_refused_at_the_aggregate() {
        let new = views(
            vec![wm()],
            vec![window("1 minute"), col("page")],
            vec![agg(AggFn::Sum, "n", "views"), agg(AggFn::Sum, "n", "total")],
            vec![],
        );
        let c = refused(&base(), &new);
        assert_eq!(c.kind, ChangeKind::Aggregate);
        assert_eq!(
            c.message,
            "aggregate `views` changed from count() to sum(n): the state of existing checkpoints stores a count of rows"
        );
        assert_eq!(
            c.at,
            Some(Location::Op {
                node: 0,
                op: 1,
                part: Part::Agg(0)
            })
        );
        assert_eq!(c.operator, Some(0));
    }

    #[test]
    fn an_added_aggregate_is_refused() {
        let new = views(
            vec![wm()],
            vec![window("1 minute"), col("page")],
            vec![
                agg(AggFn::Count, "*", "views"),
                agg(AggFn::Sum, "n", "total"),
                agg(AggFn::Max, "n", "top"),
            ],
            vec![],
        );
        let c = refused(&base(), &new);
        assert!(
            c.message
                .contains("one accumulator per aggregate, 2 of them"),
            "{c}"
        );
        assert_eq!(
            c.at,
            Some(Location::Op {
                node: 0,
                op: 1,
                part: Part::Agg(2)
            })
        );
    }

    #[test]
    fn changed_grouping_keys_and_windows_are_refused() {
        let new = views(
            vec![wm()],
            vec![window("1 minute"), col("user")],
            vec![
                agg(AggFn::Count, "*", "views"),
                agg(AggFn::Sum, "n", "total"),
            ],
            vec![],
        );
        let c = refused(&base(), &new);
        assert_eq!(c.kind, ChangeKind::Key);
        assert!(
            c.message.contains(
                "from [window(ts, \"1 minute\"), page] to [window(ts, \"1 minute\"), user]"
            ),
            "{c}"
        );
        let new = views(
            vec![wm()],
            vec![window("5 minutes"), col("page")],
            vec![
                agg(AggFn::Count, "*", "views"),
                agg(AggFn::Sum, "n", "total"),
            ],
            vec![],
        );
        assert_eq!(refused(&base(), &new).kind, ChangeKind::Window);
    }

    #[test]
    fn a_key_whose_type_changed_before_the_aggregation_is_refused() {
        let new = views(
            vec![
                Op::WithColumn {
                    name: "page".into(),
                    expr: "CAST(n AS BIGINT)".into(),
                },
                wm(),
            ],
            vec![window("1 minute"), col("page")],
            vec![
                agg(AggFn::Count, "*", "views"),
                agg(AggFn::Sum, "n", "total"),
            ],
            vec![],
        );
        let c = refused(&base(), &new);
        assert!(c.message.contains("from string to int64"), "{c}");
    }

    #[test]
    fn renaming_an_aggregate_is_allowed() {
        let new = views(
            vec![wm()],
            vec![window("1 minute"), col("page")],
            vec![
                agg(AggFn::Count, "*", "hits"),
                agg(AggFn::Sum, "n", "total"),
            ],
            vec![],
        );
        let c = changes(&base(), &new);
        assert_eq!(c.len(), 1);
        assert!(c[0].allowed);
        assert_eq!(c[0].kind, ChangeKind::AggregateRenamed);
    }

    #[test]
    fn the_watermark_delay_may_change_but_not_its_column() {
        let new = views(
            vec![Op::Watermark {
                column: "ts".into(),
                delay: "1 hour".into(),
            }],
            vec![window("1 minute"), col("page")],
            vec![
                agg(AggFn::Count, "*", "views"),
                agg(AggFn::Sum, "n", "total"),
            ],
            vec![],
        );
        assert_eq!(changes(&base(), &new), vec![]);
        let new = views(
            vec![],
            vec![window("1 minute"), col("page")],
            vec![
                agg(AggFn::Count, "*", "views"),
                agg(AggFn::Sum, "n", "total"),
            ],
            vec![],
        );
        assert_eq!(refused(&base(), &new).kind, ChangeKind::Watermark);
    }

    #[test]
    fn adding_or_replacing_a_stateful_operator_is_refused() {
        let dedup = Op::Dedup {
            columns: vec!["user".into()],
            within_watermark: false,
        };
        let mut new = base();
        new.nodes[0].ops.insert(1, dedup.clone());
        let c = refused(&base(), &new);
        assert_eq!(c.kind, ChangeKind::OperatorCount);
        assert!(
            c.message
                .contains("from [aggregation] to [deduplication, aggregation]"),
            "{c}"
        );
        let a = StreamPlan::single("clicks", events(), vec![dedup], OutputMode::Append);
        let b = StreamPlan::single(
            "clicks",
            events(),
            vec![
                wm(),
                Op::Aggregate {
                    keys: vec![col("user")],
                    aggs: vec![agg(AggFn::Count, "*", "c")],
                },
            ],
            OutputMode::Append,
        );
        assert_eq!(refused(&a, &b).kind, ChangeKind::OperatorKind);
    }

    #[test]
    fn dedup_columns_may_not_change() {
        let d = |cols: &[&str], within| {
            StreamPlan::single(
                "clicks",
                events(),
                vec![
                    wm(),
                    Op::Dedup {
                        columns: cols.iter().map(|c| c.to_string()).collect(),
                        within_watermark: within,
                    },
                ],
                OutputMode::Append,
            )
        };
        let c = refused(&d(&["user"], false), &d(&["user", "page"], false));
        assert_eq!(
            c.at,
            Some(Location::Op {
                node: 0,
                op: 1,
                part: Part::Column(1)
            })
        );
        assert!(c.message.contains("deduplication columns"), "{c}");
        assert_eq!(
            refused(&d(&["user"], false), &d(&["user"], true)).kind,
            ChangeKind::OperatorKind
        );
        assert_eq!(changes(&d(&["user"], true), &d(&["user"], true)), vec![]);
    }

    fn joined(how: JoinType, left_cols: &[&str]) -> StreamPlan {
        let mut p = StreamPlan::single("clicks", events(), vec![], OutputMode::Append);
        p.sources.insert(
            "ads".into(),
            crate::plan::SourceDecl {
                schema: vec![
                    Field::new("ad_ts", DataType::Timestamp),
                    Field::new("ad", DataType::String),
                ],
            },
        );
        p.nodes = vec![
            Node {
                id: "ads".into(),
                input: "ads".into(),
                ops: vec![Op::Watermark {
                    column: "ad_ts".into(),
                    delay: "1 hour".into(),
                }],
            },
            Node {
                id: "result".into(),
                input: "clicks".into(),
                ops: vec![
                    Op::Select {
                        columns: left_cols
                            .iter()
                            .map(|c| SelectItem {
                                expr: crate::expr::Expr::read(c),
                                alias: c.to_string(),
                            })
                            .collect(),
                    },
                    wm(),
                    Op::Join {
                        right: "ads".into(),
                        how,
                        on: Some("page = ad AND ts >= ad_ts".into()),
                        using: None,
                    },
                ],
            },
        ];
        p
    }

    #[test]
    fn joins_keep_type_condition_and_stored_columns() {
        let base = joined(JoinType::Inner, &["ts", "page"]);
        assert_eq!(changes(&base, &base.clone()), vec![]);
        assert_eq!(
            refused(&base, &joined(JoinType::LeftOuter, &["ts", "page"])).kind,
            ChangeKind::JoinType
        );
        let c = refused(&base, &joined(JoinType::Inner, &["ts", "page", "user"]));
        assert_eq!(c.kind, ChangeKind::JoinSchema);
        assert!(c.message.contains("the left input"), "{c}");
        let mut cond = base.clone();
        if let Op::Join { on, .. } = &mut cond.nodes[1].ops[2] {
            *on = Some("page = ad".into());
        }
        assert_eq!(refused(&base, &cond).kind, ChangeKind::JoinCondition);
        // A reformatted condition is the same condition.
        let mut spaced = base.clone();
        if let Op::Join { on, .. } = &mut spaced.nodes[1].ops[2] {
            *on = Some("page = ad  AND\n ts >= ad_ts".into());
        }
        assert_eq!(changes(&base, &spaced), vec![]);
    }

    #[test]
    fn sources_may_not_be_added_or_renamed_but_may_gain_columns() {
        let mut two = base();
        two.sources
            .insert("more".into(), crate::plan::SourceDecl { schema: events() });
        assert_eq!(refused(&base(), &two).kind, ChangeKind::Sources);
        let renamed = StreamPlan {
            sources: [("views".to_string(), base().sources["clicks"].clone())].into(),
            nodes: vec![Node {
                input: "views".into(),
                ..base().nodes[0].clone()
            }],
            ..base()
        };
        assert!(refused(&base(), &renamed).message.contains("by its place"));
        let mut wider = base();
        wider
            .sources
            .get_mut("clicks")
            .unwrap()
            .schema
            .push(Field::new("referrer", DataType::String));
        let c = changes(&base(), &wider);
        assert_eq!(c.len(), 1);
        assert!(
            c[0].allowed && c[0].kind == ChangeKind::SourceSchema,
            "{c:?}"
        );
        let mut kinds = StateFingerprint::of(&base());
        kinds.sources[0].kind = Some("kafka".into());
        let mut files = kinds.clone();
        files.sources[0].kind = Some("files".into());
        assert_eq!(classify(&kinds, &files)[0].kind, ChangeKind::SourceKind);
    }

    #[test]
    fn output_mode_changes_are_refused_only_with_an_aggregation() {
        let mut complete = base();
        complete.output_mode = OutputMode::Complete;
        assert_eq!(refused(&base(), &complete).kind, ChangeKind::OutputMode);
        let a = StreamPlan::single("clicks", events(), vec![], OutputMode::Append);
        let mut u = a.clone();
        u.output_mode = OutputMode::Update;
        let c = changes(&a, &u);
        assert!(c[0].allowed, "{c:?}");
    }

    #[test]
    fn sinks_may_change_except_to_files() {
        let sink = |kind| crate::plan::SinkDecl {
            kind,
            checkpoint: true,
        };
        let mut a = base();
        a.sink = Some(sink(SinkKind::Kafka));
        let mut b = base();
        b.sink = Some(sink(SinkKind::ForeachBatch));
        assert!(changes(&a, &b)[0].allowed);
        b.sink = Some(sink(SinkKind::File));
        assert_eq!(refused(&a, &b).kind, ChangeKind::Sink);
        assert!(changes(&b, &a)[0].allowed, "files to Kafka is allowed");
    }

    #[test]
    fn late_rows_and_the_session_rules_are_recorded() {
        let mut a = StateFingerprint::of(&base());
        a.late_rows = Some(false);
        let mut b = a.clone();
        b.late_rows = Some(true);
        let c = classify(&a, &b);
        assert!(c[0].allowed && c[0].kind == ChangeKind::LateRows);
        assert!(a
            .session
            .state_partitions
            .contains("fixed by the checkpoint"));
        // A lock file without the session rules (older format) still reads.
        let mut json = serde_json::to_value(&a).unwrap();
        json.as_object_mut().unwrap().remove("session");
        let back: StateFingerprint = serde_json::from_value(json).unwrap();
        assert_eq!(back, a);
        let mut newer = a.clone();
        newer.version = FORMAT_VERSION + 1;
        assert_eq!(classify(&newer, &a)[0].kind, ChangeKind::Format);
    }

    #[test]
    fn refusals_join_the_refused_messages() {
        let mut complete = base();
        complete.output_mode = OutputMode::Complete;
        let c = changes(&base(), &complete);
        assert!(refusals(&c).unwrap().starts_with("the output mode changed"));
        assert_eq!(refusals(&[]), None);
    }
}
