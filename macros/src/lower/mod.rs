//! Lowering a declaration to a [`StreamPlan`], keeping a side table from
//! plan positions (op index and part) back to the user's tokens, so that
//! every violation the plan check finds can point at what caused it.
//!
//! The ops run in a fixed order, whatever order the keys are written in:
//! `filter` → `select` → `with_column` → `watermark` → `drop_duplicates` →
//! `drop_duplicates_within_watermark` → `group_by` + `aggregate` →
//! `order_by` → `limit`.

use quote::ToTokens;
use syn::ext::IdentExt;
use weir_plan::{
    AggSpec, Field, GroupKey, Op, OutputMode, SinkDecl, SortKey, StreamPlan, WindowSpec,
};

use crate::ast::{KeyDecl, QueryDecl, Source, TriggerDecl};
use crate::errors::Errors;
use crate::types::Col;

mod input;
mod items;
mod join;
mod output;
mod running;
mod spans;

pub use input::snake_case;
use input::{lower_input, Input};
use items::lower_item;
use join::lower_join;
pub use output::output_columns;
use running::running_plan;
pub use running::Running;
pub use spans::*;

/// A declaration lowered to a plan.
pub struct Lowered {
    /// The plan: the source, the node `result` (last), and for a
    /// stream-stream join the joined stream's source and node (first).
    pub plan: StreamPlan,
    /// The query name (`name:`, or the snake_case query ident).
    pub query_name: String,
    /// The other side of the join, if any.
    pub join: Option<JoinSide>,
    /// The source's columns.
    pub input: Vec<Col>,
    /// The columns the aggregate sees (after filter, select and with_column).
    pub pre_agg: Vec<Col>,
    /// Columns computed from an expression (select items that are not a
    /// bare column, and with_column entries).
    pub derived: Vec<String>,
    /// Where each plan position came from.
    pub spans: SpanTable,
    /// The plan the engine runs: `plan`, laid out and named as the engine
    /// runs it (`Query::plan()`, the plan `writer_from` builds from).
    pub running: Running,
}

impl Lowered {
    /// The index of the result node in `plan.nodes` (the last one).
    pub fn result_node(&self) -> usize {
        self.plan.nodes.len() - 1
    }

    /// The result node's ops.
    pub fn result_ops(&self) -> &[Op] {
        &self.plan.nodes[self.result_node()].ops
    }
}

/// The other side of a join, lowered.
pub struct JoinSide {
    /// Its plan node id (a stream) or static table name (a table).
    pub name: String,
    /// Its source's columns.
    pub input: Vec<Col>,
    /// The tokens of its ops (plan node 0), for a stream.
    pub spans: Vec<OpSpans>,
    /// True for a static table.
    pub table: bool,
}

/// Lowers `q` to a plan. Returns `None` when there is no source or no
/// usable schema (the error is already reported).
pub fn lower(q: &QueryDecl, errs: &mut Errors) -> Option<Lowered> {
    let Input {
        source_name,
        input,
        mut ops,
        mut spans,
        cols: mut pre_agg,
        visible,
        mut derived,
    } = lower_input(q, errs)?;
    let mut plan_sources = vec![];
    let mut plan_statics = vec![];
    let mut right_node = None;
    let mut join_side = None;
    if let Some(j) = &q.join {
        let side = lower_join(j, &source_name, &pre_agg, &visible, errs)?;
        pre_agg = side.after.clone();
        derived.extend(side.derived.iter().cloned());
        ops.push(side.op.clone());
        spans.push(side.op_spans);
        if j.table {
            plan_statics.push((side.name.clone(), side.fields.clone()));
        } else {
            plan_sources.push((side.source_name.clone(), side.fields.clone()));
            right_node = Some(weir_plan::Node {
                id: side.name.clone(),
                input: side.source_name.clone(),
                ops: side.ops,
            });
        }
        join_side = Some(JoinSide {
            name: side.name,
            input: side.input,
            spans: side.spans,
            table: j.table,
        });
    }

    for (decl, within_watermark) in [
        (&q.drop_duplicates, false),
        (&q.drop_duplicates_within_watermark, true),
    ] {
        if let Some(d) = decl {
            ops.push(Op::Dedup {
                columns: d.columns.iter().map(|c| c.unraw().to_string()).collect(),
                within_watermark,
            });
            spans.push(OpSpans::Dedup {
                key: d.key.to_token_stream(),
                columns: d.columns.iter().map(|c| c.to_token_stream()).collect(),
            });
        }
    }

    let mut mode_fallback = None;
    match (&q.group_by, &q.aggregate) {
        (Some(g), None) => errs.spanned_help(
            &g.key,
            "`group_by:` needs an `aggregate:`",
            "add the aggregates to compute per group, e.g. `aggregate: { n: count() }`",
        ),
        (g, Some(a)) => {
            let key_decls = g.as_ref().map(|g| g.keys.as_slice()).unwrap_or_default();
            let mut keys = vec![];
            let mut key_spans = vec![];
            for k in key_decls {
                match k {
                    KeyDecl::Window {
                        tokens,
                        column,
                        size,
                        slide,
                    } => {
                        keys.push(GroupKey::Window {
                            window: WindowSpec {
                                column: Some(column.unraw().to_string()),
                                expr: None,
                                size: size.value().into(),
                                slide: slide.as_ref().map(|s| s.value().into()),
                                gap: None,
                            },
                            alias: "window".into(),
                        });
                        key_spans.push(KeySpans {
                            column: column.to_token_stream(),
                            size: Some(size.to_token_stream()),
                            slide: slide.as_ref().map(|s| s.to_token_stream()),
                            whole: tokens.clone(),
                        });
                    }
                    KeyDecl::Session {
                        tokens,
                        column,
                        gap,
                    } => {
                        keys.push(GroupKey::Window {
                            window: WindowSpec {
                                column: Some(column.unraw().to_string()),
                                expr: None,
                                size: Default::default(),
                                slide: None,
                                gap: Some(gap.value().into()),
                            },
                            alias: "session_window".into(),
                        });
                        key_spans.push(KeySpans {
                            column: column.to_token_stream(),
                            size: Some(gap.to_token_stream()),
                            slide: None,
                            whole: tokens.clone(),
                        });
                    }
                    KeyDecl::Column(c) => {
                        keys.push(GroupKey::Column {
                            column: c.unraw().to_string(),
                        });
                        key_spans.push(KeySpans {
                            column: c.to_token_stream(),
                            size: None,
                            slide: None,
                            whole: c.to_token_stream(),
                        });
                    }
                }
            }
            let mut aggs = vec![];
            let mut agg_spans = vec![];
            for d in &a.aggs {
                aggs.push(AggSpec {
                    func: d.kind,
                    column: d
                        .arg
                        .as_ref()
                        .map(|c| c.unraw().to_string())
                        .unwrap_or_else(|| "*".into()),
                    alias: d.alias.unraw().to_string(),
                });
                agg_spans.push(AggSpans {
                    alias: d.alias.to_token_stream(),
                    call: d.call.clone(),
                    arg: d.arg.as_ref().map(|c| c.to_token_stream()),
                });
            }
            ops.push(Op::Aggregate { keys, aggs });
            spans.push(OpSpans::Aggregate {
                key: a.key.to_token_stream(),
                keys: key_spans,
                aggs: agg_spans,
            });
            mode_fallback = Some(a.key.to_token_stream());
        }
        (None, None) => {}
    }

    if let Some(o) = &q.order_by {
        ops.push(Op::Sort {
            by: o
                .keys
                .iter()
                .map(|(c, desc)| SortKey {
                    column: c.unraw().to_string(),
                    desc: *desc,
                })
                .collect(),
        });
        spans.push(OpSpans::Sort {
            key: o.key.to_token_stream(),
            columns: o.keys.iter().map(|(c, _)| c.to_token_stream()).collect(),
        });
    }
    if let Some(l) = &q.limit {
        ops.push(Op::Limit { n: l.n });
        spans.push(OpSpans::Limit {
            key: l.key.to_token_stream(),
        });
    }

    let mode = q
        .output_mode
        .as_ref()
        .map(|m| m.mode)
        .unwrap_or(OutputMode::Append);
    let fields: Vec<Field> = input
        .iter()
        .map(|c| Field::new(c.name.clone(), c.ty.dtype))
        .collect();
    let mut plan = StreamPlan::single(source_name, fields, ops, mode);
    for (name, schema) in plan_sources {
        plan.sources.insert(name, weir_plan::SourceDecl { schema });
    }
    for (name, schema) in plan_statics {
        plan.statics.insert(
            name,
            weir_plan::StaticDecl {
                schema,
                rows: vec![],
            },
        );
    }
    if let Some(node) = right_node {
        plan.nodes.insert(0, node);
    }
    plan.sink = q.sink.as_ref().map(|s| SinkDecl {
        kind: s.kind.kind(),
        checkpoint: q.checkpoint.is_some(),
    });
    plan.trigger = Some(match &q.trigger {
        None => weir_plan::TriggerDecl::Default,
        Some(TriggerDecl::ProcessingTime { ms, .. }) => weir_plan::TriggerDecl::ProcessingTime(*ms),
        Some(TriggerDecl::AvailableNow) => weir_plan::TriggerDecl::AvailableNow,
        Some(TriggerDecl::Once) => weir_plan::TriggerDecl::Once,
        Some(TriggerDecl::Continuous { ms, .. }) => weir_plan::TriggerDecl::Continuous(*ms),
    });
    plan.scale_out = q.scale_out.as_ref().map(|g| g.value());
    let decoded = |q: &QueryDecl| {
        matches!(
            q.source.as_ref().map(|s| &s.kind),
            Some(Source::Kafka(k)) if k.format.is_some()
        )
    };
    let decoded = (
        decoded(q),
        q.join.as_ref().is_some_and(|j| decoded(&j.side)),
    );
    let running = running_plan(&plan, join_side.as_ref(), decoded);
    let query_name = q
        .name
        .as_ref()
        .map(|n| n.value())
        .unwrap_or_else(|| snake_case(&q.ident.to_string()));
    Some(Lowered {
        plan,
        query_name,
        join: join_side,
        input,
        pre_agg,
        derived,
        spans: SpanTable {
            query: q.ident.to_token_stream(),
            output_mode: q.output_mode.as_ref().map(|m| m.ident.to_token_stream()),
            mode_fallback,
            sink: q.sink.as_ref().map(|s| s.ident.to_token_stream()),
            trigger: q.trigger_tokens.clone(),
            ops: spans,
        },
        running,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::parse_query;
    use crate::types::{lookup, rust_type_name, ColType};
    use proc_macro2::TokenStream;
    use quote::quote;
    use weir_plan::{AggFn, DataType, JoinType, SelectItem};

    pub(crate) fn lower_ok(t: TokenStream) -> Lowered {
        let mut errs = Errors::new();
        let q = parse_query(t, &mut errs).unwrap();
        let l = lower(&q, &mut errs).unwrap();
        assert!(errs.is_empty(), "{errs:?}");
        l
    }

    #[test]
    fn snake_cases_idents() {
        assert_eq!(snake_case("PageViews"), "page_views");
        assert_eq!(snake_case("HTTPLog"), "http_log");
        assert_eq!(snake_case("Click"), "click");
        assert_eq!(snake_case("Lab2Counts"), "lab2_counts");
    }

    #[test]
    fn lowers_the_page_views_example() {
        let l = lower_ok(quote! {
            query PageViews {
                source: files(path = "data/clicks", format = json),
                schema: Click { page: String, event_ts: Timestamp, user: Option<String>, n: i64 },
                filter: n > 0 && page != "x",
                select: { page, event_ts, n2: n * 2, user },
                watermark: event_ts delay "2 minutes",
                group_by: [window(event_ts, "1 minute"), page],
                aggregate: { views: count(), total: sum(n2), users: count(user), lo: min(n2), mean: avg(n2) },
                output_mode: update,
                sink: console,
            }
        });
        let expected = StreamPlan::single(
            "click",
            vec![
                Field::new("page", DataType::String),
                Field::new("event_ts", DataType::Timestamp),
                Field::new("user", DataType::String),
                Field::new("n", DataType::Int64),
            ],
            vec![
                Op::Filter {
                    predicate: "n > 0 AND page <> 'x'".into(),
                },
                Op::Select {
                    columns: vec![
                        SelectItem {
                            expr: "page".into(),
                            alias: "page".into(),
                        },
                        SelectItem {
                            expr: "event_ts".into(),
                            alias: "event_ts".into(),
                        },
                        SelectItem {
                            expr: "n * 2".into(),
                            alias: "n2".into(),
                        },
                        SelectItem {
                            expr: "\"user\"".into(),
                            alias: "user".into(),
                        },
                    ],
                },
                Op::Watermark {
                    column: "event_ts".into(),
                    delay: "2 minutes".into(),
                },
                Op::Aggregate {
                    keys: vec![
                        GroupKey::Window {
                            window: WindowSpec {
                                column: Some("event_ts".into()),
                                expr: None,
                                size: "1 minute".into(),
                                slide: None,
                                gap: None,
                            },
                            alias: "window".into(),
                        },
                        GroupKey::Column {
                            column: "page".into(),
                        },
                    ],
                    aggs: vec![
                        AggSpec {
                            func: AggFn::Count,
                            column: "*".into(),
                            alias: "views".into(),
                        },
                        AggSpec {
                            func: AggFn::Sum,
                            column: "n2".into(),
                            alias: "total".into(),
                        },
                        AggSpec {
                            func: AggFn::Count,
                            column: "user".into(),
                            alias: "users".into(),
                        },
                        AggSpec {
                            func: AggFn::Min,
                            column: "n2".into(),
                            alias: "lo".into(),
                        },
                        AggSpec {
                            func: AggFn::Avg,
                            column: "n2".into(),
                            alias: "mean".into(),
                        },
                    ],
                },
            ],
            OutputMode::Update,
        );
        let mut expected = expected;
        expected.sink = Some(SinkDecl {
            kind: weir_plan::SinkKind::Console,
            checkpoint: false,
        });
        expected.trigger = Some(weir_plan::TriggerDecl::Default);
        assert_eq!(l.plan, expected);
        assert_eq!(l.query_name, "page_views");
        assert!(weir_plan::check(&l.plan).is_empty());
        let mut errs = Errors::new();
        let out = output_columns(&l, &mut errs);
        assert!(errs.is_empty());
        let shown: Vec<String> = out
            .iter()
            .map(|c| format!("{}: {}", c.name, rust_type_name(c.ty)))
            .collect();
        assert_eq!(
            shown,
            [
                "window: Window",
                "page: String",
                "views: i64",
                "total: Option<i64>",
                "users: i64",
                "lo: Option<i64>",
                "mean: Option<f64>"
            ]
        );
    }

    #[test]
    fn lowers_a_session_window() {
        let l = lower_ok(quote! {
            query UserSessions {
                source: memory,
                schema: Click { user: String, ts: Timestamp },
                watermark: ts delay "10 minutes",
                group_by: [session_window(ts, "5 minutes"), user],
                aggregate: { clicks: count() },
                sink: memory,
            }
        });
        let Op::Aggregate { keys, .. } = &l.plan.nodes[0].ops[1] else {
            panic!("{:?}", l.plan.nodes[0].ops);
        };
        assert_eq!(
            keys[0],
            GroupKey::Window {
                window: WindowSpec {
                    column: Some("ts".into()),
                    expr: None,
                    size: Default::default(),
                    slide: None,
                    gap: Some("5 minutes".into()),
                },
                alias: "session_window".into(),
            }
        );
        let OpSpans::Aggregate { keys: spans, .. } = &l.spans.ops[1] else {
            panic!("the aggregate's spans");
        };
        assert_eq!(spans[0].size.as_ref().unwrap().to_string(), "\"5 minutes\"");
        assert_eq!(
            spans[0].whole.to_string(),
            "session_window (ts , \"5 minutes\")"
        );
        assert!(weir_plan::check(&l.plan).is_empty());
        let mut errs = Errors::new();
        let out = output_columns(&l, &mut errs);
        assert!(errs.is_empty(), "{errs:?}");
        let shown: Vec<String> = out
            .iter()
            .map(|c| format!("{}: {}", c.name, rust_type_name(c.ty)))
            .collect();
        assert_eq!(
            shown,
            ["session_window: Window", "user: String", "clicks: i64"]
        );
    }

    #[test]
    fn rate_source_has_a_fixed_schema() {
        let l = lower_ok(quote! {
            query Lab { source: rate(rows_per_second = 5), select: { timestamp, odd: value % 2 == 1 }, sink: console }
        });
        assert_eq!(l.plan.sources.keys().collect::<Vec<_>>(), ["rate"]);
        let mut errs = Errors::new();
        let out = output_columns(&l, &mut errs);
        assert_eq!(
            out[0],
            Col::new("timestamp", ColType::new(DataType::Timestamp))
        );
        assert_eq!(out[1], Col::new("odd", ColType::new(DataType::Bool)));

        let mut errs = Errors::new();
        let q = parse_query(
            quote! { query Lab { source: rate, schema: S { a: i64 }, sink: console } },
            &mut errs,
        )
        .unwrap();
        lower(&q, &mut errs).unwrap();
        assert_eq!(errs.diagnostics()[0].at, "schema");
        assert!(errs.diagnostics()[0]
            .message
            .starts_with("the rate source has a fixed schema (timestamp: Timestamp, value: i64)"));
    }

    #[test]
    fn select_types_must_be_inferable() {
        let mut errs = Errors::new();
        let q = parse_query(
            quote! { query Q { source: rate, select: { h: date_trunc("hour", timestamp), h2: hour(timestamp) }, sink: console } },
            &mut errs,
        )
        .unwrap();
        let l = lower(&q, &mut errs).unwrap();
        assert_eq!(errs.len(), 1);
        let d = &errs.diagnostics()[0];
        assert_eq!(d.at, r#"date_trunc ("hour" , timestamp)"#);
        assert_eq!(
            d.message,
            r#"cannot infer the type of `h`: the macro does not know what `date_trunc("hour" , timestamp)` returns
help: state the type with `as`: `h: date_trunc("hour" , timestamp) as i32` (or i64, f64, String, bool, Timestamp)"#
        );
        assert_eq!(
            l.plan.nodes[0].ops[0],
            Op::Select {
                columns: vec![
                    SelectItem {
                        expr: "date_trunc('hour', \"timestamp\")".into(),
                        alias: "h".into()
                    },
                    SelectItem {
                        expr: "hour(\"timestamp\")".into(),
                        alias: "h2".into()
                    },
                ]
            }
        );
    }

    #[test]
    fn a_mistyped_aggregate_over_a_cast_is_reported_once() {
        let mut errs = Errors::new();
        let q = parse_query(
            quote! { query Q { source: rate, select: { timestamp, s: value as String },
            group_by: [timestamp], aggregate: { t: sum(s) }, output_mode: update, sink: console } },
            &mut errs,
        )
        .unwrap();
        let l = lower(&q, &mut errs).unwrap();
        crate::check::check_plan(&l, &mut errs);
        output_columns(&l, &mut errs);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs.diagnostics()[0]
            .message
            .starts_with("sum(s) is not defined on string columns"));
    }

    #[test]
    fn aggregates_over_computed_columns_are_typed() {
        let mut errs = Errors::new();
        let q = parse_query(
            quote! { query Q { source: rate, select: { timestamp, s: lower("A"), v: value as f64 },
                               group_by: [s], aggregate: { t: sum(s), m: max(v) }, output_mode: complete, sink: console } },
            &mut errs,
        )
        .unwrap();
        let l = lower(&q, &mut errs).unwrap();
        let out = output_columns(&l, &mut errs);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs.diagnostics()[0].at, "s");
        assert!(errs.diagnostics()[0]
            .message
            .starts_with("sum(s) is not defined on string columns"));
        assert_eq!(
            out.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            ["s", "m"]
        );
        assert_eq!(
            lookup(&out, "m").unwrap().ty,
            ColType::nullable(DataType::Float64)
        );
    }

    fn shown(out: &[Col]) -> Vec<String> {
        out.iter()
            .map(|c| format!("{}: {}", c.name, rust_type_name(c.ty)))
            .collect()
    }

    #[test]
    fn lowers_a_stream_stream_join_to_sparks_plan() {
        let l = lower_ok(quote! {
            query AdClicks {
                source: memory,
                schema: Impression { imp_ad_id: i32, imp_ts: Timestamp },
                watermark: imp_ts delay "10 minutes",
                join: {
                    how: left_outer,
                    stream: {
                        source: memory,
                        schema: Click { ad_id: i32, ts: Timestamp },
                        select: { click_ad_id: ad_id, click_ts: ts },
                        watermark: click_ts delay "20 minutes",
                    },
                    on: click_ad_id == imp_ad_id && click_ts >= imp_ts && click_ts <= imp_ts + interval("15 minutes"),
                },
                sink: memory,
            }
        });
        assert_eq!(l.plan.nodes.len(), 2);
        assert_eq!(l.result_node(), 1);
        assert_eq!(l.plan.nodes[0].id, "the joined stream");
        assert_eq!(l.plan.nodes[0].input, "click");
        assert_eq!(l.plan.nodes[1].input, "impression");
        assert_eq!(
            l.plan.nodes[1].ops[1],
            Op::Join {
                right: "the joined stream".into(),
                how: JoinType::LeftOuter,
                on: Some("click_ad_id = imp_ad_id AND click_ts >= imp_ts AND click_ts <= imp_ts + INTERVAL '15 minutes'".into()),
                using: None,
            }
        );
        assert_eq!(
            l.plan.nodes[0].ops[1],
            Op::Watermark {
                column: "click_ts".into(),
                delay: "20 minutes".into()
            }
        );
        assert!(
            weir_plan::check(&l.plan).is_empty(),
            "{:?}",
            weir_plan::check(&l.plan)
        );
        let mut errs = Errors::new();
        let out = output_columns(&l, &mut errs);
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(
            shown(&out),
            [
                "imp_ad_id: i32",
                "imp_ts: Timestamp",
                "click_ad_id: Option<i32>",
                "click_ts: Option<Timestamp>"
            ]
        );
    }

    #[test]
    fn lowers_a_stream_static_join_using_keys() {
        let l = lower_ok(quote! {
            query Enriched {
                source: memory,
                schema: Event { ts: Timestamp, key: String, value: i64 },
                // Spark's USING output: the key first.
                join: {
                    how: left_outer,
                    table: { source: files(path = "dims", format = csv), schema: Dim { key: String, name: String, tier: i32 }, refresh_every: "10 minutes" },
                    using: [key],
                },
                sink: memory,
            }
        });
        assert_eq!(l.plan.nodes.len(), 1);
        assert_eq!(l.plan.statics.keys().collect::<Vec<_>>(), ["dim"]);
        assert_eq!(
            l.plan.nodes[0].ops[0],
            Op::Join {
                right: "dim".into(),
                how: JoinType::LeftOuter,
                on: None,
                using: Some(vec!["key".into()]),
            }
        );
        assert!(weir_plan::check(&l.plan).is_empty());
        let mut errs = Errors::new();
        let out = output_columns(&l, &mut errs);
        assert_eq!(
            shown(&out),
            [
                "key: String",
                "ts: Timestamp",
                "value: i64",
                "name: Option<String>",
                "tier: Option<i32>"
            ]
        );
    }

    #[test]
    fn a_left_semi_join_keeps_the_left_columns() {
        let l = lower_ok(quote! {
            query Seen {
                source: memory,
                schema: Event { ts: Timestamp, key: String },
                join: { how: left_semi, table: { source: memory, schema: Known { known: String } }, on: key == known },
                sink: memory,
            }
        });
        let mut errs = Errors::new();
        let out = output_columns(&l, &mut errs);
        assert_eq!(shown(&out), ["ts: Timestamp", "key: String"]);
    }
}
