//! Compile-time checks: every [`Violation`] of [`weir_plan::check`] turned
//! into a compile error at the token that caused it, plus the few rules only
//! the macro can see (one rule, one function, as serde_derive's check.rs).

use proc_macro2::TokenStream;
use weir_plan::resolve::check_column;
use weir_plan::violation::Part;
use weir_plan::{Location, Op, OutputMode, Rule, Violation};

use crate::ast::{QueryDecl, Sink, Source, TriggerDecl};
use crate::errors::{with_help, Errors};
use crate::expr::ColumnRef;
use crate::lower::{Lowered, OpSpans};
use crate::types::{lookup, Col};

/// Reports every violation of the plan's streaming rules at its tokens.
pub fn check_plan(l: &Lowered, errs: &mut Errors) {
    let violations = weir_plan::check(&l.plan);
    let mut reported: Vec<(usize, usize, String)> = vec![];
    for v in &violations {
        if let (Rule::UnknownColumn, Location::Op { node, op, .. }, Some(name)) =
            (v.rule, &v.at, &v.subject)
        {
            reported.push((*node, *op, name.clone()));
        }
        let help = match v.rule {
            // The plan's help writes SQL; say it in the macro's syntax.
            Rule::StreamStreamOuterJoinWithoutWatermark => Some("declare `watermark:` on both sides and bound the join in time, e.g. `on: click_ad_id == ad_id && click_ts >= ad_ts && click_ts <= ad_ts + interval(\"15 minutes\")`"),
            _ => v.help.as_deref(),
        };
        let mut message = with_help(&v.message, help);
        if v.at == Location::OutputMode && l.spans.output_mode.is_none() {
            message
                .push_str("\nnote: no `output_mode:` is given, so it is append (Spark's default)");
        }
        if let Some(note) = order_note(l, v).or_else(|| sort_note(l, v)) {
            message.push_str("\nnote: ");
            message.push_str(note);
        }
        errs.spanned(locate(l, v), message);
    }
    unknown_columns_in_expressions(l, &reported, errs);
}

/// The tokens a violation points at.
pub fn locate(l: &Lowered, v: &Violation) -> TokenStream {
    let s = &l.spans;
    let (ops, op, part) = match &v.at {
        Location::Op { node, op, part } if *node == l.result_node() => (&s.ops[..], *op, *part),
        Location::Op { node, op, part } => match &l.join {
            Some(j) if !j.table && *node == 0 => (&j.spans[..], *op, *part),
            _ => return s.query.clone(),
        },
        Location::OutputMode => {
            return s
                .output_mode
                .clone()
                .or_else(|| s.mode_fallback.clone())
                .unwrap_or_else(|| s.query.clone())
        }
        Location::Sink => return s.sink.clone().unwrap_or_else(|| s.query.clone()),
        Location::Trigger => return s.trigger.clone().unwrap_or_else(|| s.query.clone()),
        _ => return s.query.clone(),
    };
    locate_op(ops.get(op), part, v).unwrap_or_else(|| s.query.clone())
}

/// The tokens of part `part` of one op, for violation `v`.
fn locate_op(op: Option<&OpSpans>, part: Part, v: &Violation) -> Option<TokenStream> {
    let by_name = |cols: &[ColumnRef]| {
        let name = v.subject.as_deref()?;
        cols.iter()
            .find(|c| c.name == name)
            .map(|c| c.tokens.clone())
    };
    Some(match (op?, part) {
        (OpSpans::Filter { expr, columns }, _) => by_name(columns).unwrap_or_else(|| expr.clone()),
        (OpSpans::Select { items, .. }, Part::Item(i)) if i < items.len() => {
            let it = &items[i];
            match v.rule {
                Rule::DuplicateColumn => it.alias.clone(),
                Rule::UnknownColumn => by_name(&it.columns).unwrap_or_else(|| it.expr.clone()),
                _ => it.expr.clone(),
            }
        }
        (OpSpans::Select { key, .. }, _) => key.clone(),
        (OpSpans::WithColumn { expr, columns, .. }, _) => match v.rule {
            Rule::UnknownColumn => by_name(columns).unwrap_or_else(|| expr.clone()),
            _ => expr.clone(),
        },
        (OpSpans::Watermark { delay, .. }, Part::Delay) => delay.clone(),
        (OpSpans::Watermark { key, column, .. }, _) => match v.rule {
            Rule::ContinuousUnsupportedOperation => key.clone(),
            _ => column.clone(),
        },
        (OpSpans::Join { using, .. }, Part::Column(i)) if i < using.len() => using[i].clone(),
        (
            OpSpans::Join {
                key,
                how,
                on,
                columns,
                ..
            },
            _,
        ) => match v.rule {
            Rule::UnknownColumn => by_name(columns)
                .or_else(|| on.clone())
                .unwrap_or_else(|| key.clone()),
            Rule::StreamStaticOuterJoin
            | Rule::StreamStreamOuterJoinWithoutWatermark
            | Rule::LeftAntiWithStreamingRight => how.clone(),
            _ => key.clone(),
        },
        (OpSpans::Dedup { columns, .. } | OpSpans::Sort { columns, .. }, Part::Column(i))
            if i < columns.len() =>
        {
            columns[i].clone()
        }
        (OpSpans::Dedup { key, .. } | OpSpans::Sort { key, .. } | OpSpans::Limit { key }, _) => {
            key.clone()
        }
        (OpSpans::Aggregate { keys, .. }, Part::Key(i)) if i < keys.len() => match v.rule {
            Rule::DuplicateColumn | Rule::SessionWindowWithoutKey => keys[i].whole.clone(),
            _ => keys[i].column.clone(),
        },
        (OpSpans::Aggregate { keys, .. }, Part::KeySize(i)) if i < keys.len() => keys[i]
            .size
            .clone()
            .unwrap_or_else(|| keys[i].whole.clone()),
        (OpSpans::Aggregate { keys, .. }, Part::KeySlide(i)) if i < keys.len() => keys[i]
            .slide
            .clone()
            .unwrap_or_else(|| keys[i].whole.clone()),
        (OpSpans::Aggregate { aggs, .. }, Part::Agg(i)) if i < aggs.len() => {
            let a = &aggs[i];
            match v.rule {
                Rule::DuplicateColumn => a.alias.clone(),
                Rule::UnknownColumn | Rule::TypeMismatch => {
                    a.arg.clone().unwrap_or_else(|| a.call.clone())
                }
                _ => a.call.clone(),
            }
        }
        (OpSpans::Aggregate { key, .. }, _) => key.clone(),
    })
}

/// For an unknown column that the op order explains (a filter naming a
/// select alias; a watermark or key on a column the select dropped), why.
fn order_note(l: &Lowered, v: &Violation) -> Option<&'static str> {
    let Location::Op { node, op, .. } = v.at else {
        return None;
    };
    if v.rule != Rule::UnknownColumn || node != l.result_node() {
        return None;
    }
    let name = v.subject.as_deref()?;
    let select = l.result_ops().iter().find_map(|o| match o {
        Op::Select { columns } => Some(columns),
        _ => None,
    })?;
    match l.spans.ops.get(op)? {
        OpSpans::Filter { .. } if select.iter().any(|c| c.alias == name) => Some(
            "`filter:` runs before `select:`, so it sees the source's columns, not the select's",
        ),
        OpSpans::WithColumn { .. } | OpSpans::Watermark { .. } | OpSpans::Dedup { .. } | OpSpans::Aggregate { .. }
            if lookup(&l.input, name).is_some() =>
        {
            Some("`with_column:`, `watermark:`, `drop_duplicates:` and `group_by:` run after `select:`; keep the column in the select")
        }
        _ => None,
    }
}

/// For an unknown column in `order_by:` that exists before the aggregation.
fn sort_note(l: &Lowered, v: &Violation) -> Option<&'static str> {
    let Location::Op { node, op, .. } = v.at else {
        return None;
    };
    if v.rule != Rule::UnknownColumn
        || node != l.result_node()
        || !matches!(l.spans.ops.get(op)?, OpSpans::Sort { .. })
    {
        return None;
    }
    let name = v.subject.as_deref()?;
    let aggregated = l
        .result_ops()
        .iter()
        .any(|o| matches!(o, Op::Aggregate { .. }));
    (aggregated && lookup(&l.pre_agg, name).is_some())
        .then_some("`order_by:` runs after `aggregate:`, so it sees the result's columns (group keys and aggregates)")
}

/// The plan's SQL scan skips words it takes for keywords (a column named
/// `timestamp` or `date`); the macro sees every identifier, so it reports
/// the unknown ones the scan missed, by the plan's own rule
/// ([`weir_plan::resolve::check_column`]).
fn unknown_columns_in_expressions(
    l: &Lowered,
    reported: &[(usize, usize, String)],
    errs: &mut Errors,
) {
    let mut nodes = vec![(l.result_node(), &l.input, &l.spans.ops)];
    if let Some(j) = l.join.as_ref().filter(|j| !j.table) {
        nodes.push((0, &j.input, &j.spans));
    }
    for (node, input, spans) in nodes {
        let input: Vec<String> = input.iter().map(|c| c.name.clone()).collect();
        for (oi, sp) in spans.iter().enumerate() {
            let (refs, visible): (Vec<&ColumnRef>, &[String]) = match sp {
                OpSpans::Filter { columns, .. } => (columns.iter().collect(), &input),
                OpSpans::Select { items, .. } => {
                    (items.iter().flat_map(|i| &i.columns).collect(), &input)
                }
                OpSpans::WithColumn {
                    columns, visible, ..
                }
                | OpSpans::Join {
                    columns, visible, ..
                } => (columns.iter().collect(), visible),
                _ => continue,
            };
            let visible: Vec<&str> = visible.iter().map(String::as_str).collect();
            let at = Location::Op {
                node,
                op: oi,
                part: Part::Whole,
            };
            let mut seen: Vec<&str> = vec![];
            for r in refs {
                if seen.contains(&r.name.as_str())
                    || reported
                        .iter()
                        .any(|(n, o, c)| *n == node && *o == oi && *c == r.name)
                {
                    continue;
                }
                let Some(v) = check_column(&r.name, &visible, at.clone()) else {
                    continue;
                };
                seen.push(&r.name);
                errs.spanned(&r.tokens, with_help(&v.message, v.help.as_deref()));
            }
        }
    }
}

/// What weir checks but cannot run yet: continuous processing (the engine
/// has no continuous trigger) and the Kafka sink (not generated by the
/// macro yet). Reported after the streaming rules, which the declaration
/// has been checked against all the same.
pub fn not_supported_yet(q: &QueryDecl, errs: &mut Errors) {
    if let Some(s) = q.late_rows.as_ref().filter(|s| {
        matches!(
            s.kind,
            Sink::Kafka { .. } | Sink::Postgres { .. } | Sink::Redis { .. } | Sink::Foreach(_)
        )
    }) {
        errs.spanned_help(
            &s.ident,
            format!("late rows cannot go to {} yet", s.kind.name()),
            "send them to `files(...)`, `memory`, `console` or `foreach_batch(...)`",
        );
    }
    if let (Some(TriggerDecl::Continuous { .. }), Some(t)) = (&q.trigger, &q.trigger_tokens) {
        errs.spanned_help(
            t,
            "continuous processing is not supported by weir yet; use processing_time",
            "run it in micro-batches instead, e.g. `trigger: processing_time(\"1 second\")`",
        );
    }
}

/// `scale_out:` divides a Kafka subscription's partitions among processes,
/// each partition a task with its own exactly-once sink. The plan's rule
/// (`weir_plan::check`, `scale_out_divides`) refuses what needs one task,
/// an end or one writer; here, what only the declaration shows: the
/// source's kind, and the sinks the plan knows only as "other".
pub fn scale_out_can_divide(q: &QueryDecl, errs: &mut Errors) {
    if q.scale_out.is_none() {
        return;
    }
    if let Some(s) = &q.source {
        match &s.kind {
            Source::Kafka(k) if k.subscribe.is_some() => {}
            Source::Kafka(_) => errs.spanned_help(
                &s.ident,
                "scale-out lets the consumer group assign the partitions of named topics: this Kafka source does not `subscribe`",
                "use `subscribe = \"topic\"` instead of `subscribe_pattern` or `assign`",
            ),
            _ => errs.spanned_help(
                &s.ident,
                format!(
                    "scale-out divides a Kafka source's partitions among processes; a `{}` source cannot be divided",
                    s.ident
                ),
                "read the input from Kafka, or remove `scale_out:` and run the query in one process",
            ),
        }
    }
    if let Some(s) = &q.sink {
        match &s.kind {
            Sink::Redis { key_prefix: None, .. } => errs.spanned_help(
                &s.ident,
                "under scale-out each task is a query of its own name, so the Redis key prefix cannot default to the query name",
                "give it one: `redis(url = ..., key_prefix = \"views\", ...)`",
            ),
            Sink::Foreach(_) => errs.spanned_help(
                &s.ident,
                "this sink cannot be divided among the tasks of a scale-out query: it has one writer",
                "write to Kafka, PostgreSQL or Redis (exactly once per task) or the console, or remove `scale_out:`",
            ),
            _ => {}
        }
        if let (Sink::Postgres { .. } | Sink::Redis { .. }, Some(m)) = (&s.kind, &q.output_mode) {
            if m.mode == OutputMode::Complete {
                errs.spanned_help(
                    &m.ident,
                    "complete output mode replaces the whole table each batch, but under scale-out each task has only its own keys",
                    "use `output_mode: update` (an upsert by key), or remove `scale_out:`",
                );
            }
        }
    }
    if let Some(s) = q
        .late_rows
        .as_ref()
        .filter(|s| !matches!(s.kind, Sink::Console { .. }))
    {
        errs.spanned_help(
            &s.ident,
            "late rows cannot go to this sink under scale-out: it cannot be divided among the tasks",
            "send them to `console`, or remove `scale_out:`",
        );
    }
}

/// `late_rows:` receives what stateful operators drop behind the
/// watermark: without a watermark, or without such an operator, it would
/// never receive a row.
pub fn late_rows_can_happen(q: &QueryDecl, l: &Lowered, errs: &mut Errors) {
    let Some(key) = &q.late_rows_key else { return };
    let ops = || l.plan.nodes.iter().flat_map(|n| &n.ops);
    if !ops().any(|o| matches!(o, Op::Watermark { .. })) {
        errs.spanned_help(
            key,
            "`late_rows:` needs a `watermark:`: rows are late only behind one",
            "declare the event-time column, e.g. `watermark: event_ts delay \"10 minutes\"`",
        );
        return;
    }
    let stream_join = l.join.as_ref().is_some_and(|j| !j.table);
    let stateful = ops().any(|o| o.is_stateful());
    if stream_join && stateful {
        errs.spanned_help(
            key,
            "`late_rows:` after a stream-stream join and an aggregation or drop_duplicates is not supported yet: the join and the operator after it drop rows of different columns, and one sink takes one schema",
            "remove `late_rows:`, or keep it on a query with one of them; late rows are still counted in the progress (numRowsDroppedByWatermark)",
        );
        return;
    }
    if !stream_join && !stateful {
        errs.spanned_help(
            key,
            "`late_rows:` needs a stateful operation (an aggregation, drop_duplicates or a stream-stream join): only those drop late rows",
            "remove `late_rows:`; without state, every row reaches the sink",
        );
    }
}

/// The generated structs are the schema's, `<Query>Row` and `<Query>`:
/// their names must differ.
pub fn distinct_struct_names(q: &QueryDecl, errs: &mut Errors) {
    let query = q.ident.to_string();
    let generated = [query.clone(), format!("{query}Row")];
    let mut schemas = vec![];
    schemas.extend(&q.schema);
    if let Some(j) = &q.join {
        schemas.extend(&j.side.schema);
    }
    for (i, schema) in schemas.iter().enumerate() {
        let s = schema.ident.to_string();
        if generated.contains(&s) {
            errs.spanned_help(
                &schema.ident,
                format!("the schema struct `{s}` has the name of a struct the query generates"),
                format!(
                    "the query generates `{query}` and `{query}Row`; give the input rows another name"
                ),
            );
        } else if i > 0 && schemas[0].ident == schema.ident {
            errs.spanned_help(
                &schema.ident,
                format!("both sides of the join declare a schema struct `{s}`"),
                "each side's schema generates its own row struct; give them different names",
            );
        }
    }
}

/// The result columns a sink names (the file sink's `partition_by`, the
/// Kafka, PostgreSQL and Redis sinks' `key`) must exist; PostgreSQL and
/// Redis need `key` in update mode.
pub fn sink_columns_exist(q: &QueryDecl, output: &[Col], errs: &mut Errors) {
    let Some(sink) = &q.sink else { return };
    let (partition_by, what) = match &sink.kind {
        Sink::Files { partition_by, .. } => (partition_by, "partition column"),
        Sink::Kafka { key, .. } => (key, "key column"),
        Sink::Postgres { key, .. } | Sink::Redis { key, .. } => {
            let update = q.output_mode.as_ref().map(|m| m.mode) == Some(OutputMode::Update);
            if update && key.is_empty() {
                let keys: Vec<String> = q
                    .group_by
                    .iter()
                    .flat_map(|g| &g.keys)
                    .map(|k| match k {
                        crate::ast::KeyDecl::Window { .. } => "window".to_string(),
                        crate::ast::KeyDecl::Session { .. } => "session_window".to_string(),
                        crate::ast::KeyDecl::Column(c) => c.to_string(),
                    })
                    .collect();
                errs.spanned_help(
                    &sink.ident,
                    format!("the {} sink in update mode needs `key = [...]`: update mode overwrites each row by its key", sink.kind.name()),
                    format!("add the grouping keys: `key = [{}]`", keys.join(", ")),
                );
            }
            (key, "key column")
        }
        _ => return,
    };
    let names: Vec<&str> = output.iter().map(|c| c.name.as_str()).collect();
    for p in partition_by {
        let name = p.to_string();
        if lookup(output, &name).is_none() {
            errs.spanned_help(
                p,
                format!("{what} `{name}` is not a column of the result"),
                crate::errors::suggestion_help(&name, &names, "result columns"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lower::{lower, output_columns};
    use crate::parse::parse_query;
    use quote::quote;

    /// `(at, message)` of every error the declaration produces.
    fn errors(t: TokenStream) -> Vec<(String, String)> {
        let mut errs = Errors::new();
        let q = parse_query(t, &mut errs).unwrap();
        if let Some(l) = lower(&q, &mut errs) {
            if !q.incomplete {
                check_plan(&l, &mut errs);
            }
            distinct_struct_names(&q, &mut errs);
            let out = output_columns(&l, &mut errs);
            sink_columns_exist(&q, &out, &mut errs);
            not_supported_yet(&q, &mut errs);
        }
        errs.diagnostics()
            .iter()
            .map(|d| (d.at.clone(), d.message.clone()))
            .collect()
    }

    #[test]
    fn unknown_column_in_filter_points_at_the_identifier() {
        let e = errors(quote! {
            query Q {
                source: memory,
                schema: Click { page: String, value: i64 },
                filter: value > 1 && vaule < 10,
                sink: console,
            }
        });
        assert_eq!(
            e,
            [(
                "vaule".to_string(),
                "unknown column `vaule`\nhelp: did you mean `value`? (available: page, value)"
                    .to_string()
            )]
        );
    }

    #[test]
    fn keyword_named_columns_are_checked_too() {
        let e = errors(
            quote! { query Q { source: memory, schema: S { a: i64 }, filter: date > 1, sink: console } },
        );
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].0, "date");
        assert!(e[0].1.starts_with("unknown column `date`"));
    }

    #[test]
    fn window_and_watermark_errors_point_at_their_parts() {
        let e = errors(quote! {
            query Q {
                source: memory,
                schema: S { ts: Timestamp, page: String, n: i64 },
                watermark: n delay "10 minits",
                group_by: [window(page, "0 minutes"), window(ts, "1 minute", "2 minutes")],
                aggregate: { s: sum(page), page: count() },
                output_mode: update,
                sink: console,
            }
        });
        let at: Vec<&str> = e.iter().map(|(a, _)| a.as_str()).collect();
        assert_eq!(
            at,
            [
                "\"10 minits\"",
                "n",
                "\"0 minutes\"",
                "page",
                "\"2 minutes\"",
                "window (ts , \"1 minute\" , \"2 minutes\")",
                "page"
            ]
        );
        assert!(e[0]
            .1
            .starts_with("invalid watermark delay \"10 minits\": unknown time unit `minits`"));
        assert!(e[1]
            .1
            .starts_with("watermark column `n` must be a timestamp, but it is int64"));
        assert!(e[2].1.starts_with(
            "invalid window size \"0 minutes\": the duration must be greater than zero"
        ));
        assert!(e[3]
            .1
            .starts_with("window column `page` must be a timestamp, but it is string"));
        assert!(e[4].1.starts_with("the window slide \"2 minutes\" must be less than or equal to the window size \"1 minute\""));
        assert!(e[5].1.starts_with("duplicate output column `window`"));
        assert!(e[6]
            .1
            .starts_with("sum(page) is not defined on string columns"));
    }

    #[test]
    fn session_window_errors_point_at_the_gap_the_key_and_the_mode() {
        let e = errors(quote! {
            query Q {
                source: memory,
                schema: Click { user: String, ts: Timestamp },
                watermark: ts delay "1 minute",
                group_by: [session_window(ts, "5 minits")],
                aggregate: { clicks: count() },
                output_mode: update,
                sink: console,
            }
        });
        let at: Vec<&str> = e.iter().map(|(a, _)| a.as_str()).collect();
        assert_eq!(
            at,
            [
                "\"5 minits\"",
                "update",
                "session_window (ts , \"5 minits\")"
            ],
            "{e:?}"
        );
        assert!(e[0]
            .1
            .starts_with("invalid session gap \"5 minits\": unknown time unit `minits`"));
        assert!(e[1].1.starts_with(
            "Update output mode is not supported for session windows on streaming DataFrames/Datasets"
        ));
        assert!(e[2].1.starts_with(
            "Global aggregation with session window in streaming query is not supported."
        ));

        let e = errors(quote! {
            query Q {
                source: memory,
                schema: Click { user: String, ts: Timestamp },
                watermark: ts delay "1 minute",
                group_by: [session_window(user, "5 minutes"), user],
                aggregate: { clicks: count() },
                sink: console,
            }
        });
        assert_eq!(e[0].0, "user");
        assert!(e[0]
            .1
            .starts_with("window column `user` must be a timestamp, but it is string"));

        let ok = errors(quote! {
            query Q {
                source: memory,
                schema: Click { user: String, ts: Timestamp },
                watermark: ts delay "1 minute",
                group_by: [session_window(ts, "5 minutes"), user],
                aggregate: { clicks: count() },
                sink: console,
            }
        });
        assert!(ok.is_empty(), "{ok:?}");
    }

    #[test]
    fn output_mode_rules_point_at_the_mode() {
        let e = errors(quote! {
            query Q {
                source: rate,
                group_by: [window(timestamp, "10 seconds")],
                aggregate: { n: count() },
                sink: console,
            }
        });
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].0, "aggregate");
        assert!(e[0].1.starts_with("Append output mode not supported when there are streaming aggregations on streaming DataFrames/DataSets without watermark\nhelp: add a watermark"));
        assert!(e[0]
            .1
            .ends_with("note: no `output_mode:` is given, so it is append (Spark's default)"));
        let e = errors(quote! { query Q { source: rate, output_mode: complete, sink: console } });
        assert_eq!(e[0].0, "complete");
        assert!(e[0].1.starts_with(
            "Complete output mode not supported when there are no streaming aggregations"
        ));
    }

    #[test]
    fn distinct_and_duplicates() {
        let e = errors(quote! {
            query Q {
                source: rate,
                select: { timestamp, value, value: value + 1 },
                group_by: [value],
                aggregate: { d: count_distinct(value) },
                output_mode: complete,
                sink: files(path = "out", partition_by = [day]),
            }
        });
        let at: Vec<&str> = e.iter().map(|(a, _)| a.as_str()).collect();
        assert_eq!(
            at,
            ["value", "count_distinct (value)", "files", "files", "day"]
        );
        assert!(e[0].1.starts_with("duplicate output column `value`"));
        assert!(e[1].1.starts_with("Distinct aggregations are not supported on streaming DataFrames/Datasets. Consider using approx_count_distinct() instead."));
        assert!(e[2]
            .1
            .starts_with("Data source file does not support Complete output mode"));
        assert!(e[3].1.starts_with("checkpointLocation must be specified"));
        assert!(e[4]
            .1
            .starts_with("partition column `day` is not a column of the result"));
    }

    #[test]
    fn notes_explain_the_op_order() {
        let e = errors(quote! {
            query Q {
                source: memory,
                schema: S { ts: Timestamp, n: i64 },
                filter: n2 > 1,
                select: { n2: n * 2 },
                watermark: ts delay "1 minute",
                sink: console,
            }
        });
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e[0].1.ends_with("note: `filter:` runs before `select:`, so it sees the source's columns, not the select's"));
        assert_eq!(e[1].0, "ts");
        assert!(e[1].1.ends_with("keep the column in the select"));
    }

    #[test]
    fn operation_rules_point_at_their_keys() {
        let e = errors(quote! {
            query Q {
                source: memory,
                schema: S { id: String, ts: Timestamp, n: i64 },
                with_column: { d: date + 1 },
                drop_duplicates_within_watermark: [id],
                group_by: [id],
                aggregate: { total: sum(n) },
                order_by: [n, total desc],
                limit: 5,
                output_mode: update,
                sink: console,
            }
        });
        let at: Vec<&str> = e.iter().map(|(a, _)| a.as_str()).collect();
        assert_eq!(
            at,
            [
                "date",
                "n",
                "order_by",
                "limit",
                "drop_duplicates_within_watermark"
            ],
            "{e:?}"
        );
        // `date` is a SQL keyword, quoted in the SQL; still a column.
        assert!(e[0].1.starts_with("unknown column `date`"));
        assert!(e[1].1.starts_with("unknown column `n`"));
        assert!(e[1].1.ends_with(
            "note: `order_by:` runs after `aggregate:`, so it sees the result's columns (group keys and aggregates)"
        ));
        assert!(e[2].1.starts_with("Sorting is not supported"));
        assert!(e[3].1.starts_with("Limits are not supported"));
        assert!(e[4]
            .1
            .starts_with("dropDuplicatesWithinWatermark is not supported"));
    }

    #[test]
    fn sink_and_trigger_rules_point_at_them() {
        let e = errors(quote! {
            query Q {
                source: rate,
                select: { timestamp, value, at: now() as Timestamp },
                trigger: continuous("1 second"),
                sink: foreach_batch(|_, _| Ok(())),
            }
        });
        let at: Vec<&str> = e.iter().map(|(a, _)| a.as_str()).collect();
        assert_eq!(
            at,
            [
                "now () as Timestamp",
                "continuous (\"1 second\")",
                "foreach_batch",
                "continuous (\"1 second\")"
            ],
            "{e:?}"
        );
        assert!(e[0]
            .1
            .starts_with("Continuous processing does not support current time operations."));
        assert!(e[1]
            .1
            .starts_with("'foreachBatch' is not supported with continuous trigger"));
        assert!(e[2].1.starts_with("checkpointLocation must be specified"));
        assert!(e[3].1.starts_with(
            "continuous processing is not supported by weir yet; use processing_time"
        ));
        let e = errors(quote! {
            query Q {
                source: rate,
                sink: kafka(bootstrap_servers = "b:9092", topic = "t"),
                checkpoint: "chk",
            }
        });
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(e[0].0, "kafka");
        assert!(e[0]
            .1
            .starts_with("value attribute unsupported type bigint"));
    }

    #[test]
    fn struct_names_must_differ() {
        let e =
            errors(quote! { query Q { source: memory, schema: QRow { a: i64 }, sink: console } });
        assert_eq!(e[0].0, "QRow");
        assert!(e[0]
            .1
            .starts_with("the schema struct `QRow` has the name of a struct the query generates"));
    }
}
