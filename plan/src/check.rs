//! The streaming rules: what Spark refuses at `start()` (its
//! `UnsupportedOperationChecker`, and the sink, trigger and checkpoint checks
//! of `DataStreamWriter`, `DataSource` and `KafkaWriter`), as small functions
//! over a [`StreamPlan`]. The sink and trigger rules apply when the plan
//! declares them (`plan.sink`, `plan.trigger`). The macro reports
//! each [`Violation`] as a compile error at the token it names; the engine's
//! builder returns the same text as a run-time error. [`check`] collects all
//! of them, not just the first.

use std::collections::BTreeMap;

use crate::expr::{BinaryOp, Expr};
use crate::plan::{GroupKey, JoinType, Op, OutputMode, SinkKind, StreamPlan, TriggerDecl};
use crate::resolve::{resolve, NodeSchema};
use crate::types::DataType;

pub use crate::violation::{Location, Part, Rule, Violation};

/// Everything a rule needs to look at.
struct Ctx<'a> {
    plan: &'a StreamPlan,
    schemas: BTreeMap<String, NodeSchema>,
}

impl Ctx<'_> {
    /// The schema a node's op `oi` sees as input.
    fn input_of(&self, ni: usize, oi: usize) -> NodeSchema {
        // Re-resolve a truncated plan: simple, and plans are small.
        let mut p = self.plan.clone();
        p.nodes.truncate(ni + 1);
        p.nodes[ni].ops.truncate(oi);
        p.result = p.nodes[ni].id.clone();
        resolve(&p).0.remove(&p.result).unwrap_or_default()
    }

    /// Node indexes that (transitively) feed node `ni`, including itself.
    fn upstream(&self, ni: usize) -> Vec<usize> {
        let mut out = vec![ni];
        let mut i = 0;
        while i < out.len() {
            let n = &self.plan.nodes[out[i]];
            let mut inputs = vec![n.input.clone()];
            for op in &n.ops {
                if let Op::Join { right, .. } = op {
                    inputs.push(right.clone());
                }
            }
            for inp in inputs {
                if let Some(j) = self.plan.nodes.iter().position(|m| m.id == inp) {
                    if !out.contains(&j) {
                        out.push(j);
                    }
                }
            }
            i += 1;
        }
        out
    }

    /// Every op that ends up in the result: (node index, op index, op).
    fn result_ops(&self) -> Vec<(usize, usize, &Op)> {
        let Some(ri) = self
            .plan
            .nodes
            .iter()
            .position(|n| n.id == self.plan.result)
        else {
            return vec![];
        };
        let mut nodes = self.upstream(ri);
        nodes.sort();
        let mut out = vec![];
        for ni in nodes {
            for (oi, op) in self.plan.nodes[ni].ops.iter().enumerate() {
                out.push((ni, oi, op));
            }
        }
        out
    }

    fn is_streaming(&self, name: &str) -> bool {
        self.schemas.get(name).is_some_and(|s| s.streaming)
    }
}

/// Resolves the plan and applies every streaming rule; returns all violations.
pub fn check(plan: &StreamPlan) -> Vec<Violation> {
    let (schemas, mut out) = resolve(plan);
    let cx = Ctx { plan, schemas };
    for rule in RULES {
        rule(&cx, &mut out);
    }
    out
}

type RuleFn = fn(&Ctx, &mut Vec<Violation>);

const RULES: &[RuleFn] = &[
    append_aggregation_needs_watermark,
    complete_needs_aggregation,
    no_distinct_aggregation,
    no_stateful_after_aggregation_in_update_or_complete,
    sort_only_on_complete_aggregation,
    limit_only_in_complete_mode,
    no_non_time_window_functions,
    dedup_within_watermark_needs_watermark,
    stream_stream_join_append_only,
    outer_joins_need_watermark_or_static_side,
    continuous_only_map_like_operations,
    continuous_no_current_time,
    continuous_not_into_foreach_batch,
    file_sink_append_only,
    kafka_sink_needs_value_column,
    sink_needs_checkpoint,
    session_window_not_in_update_mode,
    session_window_needs_another_key,
    scale_out_divides,
];

fn session_keys(op: &Op) -> Option<(&Vec<GroupKey>, bool)> {
    match op {
        Op::Aggregate { keys, .. } => Some((
            keys,
            keys.iter()
                .any(|k| matches!(k, GroupKey::Window { window, .. } if window.is_session())),
        )),
        _ => None,
    }
}

/// Spark's session-window limitation ("Update mode as output mode is not
/// supported" for session windows, Structured Streaming guide).
fn session_window_not_in_update_mode(cx: &Ctx, out: &mut Vec<Violation>) {
    if cx.plan.output_mode != OutputMode::Update {
        return;
    }
    for (ni, oi, op) in cx.result_ops() {
        if let Some((_, true)) = session_keys(op) {
            out.push(Violation::new(
                Rule::SessionWindowInUpdateMode,
                Location::OutputMode,
                "Update output mode is not supported for session windows on streaming DataFrames/Datasets".into(),
                Some("use output_mode: append (each session once it closes) or complete".into()),
            ));
            let _ = (ni, oi);
            return;
        }
    }
}

/// Spark: `Global aggregation with session window in streaming query is not
/// supported.` (a session window needs another grouping column).
fn session_window_needs_another_key(cx: &Ctx, out: &mut Vec<Violation>) {
    for (ni, oi, op) in cx.result_ops() {
        if let Some((keys, true)) = session_keys(op) {
            if keys.len() < 2 && cx.input_of(ni, oi).streaming {
                out.push(Violation::new(
                    Rule::SessionWindowWithoutKey,
                    Location::Op { node: ni, op: oi, part: Part::Key(0) },
                    "Global aggregation with session window in streaming query is not supported.".into(),
                    Some("group by a column as well, e.g. `group_by: [session_window(ts, \"5 minutes\"), user]`".into()),
                ).about(keys[0].output_name()));
            }
        }
    }
}

/// Spark: `Append output mode not supported when there are streaming
/// aggregations on streaming DataFrames/DataSets without watermark`
/// (UnsupportedOperationChecker, `case Append if aggregates without watermark`).
/// Also catches a watermark that exists but is not in the grouping.
fn append_aggregation_needs_watermark(cx: &Ctx, out: &mut Vec<Violation>) {
    if cx.plan.output_mode != OutputMode::Append {
        return;
    }
    for (ni, oi, op) in cx.result_ops() {
        let Op::Aggregate { keys, .. } = op else {
            continue;
        };
        let input = cx.input_of(ni, oi);
        if !input.streaming {
            continue;
        }
        let grouped_on_watermark = keys.iter().any(|k| match k {
            GroupKey::Column { column } => input.column(column).is_some_and(|c| c.watermark),
            GroupKey::Window { window, .. } => window
                .time_column()
                .and_then(|c| input.column(&c).map(|c| c.watermark))
                .unwrap_or(false),
        });
        if !grouped_on_watermark {
            let help = if input.has_watermark {
                "the watermark is declared, but the grouping does not use it: group by window(<event-time column>, ...) or by the watermarked column, or use output_mode: update"
            } else {
                "add a watermark on the event-time column the aggregation groups by, e.g. `watermark: event_ts delay \"10 minutes\"`, or use output_mode: update"
            };
            out.push(Violation::new(
                Rule::AppendAggregationWithoutWatermark,
                Location::OutputMode,
                "Append output mode not supported when there are streaming aggregations on streaming DataFrames/DataSets without watermark".into(),
                Some(help.into()),
            ));
            return;
        }
    }
}

/// Spark: `Complete output mode not supported when there are no streaming
/// aggregations on streaming DataFrames/Datasets`.
fn complete_needs_aggregation(cx: &Ctx, out: &mut Vec<Violation>) {
    if cx.plan.output_mode != OutputMode::Complete {
        return;
    }
    let has_agg = cx
        .result_ops()
        .iter()
        .any(|(ni, oi, op)| matches!(op, Op::Aggregate { .. }) && cx.input_of(*ni, *oi).streaming);
    if !has_agg {
        out.push(Violation::new(
            Rule::CompleteWithoutAggregation,
            Location::OutputMode,
            "Complete output mode not supported when there are no streaming aggregations on streaming DataFrames/Datasets".into(),
            Some("use output_mode: append, or aggregate the stream (group_by + aggregate)".into()),
        ));
    }
}

/// Spark: `Distinct aggregations are not supported on streaming
/// DataFrames/Datasets. Consider using approx_count_distinct() instead.`
fn no_distinct_aggregation(cx: &Ctx, out: &mut Vec<Violation>) {
    for (ni, oi, op) in cx.result_ops() {
        let Op::Aggregate { aggs, .. } = op else {
            continue;
        };
        for (i, a) in aggs.iter().enumerate() {
            if !a.func.def().streaming && cx.input_of(ni, oi).streaming {
                out.push(Violation::new(
                    Rule::DistinctAggregation,
                    Location::Op { node: ni, op: oi, part: crate::check::Part::Agg(i) },
                    "Distinct aggregations are not supported on streaming DataFrames/Datasets. Consider using approx_count_distinct() instead.".into(),
                    Some(format!("an exact distinct count keeps every value on a stream; write `{}: approx_count_distinct({})` (HyperLogLog++, about 5% error by default), or drop_duplicates before count()", a.alias, a.column)),
                ));
            }
        }
    }
}

/// Spark: the global-watermark correctness check
/// (`checkStreamingQueryGlobalWatermarkLimit`): in update or complete mode an
/// aggregation may emit rows that a downstream stateful operator treats as late.
fn no_stateful_after_aggregation_in_update_or_complete(cx: &Ctx, out: &mut Vec<Violation>) {
    if cx.plan.output_mode == OutputMode::Append {
        return;
    }
    let mut seen_agg = false;
    for (ni, oi, op) in cx.result_ops() {
        let stateful =
            op.is_stateful() || matches!(op, Op::Join { right, .. } if cx.is_streaming(right));
        if stateful && seen_agg {
            out.push(Violation::new(
                Rule::ChainedStatefulAfterAggregation,
                Location::Op { node: ni, op: oi, part: Part::Whole },
                "Detected pattern of possible 'correctness' issue due to global watermark. The query contains stateful operation which can emit rows older than the current watermark plus allowed late record delay, which are \"late rows\" in downstream stateful operations and these rows can be discarded. Please refer the programming guide doc for more details. If you understand the possible risk of correctness issue and still need to run the query, you can disable this check by setting the config `spark.sql.streaming.statefulOperator.checkCorrectness.enabled` to false.".into(),
                Some("chain stateful operators only in output_mode: append, where each emits rows once they are final (Spark's message, word for word; weir has no such setting, and refuses the query whatever the configuration)".into()),
            ));
            return;
        }
        if matches!(op, Op::Aggregate { .. }) && cx.input_of(ni, oi).streaming {
            seen_agg = true;
        }
    }
}

/// Spark: `Sorting is not supported on streaming DataFrames/Datasets, unless
/// it is on aggregated DataFrame/Dataset in Complete output mode`.
fn sort_only_on_complete_aggregation(cx: &Ctx, out: &mut Vec<Violation>) {
    for (ni, oi, op) in cx.result_ops() {
        if !matches!(op, Op::Sort { .. }) {
            continue;
        }
        let input = cx.input_of(ni, oi);
        if input.streaming && !(input.aggregated && cx.plan.output_mode == OutputMode::Complete) {
            out.push(Violation::new(
                Rule::SortWithoutCompleteAggregation,
                Location::Op { node: ni, op: oi, part: Part::Whole },
                "Sorting is not supported on streaming DataFrames/Datasets, unless it is on aggregated DataFrame/Dataset in Complete output mode".into(),
                Some("sort in the sink (e.g. in foreach_batch), or aggregate and use output_mode: complete".into()),
            ));
        }
    }
}

/// Spark: `Limits are not supported on streaming DataFrames/Datasets in Update
/// output mode`. Spark also runs a limit in append mode (a count of the
/// rows emitted so far, kept in state); weir does not yet, and refuses it
/// here rather than at the first batch.
fn limit_only_in_complete_mode(cx: &Ctx, out: &mut Vec<Violation>) {
    let (rule, message, help) = match cx.plan.output_mode {
        OutputMode::Complete => return,
        OutputMode::Update => (
            Rule::LimitInUpdateMode,
            "Limits are not supported on streaming DataFrames/Datasets in Update output mode",
            "use output_mode: complete with a limit, or limit in the sink",
        ),
        OutputMode::Append => (
            Rule::LimitInAppendMode,
            "a limit on a stream in Append output mode is not supported yet (Spark keeps a count of the rows emitted; weir limits in Complete output mode only)",
            "use output_mode: complete with a limit, or limit in the sink (e.g. in foreach_batch)",
        ),
    };
    for (ni, oi, op) in cx.result_ops() {
        if matches!(op, Op::Limit { .. }) && cx.input_of(ni, oi).streaming {
            out.push(Violation::new(
                rule,
                Location::Op {
                    node: ni,
                    op: oi,
                    part: Part::Whole,
                },
                message.into(),
                Some(help.into()),
            ));
        }
    }
}

/// Spark: `[NON_TIME_WINDOW_NOT_SUPPORTED_IN_STREAMING] Window function is not
/// supported in ... on streaming DataFrames/Datasets`.
fn no_non_time_window_functions(cx: &Ctx, out: &mut Vec<Violation>) {
    for (ni, oi, op) in cx.result_ops() {
        let exprs: Vec<(String, Expr, Part)> = match op {
            Op::WithColumn { name, expr } => vec![(name.clone(), expr.clone(), Part::Whole)],
            Op::Select { columns } => columns
                .iter()
                .enumerate()
                .map(|(i, c)| (c.alias.clone(), c.expr.clone(), Part::Item(i)))
                .collect(),
            _ => vec![],
        };
        for (name, expr, part) in exprs {
            let Some(window_call) = expr.window_function() else {
                continue;
            };
            let call = window_call.signature();
            let spec = window_call
                .over
                .as_ref()
                .map(|o| o.to_string())
                .unwrap_or_default();
            if !cx.input_of(ni, oi).streaming {
                continue;
            }
            out.push(Violation::new(
                Rule::NonTimeWindowFunction,
                Location::Op { node: ni, op: oi, part },
                format!("[NON_TIME_WINDOW_NOT_SUPPORTED_IN_STREAMING] Window function is not supported in {call} (as column `{name}`) on streaming DataFrames/Datasets. Structured Streaming only supports time-window aggregation using the WINDOW function. (window specification: ({spec}))"),
                Some("group by window(<event-time column>, <size>) instead; for a running number per key, aggregate with count()".into()),
            ).about(name));
        }
    }
}

/// Spark: `dropDuplicatesWithinWatermark is not supported on streaming
/// DataFrames/DataSets without watermark`.
fn dedup_within_watermark_needs_watermark(cx: &Ctx, out: &mut Vec<Violation>) {
    for (ni, oi, op) in cx.result_ops() {
        if let Op::Dedup {
            within_watermark: true,
            ..
        } = op
        {
            let input = cx.input_of(ni, oi);
            if input.streaming && !input.has_watermark {
                out.push(Violation::new(
                    Rule::DedupWithinWatermarkWithoutWatermark,
                    Location::Op { node: ni, op: oi, part: Part::Whole },
                    "dropDuplicatesWithinWatermark is not supported on streaming DataFrames/DataSets without watermark".into(),
                    Some("declare a watermark before it, e.g. `watermark: event_ts delay \"10 minutes\"`".into()),
                ));
            }
        }
    }
}

/// Spark: `Join between two streaming DataFrames/Datasets is not supported in
/// <mode> output mode, only in Append output mode`.
fn stream_stream_join_append_only(cx: &Ctx, out: &mut Vec<Violation>) {
    if cx.plan.output_mode == OutputMode::Append {
        return;
    }
    for (ni, oi, op) in cx.result_ops() {
        let Op::Join { right, .. } = op else { continue };
        if cx.input_of(ni, oi).streaming && cx.is_streaming(right) {
            out.push(Violation::new(
                Rule::StreamStreamJoinNotAppend,
                Location::OutputMode,
                format!(
                    "Join between two streaming DataFrames/Datasets is not supported in {} output mode, only in Append output mode",
                    cx.plan.output_mode.spark_name()
                ),
                Some("use output_mode: append for stream-stream joins".into()),
            ).about(right.as_str()));
            return;
        }
    }
}

/// Spark's join rules: outer joins need the nullable side's state to be
/// bounded (stream-stream), the null-padded side must not be the stream
/// (stream-static), and a left anti join's right side must be static.
fn outer_joins_need_watermark_or_static_side(cx: &Ctx, out: &mut Vec<Violation>) {
    for (ni, oi, op) in cx.result_ops() {
        let Op::Join {
            right,
            how,
            on,
            using,
        } = op
        else {
            continue;
        };
        let left = cx.input_of(ni, oi);
        let Some(rs) = cx.schemas.get(right) else {
            continue;
        };
        let at = Location::Op {
            node: ni,
            op: oi,
            part: Part::Whole,
        };
        let (ls, rstream) = (left.streaming, rs.streaming);
        let name = how.spark_name();
        // An anti join emits a left row once no right row can match it,
        // which a streaming right side never promises (Spark refuses it).
        if *how == JoinType::LeftAnti && rstream {
            out.push(Violation::new(
                Rule::LeftAntiWithStreamingRight,
                at,
                "LeftAnti joins with a streaming DataFrame/Dataset on the right are not supported".into(),
                Some("anti-join a static table (`table: { .. }`), or left outer join the stream and keep the rows whose right columns are null once the watermark passes them".into()),
            ).about(right.as_str()));
            continue;
        }
        // Stream-static: the streaming side must be the preserved one.
        let bad_static = match how {
            JoinType::LeftOuter | JoinType::LeftSemi | JoinType::LeftAnti => !ls && rstream,
            JoinType::RightOuter => ls && !rstream,
            JoinType::FullOuter => ls != rstream,
            JoinType::Inner => false,
        };
        if bad_static {
            let (s, t) = if rstream {
                ("right", "left")
            } else {
                ("left", "right")
            };
            out.push(Violation::new(
                Rule::StreamStaticOuterJoin,
                at,
                format!("{name} join with a streaming DataFrame/Dataset on the {s} and a static DataFrame/Dataset on the {t} is not supported"),
                Some("put the stream on the preserved side (stream left outer join static), or use an inner join".into()),
            ).about(right.as_str()));
            continue;
        }
        if !(ls && rstream) || *how == JoinType::Inner {
            continue;
        }
        // Stream-stream outer / semi: a watermark in the join keys, or a
        // watermark on the nullable side and a range condition.
        let conj: Vec<Expr> = match (on, using) {
            (Some(on), _) => on.conjuncts(),
            (None, Some(keys)) => keys
                .iter()
                .map(|k| Expr::Binary {
                    left: Box::new(Expr::column(k)),
                    op: BinaryOp::Eq,
                    right: Box::new(Expr::column(k)),
                })
                .collect(),
            _ => vec![],
        };
        let wm_in_keys = conj.iter().any(|c| {
            c.is_equality()
                && c.columns().iter().any(|col| {
                    left.column(col)
                        .or_else(|| rs.column(col))
                        .is_some_and(|c| c.watermark)
                })
        });
        let nullable: Vec<&NodeSchema> = match how {
            JoinType::LeftOuter | JoinType::LeftSemi | JoinType::LeftAnti => vec![rs],
            JoinType::RightOuter => vec![&left],
            _ => vec![&left, rs],
        };
        let ranged = |side: &NodeSchema| {
            conj.iter().any(|c| {
                c.is_range()
                    && c.columns()
                        .iter()
                        .any(|col| side.column(col).is_some_and(|c| c.watermark))
            })
        };
        if !wm_in_keys && !nullable.iter().all(|s| ranged(s)) {
            let msg = match how {
                JoinType::LeftSemi => "Stream-stream LeftSemi join between two streaming DataFrame/Datasets is not supported without a watermark in the join keys, or a watermark on the nullable side and an appropriate range condition".to_string(),
                _ => format!("Stream-stream {name} join between two streaming DataFrame/Datasets is not supported without a watermark in the join keys, or a watermark on the nullable side and an appropriate range condition"),
            };
            out.push(Violation::new(
                Rule::StreamStreamOuterJoinWithoutWatermark,
                at,
                msg,
                Some("declare watermarks on both sides and bound the join in time, e.g. `right_ts >= left_ts AND right_ts <= left_ts + INTERVAL '15 minutes'`".into()),
            ).about(right.as_str()));
        }
    }
}

/// True when the query runs under a continuous trigger.
fn is_continuous(cx: &Ctx) -> bool {
    matches!(cx.plan.trigger, Some(TriggerDecl::Continuous(_)))
}

/// Spark: `UnsupportedOperationChecker.checkForContinuous`: `Continuous
/// processing does not support <operator> operations.` Only map-like
/// operators (project, filter) run continuously. The operator names are
/// those of Spark's logical plan, as its message prints them.
fn continuous_only_map_like_operations(cx: &Ctx, out: &mut Vec<Violation>) {
    if !is_continuous(cx) {
        return;
    }
    for (ni, oi, op) in cx.result_ops() {
        let (operator, what) = match op {
            Op::Filter { .. } | Op::Select { .. } | Op::WithColumn { .. } => continue,
            Op::Watermark { .. } => ("EventTimeWatermark", "watermarks"),
            Op::Aggregate { .. } => ("Aggregate", "aggregations"),
            Op::Dedup {
                within_watermark: false,
                ..
            } => ("Deduplicate", "drop_duplicates"),
            Op::Dedup {
                within_watermark: true,
                ..
            } => (
                "DeduplicateWithinWatermark",
                "drop_duplicates_within_watermark",
            ),
            Op::Join { .. } => ("Join", "joins"),
            Op::Sort { .. } => ("Sort", "sorting"),
            Op::Limit { .. } => ("LocalLimit", "limits"),
        };
        out.push(Violation::new(
            Rule::ContinuousUnsupportedOperation,
            Location::Op { node: ni, op: oi, part: Part::Whole },
            format!("Continuous processing does not support {operator} operations."),
            Some(format!("continuous processing runs only filter, select and with_column; for {what}, use a micro-batch trigger, e.g. `trigger: processing_time(\"1 second\")`")),
        ));
    }
}

/// Spark (same check): `Continuous processing does not support current time
/// operations.` (`current_timestamp()`, `now()`, `current_date()`,
/// `localtimestamp()`).
fn continuous_no_current_time(cx: &Ctx, out: &mut Vec<Violation>) {
    if !is_continuous(cx) {
        return;
    }
    for (ni, oi, op) in cx.result_ops() {
        let exprs: Vec<(&Expr, Part)> = match op {
            Op::Filter { predicate } => vec![(predicate, Part::Whole)],
            Op::WithColumn { expr, .. } => vec![(expr, Part::Whole)],
            Op::Select { columns } => columns
                .iter()
                .enumerate()
                .map(|(i, c)| (&c.expr, Part::Item(i)))
                .collect(),
            _ => continue,
        };
        for (expr, part) in exprs {
            if expr.uses_current_time() {
                out.push(Violation::new(
                    Rule::ContinuousCurrentTime,
                    Location::Op { node: ni, op: oi, part },
                    "Continuous processing does not support current time operations.".into(),
                    Some("compare with the rows' own event-time column instead of the current time, or use a micro-batch trigger, e.g. `trigger: processing_time(\"1 second\")`".into()),
                ));
            }
        }
    }
}

/// Spark: `DataStreamWriter.start`: `'foreachBatch' is not supported with
/// continuous trigger`.
fn continuous_not_into_foreach_batch(cx: &Ctx, out: &mut Vec<Violation>) {
    let into_foreach_batch = cx
        .plan
        .sink
        .as_ref()
        .is_some_and(|s| s.kind == SinkKind::ForeachBatch);
    if is_continuous(cx) && into_foreach_batch {
        out.push(Violation::new(
            Rule::ContinuousUnsupportedSink,
            Location::Trigger,
            "'foreachBatch' is not supported with continuous trigger".into(),
            Some("foreach_batch works on micro-batches: use a micro-batch trigger, e.g. `trigger: processing_time(\"1 second\")`".into()),
        ));
    }
}

/// Spark: `DataSource.createSink` for a file format: `Data source <format>
/// does not support <mode> output mode`. A file, once written, is never
/// rewritten: the file sink only appends.
fn file_sink_append_only(cx: &Ctx, out: &mut Vec<Violation>) {
    let Some(sink) = &cx.plan.sink else { return };
    if sink.kind != SinkKind::File || cx.plan.output_mode == OutputMode::Append {
        return;
    }
    out.push(Violation::new(
        Rule::FileSinkNotAppend,
        Location::Sink,
        format!(
            "Data source {} does not support {} output mode",
            sink.kind.name(),
            cx.plan.output_mode.spark_name()
        ),
        Some("the file sink writes each row once: use output_mode: append (an aggregation then needs a watermark), or a console, memory or foreach_batch sink".into()),
    ));
}

/// Spark: `KafkaWriter.validateQuery`: `Required attribute 'value' not
/// found`; `value` and `key` must be string or binary (`<column> attribute
/// unsupported type <type>. <column> must be a(n) string or binary`). A
/// `topic` column is not checked here: the plan does not say whether the
/// sink's `topic` option (which wins over the column) is set.
fn kafka_sink_needs_value_column(cx: &Ctx, out: &mut Vec<Violation>) {
    if !cx
        .plan
        .sink
        .as_ref()
        .is_some_and(|s| s.kind == SinkKind::Kafka)
    {
        return;
    }
    let Some(result) = cx.schemas.get(&cx.plan.result) else {
        return;
    };
    if result.column("value").is_none() {
        out.push(Violation::new(
            Rule::KafkaSinkColumns,
            Location::Sink,
            "Required attribute 'value' not found".into(),
            Some(format!(
                "the Kafka sink writes each row's `value` column (string or binary) as the record's value, and its `key` column, if any, as the key; the result has {}: compute a `value`, e.g. `value: x as String` in `select:`",
                list_columns(result)
            )),
        ).about("value"));
    }
    for name in ["value", "key"] {
        let Some(t) = result.column(name).and_then(|c| c.dtype) else {
            continue;
        };
        if matches!(t, DataType::String | DataType::Binary) {
            continue;
        }
        out.push(
            Violation::new(
                Rule::KafkaSinkColumns,
                Location::Sink,
                format!(
                    "{name} attribute unsupported type {}. {name} must be a(n) string or binary",
                    t.spark_name()
                ),
                Some(format!(
                    "convert it in `select:`, e.g. `{name}: {name} as String`"
                )),
            )
            .about(name),
        );
    }
}

/// The columns of a schema, for help lines.
fn list_columns(s: &NodeSchema) -> String {
    if s.columns.is_empty() {
        return "no columns".into();
    }
    let names: Vec<String> = s.columns.iter().map(|c| format!("`{}`", c.name)).collect();
    format!("columns {}", names.join(", "))
}

/// Spark: `StreamingQueryManager.createQuery`: `checkpointLocation must be
/// specified either through option("checkpointLocation", ...) or
/// SparkSession.conf.set("spark.sql.streaming.checkpointLocation", ...)`;
/// weir's message names only the option (it has no session-wide default).
/// Only the console, memory and noop sinks run on a temporary checkpoint
/// ([`SinkKind::needs_checkpoint`]).
fn sink_needs_checkpoint(cx: &Ctx, out: &mut Vec<Violation>) {
    let Some(sink) = &cx.plan.sink else { return };
    if sink.checkpoint || !sink.kind.needs_checkpoint() {
        return;
    }
    out.push(Violation::new(
        Rule::CheckpointRequired,
        Location::Sink,
        "checkpointLocation must be specified for this sink (Spark's option(\"checkpointLocation\", ...); weir has no session-wide default location)".into(),
        Some("the query keeps its progress in the checkpoint, to restart where it stopped: add `checkpoint: \"chk/<query>\"` (builder: `.checkpoint_location(dir)`); only the console, memory and noop sinks run without one".into()),
    ));
}

/// weir, beyond Spark: a query spread over many processes (`scale_out`)
/// runs one task per Kafka partition, each with its own micro-batches and
/// sink. What needs every row in one place, an end, or a single writer
/// cannot be divided: a stream-stream join (both inputs in one task), a
/// sort or a limit (every row), `once`/`available_now` (partitions move
/// between processes: there is no end to reach), the file, memory and
/// `foreach_batch` sinks (one writer), and a query without a checkpoint
/// (every process shares it).
fn scale_out_divides(cx: &Ctx, out: &mut Vec<Violation>) {
    if cx.plan.scale_out.is_none() {
        return;
    }
    let stream_join = cx.plan.nodes.len() > 1;
    for (ni, oi, op) in cx.result_ops() {
        let what = match op {
            Op::Join { .. } if stream_join => "a stream-stream join needs both inputs in one task",
            Op::Sort { .. } => "a sort needs every row in one task",
            Op::Limit { .. } => "a limit needs every row in one task",
            _ => continue,
        };
        out.push(Violation::new(
            Rule::ScaleOutCannotDivide,
            Location::Op {
                node: ni,
                op: oi,
                part: Part::Whole,
            },
            format!("{what}, and a scale-out query divides its rows among tasks"),
            Some("remove it, or run the query in one process (no scale_out)".into()),
        ));
    }
    if matches!(
        cx.plan.trigger,
        Some(TriggerDecl::Once | TriggerDecl::AvailableNow)
    ) {
        out.push(Violation::new(
            Rule::ScaleOutCannotDivide,
            Location::Trigger,
            "a scale-out query runs until stopped: its partitions move between processes, so `once` and `available_now` have no end to reach".into(),
            Some("use the default trigger or a processing-time one".into()),
        ));
    }
    let Some(sink) = &cx.plan.sink else { return };
    let refused = match sink.kind {
        SinkKind::File => Some("the file sink cannot be divided among the tasks of a scale-out query: its manifest (`_spark_metadata`) has one writer"),
        SinkKind::Memory | SinkKind::ForeachBatch => Some("this sink cannot be divided among the tasks of a scale-out query: it has one writer"),
        _ => None,
    };
    if let Some(message) = refused {
        out.push(Violation::new(
            Rule::ScaleOutCannotDivide,
            Location::Sink,
            message.into(),
            Some("write to Kafka, PostgreSQL or Redis (exactly once per task) or the console, or run the query in one process".into()),
        ));
    }
    if !sink.checkpoint {
        out.push(Violation::new(
            Rule::ScaleOutCannotDivide,
            Location::Sink,
            "a scale-out query needs a checkpoint location every process of the group reaches".into(),
            Some("give it one (`checkpoint: \"s3://bucket/prefix\"`, builder: `.checkpoint_location(...)`); a local path serves processes on one machine".into()),
        ));
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::plan::*;
    use crate::types::{DataType, Field};

    /// The event schema the plan's rule tests share: `ts`, `key`, `value`.
    pub(crate) fn events() -> Vec<Field> {
        vec![
            Field::new("ts", DataType::Timestamp),
            Field::new("key", DataType::String),
            Field::new("value", DataType::Int64),
        ]
    }

    fn window_count(wm: bool, mode: OutputMode) -> StreamPlan {
        let mut ops = vec![];
        if wm {
            ops.push(Op::Watermark {
                column: "ts".into(),
                delay: "10 minutes".into(),
            });
        }
        ops.push(Op::Aggregate {
            keys: vec![GroupKey::Window {
                window: WindowSpec {
                    column: Some("ts".into()),
                    expr: None,
                    size: "10 minutes".into(),
                    slide: None,
                    gap: None,
                },
                alias: "window".into(),
            }],
            aggs: vec![AggSpec {
                func: AggFn::Count,
                column: "*".into(),
                alias: "n".into(),
            }],
        });
        StreamPlan::single("events", events(), ops, mode)
    }

    fn rules(p: &StreamPlan) -> Vec<Rule> {
        check(p).into_iter().map(|v| v.rule).collect()
    }

    #[test]
    fn append_aggregation_needs_a_watermark() {
        assert_eq!(
            rules(&window_count(false, OutputMode::Append)),
            vec![Rule::AppendAggregationWithoutWatermark]
        );
        assert!(rules(&window_count(true, OutputMode::Append)).is_empty());
        assert!(rules(&window_count(false, OutputMode::Update)).is_empty());
    }

    #[test]
    fn append_aggregation_must_group_on_the_watermark() {
        let p = StreamPlan::single(
            "events",
            events(),
            vec![
                Op::Watermark {
                    column: "ts".into(),
                    delay: "1 minute".into(),
                },
                Op::Aggregate {
                    keys: vec![GroupKey::Column {
                        column: "key".into(),
                    }],
                    aggs: vec![],
                },
            ],
            OutputMode::Append,
        );
        let v = check(&p);
        assert_eq!(v[0].rule, Rule::AppendAggregationWithoutWatermark);
        assert!(v[0].help.as_deref().unwrap().contains("does not use it"));
    }

    #[test]
    fn complete_needs_an_aggregation() {
        let p = StreamPlan::single("events", events(), vec![], OutputMode::Complete);
        assert_eq!(rules(&p), vec![Rule::CompleteWithoutAggregation]);
        assert!(rules(&window_count(false, OutputMode::Complete)).is_empty());
    }

    #[test]
    fn distinct_sort_limit_and_window_functions() {
        let p = StreamPlan::single(
            "events",
            events(),
            vec![Op::Aggregate {
                keys: vec![GroupKey::Column {
                    column: "key".into(),
                }],
                aggs: vec![AggSpec {
                    func: AggFn::CountDistinct,
                    column: "value".into(),
                    alias: "d".into(),
                }],
            }],
            OutputMode::Complete,
        );
        assert_eq!(rules(&p), vec![Rule::DistinctAggregation]);
        let p = StreamPlan::single(
            "events",
            events(),
            vec![Op::Sort {
                by: vec![SortKey {
                    column: "ts".into(),
                    desc: false,
                }],
            }],
            OutputMode::Append,
        );
        assert_eq!(rules(&p), vec![Rule::SortWithoutCompleteAggregation]);
        let mut p = window_count(false, OutputMode::Complete);
        p.nodes[0].ops.push(Op::Sort {
            by: vec![SortKey {
                column: "n".into(),
                desc: true,
            }],
        });
        assert!(rules(&p).is_empty());
        let mut p = window_count(false, OutputMode::Update);
        p.nodes[0].ops.push(Op::Limit { n: 3 });
        assert_eq!(rules(&p), vec![Rule::LimitInUpdateMode]);
        // Append: refused here, not at the first batch; complete: allowed.
        let p = StreamPlan::single(
            "events",
            events(),
            vec![Op::Limit { n: 3 }],
            OutputMode::Append,
        );
        assert_eq!(rules(&p), vec![Rule::LimitInAppendMode]);
        let mut p = window_count(false, OutputMode::Complete);
        p.nodes[0].ops.push(Op::Limit { n: 3 });
        assert!(rules(&p).is_empty());
        let p = StreamPlan::single(
            "events",
            events(),
            vec![Op::WithColumn {
                name: "rn".into(),
                expr: "row_number() OVER (PARTITION BY key ORDER BY ts)".into(),
            }],
            OutputMode::Append,
        );
        let v = check(&p);
        assert_eq!(v.len(), 1);
        assert!(v[0].message.contains("ROW_NUMBER() (as column `rn`)"));
    }

    #[test]
    fn chained_aggregation_only_in_append() {
        let mut p = window_count(true, OutputMode::Update);
        p.nodes[0].ops.push(Op::Aggregate {
            keys: vec![],
            aggs: vec![AggSpec {
                func: AggFn::Sum,
                column: "n".into(),
                alias: "t".into(),
            }],
        });
        assert_eq!(rules(&p), vec![Rule::ChainedStatefulAfterAggregation]);
    }

    #[test]
    fn dedup_within_watermark_needs_one() {
        let p = StreamPlan::single(
            "events",
            events(),
            vec![Op::Dedup {
                columns: vec!["key".into()],
                within_watermark: true,
            }],
            OutputMode::Append,
        );
        assert_eq!(rules(&p), vec![Rule::DedupWithinWatermarkWithoutWatermark]);
    }

    fn with_sink(mut p: StreamPlan, kind: SinkKind, checkpoint: bool) -> StreamPlan {
        p.sink = Some(SinkDecl { kind, checkpoint });
        p
    }

    #[test]
    fn file_sink_only_appends() {
        let p = with_sink(
            window_count(true, OutputMode::Complete),
            SinkKind::File,
            true,
        );
        let v = check(&p);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].rule, Rule::FileSinkNotAppend);
        assert_eq!(v[0].at, Location::Sink);
        assert_eq!(
            v[0].message,
            "Data source file does not support Complete output mode"
        );
        let p = with_sink(window_count(true, OutputMode::Update), SinkKind::File, true);
        assert_eq!(rules(&p), vec![Rule::FileSinkNotAppend]);
        let p = with_sink(window_count(true, OutputMode::Append), SinkKind::File, true);
        assert!(rules(&p).is_empty());
        let p = with_sink(
            window_count(true, OutputMode::Update),
            SinkKind::Console,
            false,
        );
        assert!(rules(&p).is_empty());
    }

    #[test]
    fn kafka_sink_needs_a_value_column() {
        let select = |items: &[(&str, &str)]| {
            StreamPlan::single(
                "events",
                events(),
                vec![Op::Select {
                    columns: items
                        .iter()
                        .map(|(e, a)| SelectItem {
                            expr: Expr::read(e),
                            alias: a.to_string(),
                        })
                        .collect(),
                }],
                OutputMode::Append,
            )
        };
        let p = with_sink(
            select(&[("key", "key"), ("ts", "ts")]),
            SinkKind::Kafka,
            true,
        );
        let v = check(&p);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].rule, Rule::KafkaSinkColumns);
        assert_eq!(v[0].message, "Required attribute 'value' not found");
        assert!(v[0].help.as_deref().unwrap().contains("`key`, `ts`"));
        // `value` is a bigint, `key` a timestamp: both are reported.
        let p = with_sink(
            select(&[("value", "value"), ("ts", "key")]),
            SinkKind::Kafka,
            true,
        );
        let msgs: Vec<String> = check(&p).into_iter().map(|v| v.message).collect();
        assert_eq!(
            msgs,
            [
                "value attribute unsupported type bigint. value must be a(n) string or binary",
                "key attribute unsupported type timestamp. key must be a(n) string or binary"
            ]
        );
        let p = with_sink(select(&[("key", "value")]), SinkKind::Kafka, true);
        assert!(rules(&p).is_empty());
        // An untyped (computed) value column passes: its type is checked where it is known.
        let p = with_sink(select(&[("upper(key)", "value")]), SinkKind::Kafka, true);
        assert!(rules(&p).is_empty());
        // Rows written as JSON need no `value` column, but a checkpoint still.
        let p = with_sink(select(&[("key", "key")]), SinkKind::KafkaJson, true);
        assert!(rules(&p).is_empty());
        let p = with_sink(select(&[("key", "key")]), SinkKind::KafkaJson, false);
        assert_eq!(rules(&p), vec![Rule::CheckpointRequired]);
    }

    #[test]
    fn sinks_other_than_console_and_memory_need_a_checkpoint() {
        let plain = || StreamPlan::single("events", events(), vec![], OutputMode::Append);
        for kind in [
            SinkKind::File,
            SinkKind::ForeachBatch,
            SinkKind::Kafka,
            SinkKind::Other,
        ] {
            let v = check(&with_sink(plain(), kind, false));
            let v: Vec<&Violation> = v
                .iter()
                .filter(|v| v.rule == Rule::CheckpointRequired)
                .collect();
            assert_eq!(v.len(), 1, "{kind:?}");
            assert!(v[0]
                .message
                .starts_with("checkpointLocation must be specified for this sink"));
            assert!(v[0]
                .help
                .as_deref()
                .unwrap()
                .contains("checkpoint: \"chk/<query>\""));
            assert!(rules(&with_sink(plain(), kind, true))
                .iter()
                .all(|r| *r != Rule::CheckpointRequired));
        }
        for kind in [SinkKind::Console, SinkKind::Memory] {
            assert!(rules(&with_sink(plain(), kind, false)).is_empty());
        }
        // No sink declared (a plan from the conformance format): nothing to check.
        assert!(rules(&plain()).is_empty());
    }

    #[test]
    fn continuous_runs_only_map_like_operations() {
        let mut p = StreamPlan::single(
            "events",
            events(),
            vec![
                Op::Filter {
                    predicate: "value > 0".into(),
                },
                Op::WithColumn {
                    name: "k2".into(),
                    expr: "upper(key)".into(),
                },
                Op::Select {
                    columns: vec![SelectItem {
                        expr: "ts".into(),
                        alias: "ts".into(),
                    }],
                },
            ],
            OutputMode::Append,
        );
        p.trigger = Some(TriggerDecl::Continuous(1000));
        assert!(rules(&p).is_empty());
        let mut p = window_count(true, OutputMode::Update);
        p.nodes[0].ops.insert(
            1,
            Op::Dedup {
                columns: vec!["key".into()],
                within_watermark: false,
            },
        );
        p.nodes[0].ops.push(Op::Limit { n: 1 });
        p.trigger = Some(TriggerDecl::Continuous(1000));
        let v = check(&p);
        let msgs: Vec<&str> = v
            .iter()
            .filter(|v| v.rule == Rule::ContinuousUnsupportedOperation)
            .map(|v| v.message.as_str())
            .collect();
        assert_eq!(
            msgs,
            [
                "Continuous processing does not support EventTimeWatermark operations.",
                "Continuous processing does not support Deduplicate operations.",
                "Continuous processing does not support Aggregate operations.",
                "Continuous processing does not support LocalLimit operations.",
            ]
        );
        // ... each at its op; and the limit in update mode breaks its own rule too.
        assert_eq!(v[0].rule, Rule::LimitInUpdateMode);
        assert_eq!(
            v[1].at,
            Location::Op {
                node: 0,
                op: 0,
                part: Part::Whole
            }
        );
        // The same plan on a micro-batch trigger breaks only the limit rule.
        p.trigger = Some(TriggerDecl::ProcessingTime(1000));
        assert_eq!(rules(&p), vec![Rule::LimitInUpdateMode]);
    }

    #[test]
    fn continuous_has_no_current_time_and_no_foreach_batch() {
        let mut p = StreamPlan::single(
            "events",
            events(),
            vec![
                Op::Filter {
                    predicate: "ts > now() - INTERVAL '1 minute'".into(),
                },
                Op::Select {
                    columns: vec![
                        SelectItem {
                            expr: "key".into(),
                            alias: "key".into(),
                        },
                        SelectItem {
                            expr: "current_timestamp()".into(),
                            alias: "at".into(),
                        },
                    ],
                },
            ],
            OutputMode::Append,
        );
        p.trigger = Some(TriggerDecl::Continuous(1000));
        let v = check(&p);
        assert_eq!(
            v.iter().map(|v| (v.rule, v.at.clone())).collect::<Vec<_>>(),
            [
                (
                    Rule::ContinuousCurrentTime,
                    Location::Op {
                        node: 0,
                        op: 0,
                        part: Part::Whole
                    }
                ),
                (
                    Rule::ContinuousCurrentTime,
                    Location::Op {
                        node: 0,
                        op: 1,
                        part: Part::Item(1)
                    }
                ),
            ]
        );
        assert_eq!(
            v[0].message,
            "Continuous processing does not support current time operations."
        );
        let mut p = with_sink(
            StreamPlan::single("events", events(), vec![], OutputMode::Append),
            SinkKind::ForeachBatch,
            true,
        );
        p.trigger = Some(TriggerDecl::Continuous(1000));
        let v = check(&p);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].at, Location::Trigger);
        assert_eq!(
            v[0].message,
            "'foreachBatch' is not supported with continuous trigger"
        );
    }

    #[test]
    fn every_violation_is_reported() {
        // Complete mode into a file sink without checkpoint, sorted without
        // an aggregation, distinct count: every rule speaks.
        let mut p = StreamPlan::single(
            "events",
            events(),
            vec![Op::Sort {
                by: vec![SortKey {
                    column: "ts".into(),
                    desc: false,
                }],
            }],
            OutputMode::Complete,
        );
        p.sink = Some(SinkDecl {
            kind: SinkKind::File,
            checkpoint: false,
        });
        assert_eq!(
            rules(&p),
            vec![
                Rule::CompleteWithoutAggregation,
                Rule::SortWithoutCompleteAggregation,
                Rule::FileSinkNotAppend,
                Rule::CheckpointRequired
            ]
        );
    }

    #[test]
    fn session_windows_follow_sparks_limits() {
        let session = |keys: Vec<GroupKey>, mode| {
            StreamPlan::single(
                "events",
                events(),
                vec![
                    Op::Watermark {
                        column: "ts".into(),
                        delay: "1 minute".into(),
                    },
                    Op::Aggregate {
                        keys,
                        aggs: vec![AggSpec {
                            func: AggFn::Count,
                            column: "*".into(),
                            alias: "n".into(),
                        }],
                    },
                ],
                mode,
            )
        };
        let sw = GroupKey::Window {
            window: WindowSpec {
                column: Some("ts".into()),
                expr: None,
                size: Default::default(),
                slide: None,
                gap: Some("5 minutes".into()),
            },
            alias: "session_window".into(),
        };
        let key = GroupKey::Column {
            column: "key".into(),
        };
        assert!(rules(&session(vec![sw.clone(), key.clone()], OutputMode::Append)).is_empty());
        assert_eq!(
            rules(&session(vec![sw.clone(), key], OutputMode::Update)),
            vec![Rule::SessionWindowInUpdateMode]
        );
        assert_eq!(
            rules(&session(vec![sw], OutputMode::Append)),
            vec![Rule::SessionWindowWithoutKey]
        );
    }

    #[test]
    fn scale_out_refuses_what_it_cannot_divide() {
        let mut p = window_count(true, OutputMode::Complete);
        p.nodes[0].ops.push(Op::Sort {
            by: vec![SortKey {
                column: "count".into(),
                desc: true,
            }],
        });
        p.sink = Some(SinkDecl {
            kind: SinkKind::File,
            checkpoint: false,
        });
        p.trigger = Some(TriggerDecl::AvailableNow);
        assert!(!rules(&p).contains(&Rule::ScaleOutCannotDivide));
        p.scale_out = Some("g".into());
        let v: Vec<(Location, String)> = check(&p)
            .into_iter()
            .filter(|v| v.rule == Rule::ScaleOutCannotDivide)
            .map(|v| (v.at, v.message))
            .collect();
        assert_eq!(v.len(), 4, "{v:?}");
        assert!(
            matches!(v[0].0, Location::Op { node: 0, .. })
                && v[0].1.starts_with("a sort needs every row")
        );
        assert_eq!(v[1].0, Location::Trigger);
        assert!(v[2].1.starts_with("the file sink cannot be divided"));
        assert!(v[3]
            .1
            .starts_with("a scale-out query needs a checkpoint location"));
        // A limit, as a sort.
        p.nodes[0].ops.pop();
        p.nodes[0].ops.push(Op::Limit { n: 3 });
        assert!(check(&p)
            .iter()
            .any(|v| v.rule == Rule::ScaleOutCannotDivide
                && v.message.starts_with("a limit needs every row in one task")));
        // What it can divide: a Kafka sink with a checkpoint, the default trigger.
        p.nodes[0].ops.pop();
        p.sink = Some(SinkDecl {
            kind: SinkKind::KafkaJson,
            checkpoint: true,
        });
        p.trigger = None;
        assert!(!rules(&p).contains(&Rule::ScaleOutCannotDivide));
    }
}
