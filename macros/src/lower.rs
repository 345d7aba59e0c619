//! Lowering a declaration to a [`StreamPlan`], keeping a side table from
//! plan positions (op index and part) back to the user's tokens, so that
//! every violation the plan check finds can point at what caused it.
//!
//! The ops run in a fixed order, whatever order the keys are written in:
//! `filter` → `select` → `with_column` → `watermark` → `drop_duplicates` →
//! `drop_duplicates_within_watermark` → `group_by` + `aggregate` →
//! `order_by` → `limit`.

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::ext::IdentExt;
use weir_plan::aggregates::ResultRule;
use weir_plan::{
    AggSpec, DataType, Field, GroupKey, JoinType, Op, OutputMode, SelectItem, SinkDecl, SortKey,
    StreamPlan, WindowSpec,
};

use crate::ast::{JoinDecl, KeyDecl, QueryDecl, SelectItemDecl, Source, TriggerDecl};
use crate::errors::Errors;
use crate::expr::{translate, ColumnRef, Inferred};
use crate::types::{lookup, rust_type_name, Col, ColType};
use weir_plan::expr::Expr as PlanExpr;

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

/// From plan positions to the user's tokens.
pub struct SpanTable {
    /// The query ident (errors about the whole query).
    pub query: TokenStream,
    /// The `output_mode:` value, when given.
    pub output_mode: Option<TokenStream>,
    /// Where an output-mode error points when the mode is the default:
    /// the `aggregate:` (or `group_by:`) key.
    pub mode_fallback: Option<TokenStream>,
    /// The sink's kind as written (sink and checkpoint errors point here).
    pub sink: Option<TokenStream>,
    /// The `trigger:` value, when given.
    pub trigger: Option<TokenStream>,
    /// One entry per op of the result node, in op order.
    pub ops: Vec<OpSpans>,
}

/// The tokens of one op.
pub enum OpSpans {
    /// `filter:`.
    Filter {
        /// The expression.
        expr: TokenStream,
        /// Its column references.
        columns: Vec<ColumnRef>,
    },
    /// `select:`.
    Select {
        /// The `select` key.
        key: TokenStream,
        /// One per item.
        items: Vec<ItemSpans>,
    },
    /// One entry of `with_column:`.
    WithColumn {
        /// The expression.
        expr: TokenStream,
        /// Its column references.
        columns: Vec<ColumnRef>,
        /// The names of the columns it can see.
        visible: Vec<String>,
    },
    /// `watermark:`.
    Watermark {
        /// The `watermark` key.
        key: TokenStream,
        /// The column.
        column: TokenStream,
        /// The delay literal.
        delay: TokenStream,
    },
    /// `drop_duplicates:` or `drop_duplicates_within_watermark:`.
    Dedup {
        /// The key as written.
        key: TokenStream,
        /// One per column.
        columns: Vec<TokenStream>,
    },
    /// `order_by:`.
    Sort {
        /// The `order_by` key.
        key: TokenStream,
        /// One per sort key (its column).
        columns: Vec<TokenStream>,
    },
    /// `limit:`.
    Limit {
        /// The `limit` key.
        key: TokenStream,
    },
    /// `join:`.
    Join {
        /// The `join` key.
        key: TokenStream,
        /// The `how:` value (the `join` key when not given).
        how: TokenStream,
        /// The `on:` expression.
        on: Option<TokenStream>,
        /// Its column references.
        columns: Vec<ColumnRef>,
        /// The `using:` columns.
        using: Vec<TokenStream>,
        /// The names the condition can see (both sides').
        visible: Vec<String>,
    },
    /// `group_by:` + `aggregate:`.
    Aggregate {
        /// The `aggregate` (or `group_by`) key.
        key: TokenStream,
        /// One per grouping key.
        keys: Vec<KeySpans>,
        /// One per aggregate.
        aggs: Vec<AggSpans>,
    },
}

/// The tokens of one select item.
pub struct ItemSpans {
    /// The output name.
    pub alias: TokenStream,
    /// The expression (the alias for a bare column).
    pub expr: TokenStream,
    /// Its column references.
    pub columns: Vec<ColumnRef>,
}

/// The tokens of one grouping key.
pub struct KeySpans {
    /// The column (a window's time column).
    pub column: TokenStream,
    /// A window's size literal; a session window's gap (the plan reports
    /// a bad gap at the key's size, `Part::KeySize`).
    pub size: Option<TokenStream>,
    /// A window's slide literal.
    pub slide: Option<TokenStream>,
    /// The whole key.
    pub whole: TokenStream,
}

/// The tokens of one aggregate.
pub struct AggSpans {
    /// The output name.
    pub alias: TokenStream,
    /// The call (`sum(n)`).
    pub call: TokenStream,
    /// The column argument.
    pub arg: Option<TokenStream>,
}

/// `PageViews` → `page_views`, `HTTPLog` → `http_log`.
pub fn snake_case(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_uppercase() {
            let prev = i.checked_sub(1).map(|j| chars[j]);
            let next = chars.get(i + 1);
            let boundary = match prev {
                Some(p) if p.is_lowercase() || p.is_ascii_digit() => true,
                Some(p) if p.is_uppercase() => next.is_some_and(|n| n.is_lowercase()),
                _ => false,
            };
            if boundary && !out.ends_with('_') {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The rate source's fixed schema.
pub fn rate_schema() -> Vec<Col> {
    vec![
        Col::new("timestamp", ColType::new(DataType::Timestamp)),
        Col::new("value", ColType::new(DataType::Int64)),
    ]
}

/// Spark's Kafka source schema (without `format`).
pub fn kafka_schema() -> Vec<Col> {
    vec![
        Col::new("key", ColType::nullable(DataType::Binary)),
        Col::new("value", ColType::nullable(DataType::Binary)),
        Col::new("topic", ColType::new(DataType::String)),
        Col::new("partition", ColType::new(DataType::Int32)),
        Col::new("offset", ColType::new(DataType::Int64)),
        Col::new("timestamp", ColType::new(DataType::Timestamp)),
        Col::new("timestampType", ColType::new(DataType::Int32)),
    ]
}

/// The socket source's fixed schema.
pub fn socket_schema() -> Vec<Col> {
    vec![Col::new("value", ColType::new(DataType::String))]
}

/// One input lowered: the source's columns and the row ops on them
/// (`filter` → `select` → `with_column` → `watermark`).
struct Input {
    /// The source's name in the plan.
    source_name: String,
    /// The source's columns.
    input: Vec<Col>,
    /// The ops.
    ops: Vec<Op>,
    /// Their tokens.
    spans: Vec<OpSpans>,
    /// The typed columns after the ops.
    cols: Vec<Col>,
    /// Every column name after the ops (typed or not).
    visible: Vec<String>,
    /// Columns computed from an expression.
    derived: Vec<String>,
}

/// Lowers a declaration's source, schema and row ops. Returns `None` when
/// there is no source or no usable schema (the error is already reported).
fn lower_input(q: &QueryDecl, errs: &mut Errors) -> Option<Input> {
    let source = q.source.as_ref()?;
    let fixed = match source.kind {
        Source::Rate { .. } | Source::RateMicroBatch { .. } => Some((
            source.kind.name(),
            rate_schema(),
            "timestamp: Timestamp, value: i64",
        )),
        Source::Socket { .. } => Some(("socket", socket_schema(), "value: String")),
        Source::Kafka(ref k) if k.format.is_none() => Some((
            "kafka",
            kafka_schema(),
            "key: Option<Vec<u8>>, value: Option<Vec<u8>>, topic: String, partition: i32, offset: i64, timestamp: Timestamp, timestampType: i32",
        )),
        _ => None,
    };
    let (source_name, input) = match (fixed, &q.schema) {
        (Some((name, cols, text)), schema) => {
            if schema.is_some() {
                let help = if name == "kafka" {
                    "add `format = json` (or `csv`) to the source to decode each record's value into `schema:`".to_string()
                } else {
                    format!("remove `schema:` and use the {name} source's columns ({text})")
                };
                errs.spanned_help(
                    q.schema_key.as_ref().unwrap_or(&source.ident),
                    format!("the {name} source has a fixed schema ({text}); `schema:` is not allowed with it"),
                    help,
                );
            }
            (name.to_string(), cols)
        }
        (None, Some(s)) => (
            snake_case(&s.ident.to_string()),
            s.fields
                .iter()
                .map(|f| Col::new(f.name.clone(), f.ty))
                .collect(),
        ),
        (None, None) => {
            errs.spanned_help(
                &source.ident,
                format!("the {} source needs a `schema:`", source.kind.name()),
                "declare the row type, e.g. `schema: Click { page: String, event_ts: Timestamp }`",
            );
            return None;
        }
    };

    let mut ops = vec![];
    let mut spans = vec![];
    if let Some(f) = &q.filter {
        let t = translate(f, &input, errs);
        if let Inferred::Known(ty) = t.ty {
            if ty.dtype != DataType::Bool {
                errs.spanned_help(
                    f,
                    format!(
                        "a filter must be a boolean expression, but this is {}",
                        ty.dtype
                    ),
                    "compare it, e.g. `n > 0`",
                );
            }
        }
        ops.push(Op::Filter { predicate: t.expr });
        spans.push(OpSpans::Filter {
            expr: f.to_token_stream(),
            columns: t.columns,
        });
    }

    let mut pre_agg = input.clone();
    let mut derived = vec![];
    // The names the next op sees (typed or not, unlike `pre_agg`).
    let mut visible: Vec<String> = input.iter().map(|c| c.name.clone()).collect();
    if let Some(sel) = &q.select {
        let mut columns = vec![];
        let mut items = vec![];
        let mut env = vec![];
        for item in &sel.items {
            let t = lower_item(item, &input, &mut derived, errs);
            if let Some(ty) = t.ty {
                env.push(Col::new(t.alias.clone(), ty));
            }
            columns.push(SelectItem {
                expr: t.expr,
                alias: t.alias,
            });
            items.push(ItemSpans {
                alias: item.alias.to_token_stream(),
                expr: t.tokens,
                columns: t.columns,
            });
        }
        visible = columns.iter().map(|c| c.alias.clone()).collect();
        pre_agg = env;
        ops.push(Op::Select { columns });
        spans.push(OpSpans::Select {
            key: sel.key.to_token_stream(),
            items,
        });
    }

    if let Some(wc) = &q.with_column {
        for item in &wc.items {
            let t = lower_item(item, &pre_agg, &mut derived, errs);
            pre_agg.retain(|c| c.name != t.alias);
            if let Some(ty) = t.ty {
                pre_agg.push(Col::new(t.alias.clone(), ty));
            }
            spans.push(OpSpans::WithColumn {
                expr: t.tokens,
                columns: t.columns,
                visible: visible.clone(),
            });
            if !visible.contains(&t.alias) {
                visible.push(t.alias.clone());
            }
            ops.push(Op::WithColumn {
                name: t.alias,
                expr: t.expr,
            });
        }
    }

    if let Some(w) = &q.watermark {
        ops.push(Op::Watermark {
            column: w.column.unraw().to_string(),
            delay: w.delay.value().into(),
        });
        spans.push(OpSpans::Watermark {
            key: w.key.to_token_stream(),
            column: w.column.to_token_stream(),
            delay: w.delay.to_token_stream(),
        });
    }

    Some(Input {
        source_name,
        input,
        ops,
        spans,
        cols: pre_agg,
        visible,
        derived,
    })
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

/// The plan the engine runs for a declaration, with the names of the
/// sources `writer_from` hands it.
///
/// The macro checks `Lowered::plan`, whose names and layout the compile
/// errors and lock files are keyed by (a source named after its rows, a
/// join among the main stream's ops). The engine runs the plan its builder
/// makes of the same query, and a checkpoint records that plan, names
/// included: this is that plan, so existing checkpoints keep working.
pub struct Running {
    /// The plan: the main stream's source `stream` and node `result`; for a
    /// join, a node of its own (`joined`, reading `result`) that holds the
    /// join and the ops after it, the joined stream's source `stream_1`
    /// and node `result_right` (before `joined`) or the static table.
    pub plan: StreamPlan,
    /// The main stream's source in `plan.sources`.
    pub source: String,
    /// The joined stream's source in `plan.sources`, for a stream-stream join.
    pub other: Option<String>,
}

/// `declared` as the engine's builder lays it out and names it
/// (`engine/src/dataset.rs`: `read_stream`, `join`, `join_static`): each
/// stream read is a plan of its own (source `stream`, node `result`); a
/// join moves the other stream's source and nodes in under fresh names
/// (`stream_1`, `result_right`) and adds node `joined`. A Kafka source
/// decoded from JSON or CSV (`decoded`: the main stream's, the joined
/// stream's) has the engine's `_corrupt_record` column after the declared
/// ones (Spark's PERMISSIVE mode).
fn running_plan(declared: &StreamPlan, join: Option<&JoinSide>, decoded: (bool, bool)) -> Running {
    let Some(main) = declared.nodes.last() else {
        return Running {
            plan: declared.clone(),
            source: String::new(),
            other: None,
        };
    };
    let schema = |source: &str, decoded: bool| {
        let mut fields = declared
            .sources
            .get(source)
            .map(|d| d.schema.clone())
            .unwrap_or_default();
        if decoded && !fields.iter().any(|f| f.name == "_corrupt_record") {
            fields.push(Field::new("_corrupt_record", DataType::String));
        }
        fields
    };
    let fields = schema(&main.input, decoded.0);
    let at = main.ops.iter().position(|o| matches!(o, Op::Join { .. }));
    let (before, after) = main.ops.split_at(at.unwrap_or(main.ops.len()));
    let mut plan = StreamPlan::single("stream", fields, before.to_vec(), declared.output_mode);
    let mut other = None;
    if let (Some(Op::Join { how, on, using, .. }), Some(side)) = (after.first(), join) {
        let right = if side.table {
            let name = fresh(&plan, &side.name);
            let schema = declared
                .statics
                .get(&side.name)
                .map(|t| t.schema.clone())
                .unwrap_or_default();
            plan.statics.insert(
                name.clone(),
                weir_plan::StaticDecl {
                    schema,
                    rows: vec![],
                },
            );
            name
        } else {
            // The joined stream: its own plan's source and node, renamed.
            let node = declared.nodes.first().filter(|n| n.id == side.name);
            let (input, ops) = node
                .map(|n| (n.input.as_str(), n.ops.clone()))
                .unwrap_or_default();
            let source = fresh(&plan, "stream");
            plan.sources.insert(
                source.clone(),
                weir_plan::SourceDecl {
                    schema: schema(input, decoded.1),
                },
            );
            let id = fresh(&plan, "result_right");
            plan.nodes.push(weir_plan::Node {
                id: id.clone(),
                input: source.clone(),
                ops,
            });
            other = Some(source);
            id
        };
        // The builder's join condition: `ON <sql>`, or `USING (keys)`.
        let using = match on {
            Some(_) => None,
            None => Some(using.clone().unwrap_or_default()),
        };
        let id = fresh(&plan, "joined");
        let mut ops = vec![Op::Join {
            right,
            how: *how,
            on: on.clone(),
            using,
        }];
        ops.extend(after[1..].iter().cloned());
        plan.nodes.push(weir_plan::Node {
            id: id.clone(),
            input: plan.result.clone(),
            ops,
        });
        plan.result = id;
    }
    plan.conf = declared.conf.clone();
    plan.sink = declared.sink.clone();
    plan.trigger = declared.trigger;
    plan.scale_out = declared.scale_out.clone();
    Running {
        plan,
        source: "stream".into(),
        other,
    }
}

/// `base`, or `base_1`, `base_2`, ... if a source, table or node of `plan`
/// has that name (the builder's names for what a join moves in).
fn fresh(plan: &StreamPlan, base: &str) -> String {
    let taken = |name: &str| {
        plan.sources.contains_key(name)
            || plan.statics.contains_key(name)
            || plan.nodes.iter().any(|n| n.id == name)
    };
    if !taken(base) {
        return base.to_string();
    }
    (1..)
        .map(|i| format!("{base}_{i}"))
        .find(|n| !taken(n))
        .unwrap_or_default()
}

/// What lowering a join yields.
struct LoweredJoin {
    name: String,
    source_name: String,
    fields: Vec<Field>,
    input: Vec<Col>,
    ops: Vec<Op>,
    spans: Vec<OpSpans>,
    derived: Vec<String>,
    op: Op,
    op_spans: OpSpans,
    /// The typed columns after the join.
    after: Vec<Col>,
}

/// Lowers `join:` over the left side's columns `left` (named `visible`).
fn lower_join(
    j: &JoinDecl,
    left_source: &str,
    left: &[Col],
    visible: &[String],
    errs: &mut Errors,
) -> Option<LoweredJoin> {
    if j.table {
        if let Some(s) = &j.side.source {
            if !matches!(s.kind, Source::Files { .. } | Source::Memory) {
                errs.spanned_help(
                    &s.ident,
                    format!("a static table cannot be read from the {} source", s.kind.name()),
                    "read the table from files (`source: files(path = \"...\", format = csv)`) or hand it in (`source: memory`)",
                );
                return None;
            }
        }
    }
    let side = lower_input(&j.side, errs)?;
    let mut name = side.source_name.clone();
    if name == left_source {
        name.push_str("_right");
    }
    // The plan's names: no identifier (a source's or a table's snake_case
    // name) can be the other stream's node id, and a table is never named
    // like the result node.
    if j.table && name == "result" {
        name.push_str("_table");
    }
    let source_name = name.clone();
    let name = if j.table {
        name
    } else {
        "the joined stream".to_string()
    };
    let fields: Vec<Field> = side
        .input
        .iter()
        .map(|c| Field::new(c.name.clone(), c.ty.dtype))
        .collect();

    let how = j.how;
    let left_nullable = matches!(how, JoinType::RightOuter | JoinType::FullOuter);
    let right_nullable = matches!(how, JoinType::LeftOuter | JoinType::FullOuter);
    let semi = matches!(how, JoinType::LeftSemi | JoinType::LeftAnti);
    let null_if = |c: &Col, n: bool| {
        let mut c = c.clone();
        c.ty.nullable |= n;
        c
    };
    let mut env: Vec<Col> = left.to_vec();
    env.extend(side.cols.iter().cloned());
    let mut both: Vec<String> = visible.to_vec();
    both.extend(side.visible.iter().cloned());

    let (on_sql, on_tokens, columns) = match &j.on {
        Some(e) => {
            let t = translate(e, &env, errs);
            if let Inferred::Known(ty) = t.ty {
                if ty.dtype != DataType::Bool {
                    errs.spanned_help(
                        e,
                        format!(
                            "a join condition must be a boolean expression, but this is {}",
                            ty.dtype
                        ),
                        "compare the sides' columns, e.g. `click_ad_id == ad_id`",
                    );
                }
            }
            (Some(t.expr), Some(e.to_token_stream()), t.columns)
        }
        None => (None, None, vec![]),
    };
    let keys: Vec<String> = j
        .using
        .as_ref()
        .map(|u| u.columns.iter().map(|c| c.unraw().to_string()).collect())
        .unwrap_or_default();

    let mut after: Vec<Col> = left
        .iter()
        .map(|c| {
            if keys.contains(&c.name) {
                // A USING key is the left's, or the right's for a right outer join.
                let r = lookup(&side.cols, &c.name);
                match (how, r) {
                    (JoinType::RightOuter, Some(r)) => r.clone(),
                    (JoinType::FullOuter, Some(r)) => {
                        let mut c = c.clone();
                        c.ty.nullable &= r.ty.nullable;
                        c
                    }
                    _ => c.clone(),
                }
            } else {
                null_if(c, left_nullable)
            }
        })
        .collect();
    for c in &side.cols {
        if keys.contains(&c.name) {
            continue;
        }
        // The engine refuses an ON join whose sides share a name, and a
        // USING join would have the name twice in the result.
        if lookup(left, &c.name).is_some() {
            let at =
                j.on.as_ref()
                    .map(|e| e.to_token_stream())
                    .or_else(|| j.using.as_ref().map(|u| u.key.to_token_stream()))
                    .unwrap_or_else(|| j.key.to_token_stream());
            errs.spanned_help(
                at,
                format!("both sides of the join have a column `{}`", c.name),
                format!("rename it on one side with `select:` (e.g. `select: {{ right_{0}: {0}, ... }}`), or join `using: [{0}]` when it is the join key", c.name),
            );
            continue;
        }
        if !semi {
            after.push(null_if(c, right_nullable));
        }
    }
    // USING keys compare values of one type.
    for k in j.using.iter().flat_map(|u| &u.columns) {
        let name = k.unraw().to_string();
        if let (Some(l), Some(r)) = (lookup(left, &name), lookup(&side.cols, &name)) {
            if l.ty.dtype != r.ty.dtype {
                errs.spanned_help(
                    k,
                    format!(
                        "join key `{name}` is {} on the left and {} on the right",
                        rust_type_name(l.ty),
                        rust_type_name(r.ty)
                    ),
                    format!(
                        "convert one side with `select:`, e.g. `{name}: {name} as {}`",
                        rust_type_name(ColType::new(l.ty.dtype))
                    ),
                );
            }
        }
    }

    let op = Op::Join {
        right: name.clone(),
        how,
        on: on_sql,
        using: (!keys.is_empty()).then_some(keys),
    };
    let op_spans = OpSpans::Join {
        key: j.key.to_token_stream(),
        how: j
            .how_ident
            .as_ref()
            .map(|i| i.to_token_stream())
            .unwrap_or_else(|| j.key.to_token_stream()),
        on: on_tokens,
        columns,
        using: j
            .using
            .iter()
            .flat_map(|u| u.columns.iter().map(|c| c.to_token_stream()))
            .collect(),
        visible: both,
    };
    Some(LoweredJoin {
        name,
        source_name,
        fields,
        input: side.input,
        ops: side.ops,
        spans: side.spans,
        derived: side.derived,
        op,
        op_spans,
        after,
    })
}

/// A select or with_column item, lowered.
struct LoweredItem {
    alias: String,
    expr: PlanExpr,
    ty: Option<ColType>,
    columns: Vec<ColumnRef>,
    tokens: TokenStream,
}

/// Translates one `name: expr` (or bare column) over the columns `env`;
/// an expression whose type cannot be inferred is an error asking for `as`.
fn lower_item(
    item: &SelectItemDecl,
    env: &[Col],
    derived: &mut Vec<String>,
    errs: &mut Errors,
) -> LoweredItem {
    let alias = item.alias.unraw().to_string();
    let Some(e) = &item.expr else {
        return LoweredItem {
            expr: PlanExpr::column(alias.clone()),
            ty: lookup(env, &alias).map(|c| c.ty),
            columns: vec![ColumnRef {
                name: alias.clone(),
                tokens: item.alias.to_token_stream(),
            }],
            tokens: item.alias.to_token_stream(),
            alias,
        };
    };
    derived.push(alias.clone());
    let t = translate(e, env, errs);
    let ty = match t.ty {
        Inferred::Known(ty) => Some(ty),
        Inferred::Unknown(what) => {
            errs.spanned_help(
                e,
                format!(
                    "cannot infer the type of `{alias}`: the macro does not know what `{}` returns",
                    what.to_string().replace(" (", "(")
                ),
                format!("state the type with `as`: `{alias}: {} as i32` (or i64, f64, String, bool, Timestamp)", e.to_token_stream().to_string().replace(" (", "(")),
            );
            None
        }
        Inferred::Poisoned => None,
    };
    LoweredItem {
        alias,
        expr: t.expr,
        ty,
        columns: t.columns,
        tokens: e.to_token_stream(),
    }
}

/// The result's columns with their Rust-side types: names, order and plan
/// types from [`weir_plan::resolve`]; nullability (and the types of
/// computed select items, which resolution cannot see) from the macro's own
/// inference. Aggregates over computed columns are type-checked here.
pub fn output_columns(l: &Lowered, errs: &mut Errors) -> Vec<Col> {
    let (schemas, _) = weir_plan::resolve(&l.plan);
    let Some(result) = schemas.get(&l.plan.result) else {
        return vec![];
    };
    let mine = macro_output(l, errs);
    result
        .columns
        .iter()
        .filter_map(|c| {
            let m = lookup(&mine, &c.name);
            let dtype = c.dtype.or(m.map(|m| m.ty.dtype))?;
            let nullable = m.map(|m| m.ty.nullable).unwrap_or(true);
            Some(Col::new(c.name.clone(), ColType { dtype, nullable }))
        })
        .collect()
}

/// The result columns as the macro types them.
fn macro_output(l: &Lowered, errs: &mut Errors) -> Vec<Col> {
    let Some((agg_op, keys, aggs)) = l
        .result_ops()
        .iter()
        .enumerate()
        .find_map(|(i, o)| match o {
            Op::Aggregate { keys, aggs } => Some((i, keys, aggs)),
            _ => None,
        })
    else {
        return l.pre_agg.clone();
    };
    // The columns the aggregate sees, as the plan types them: where the plan
    // knows a type, its own check reports a mistyped aggregate.
    let plan_input = {
        let mut p = l.plan.clone();
        let ri = l.result_node();
        p.nodes[ri].ops.truncate(agg_op);
        weir_plan::resolve(&p)
            .0
            .remove(&p.result)
            .unwrap_or_default()
    };
    let Some(agg_spans) = l.spans.ops.iter().find_map(|o| match o {
        OpSpans::Aggregate { aggs, .. } => Some(aggs),
        _ => None,
    }) else {
        return vec![];
    };
    let mut out = vec![];
    for k in keys {
        match k {
            GroupKey::Window { alias, .. } => {
                out.push(Col::new(alias.clone(), ColType::new(DataType::Window)))
            }
            GroupKey::Column { column } => {
                if let Some(c) = lookup(&l.pre_agg, column) {
                    out.push(c.clone());
                }
            }
        }
    }
    for (a, sp) in aggs.iter().zip(agg_spans) {
        // Counts are never null (0 for no rows).
        if a.func.def().result == ResultRule::Fixed(DataType::Int64) {
            out.push(Col::new(a.alias.clone(), ColType::new(DataType::Int64)));
            continue;
        }
        let Some(input) = lookup(&l.pre_agg, &a.column) else {
            continue;
        };
        match a.func.result_type(Some(input.ty.dtype)) {
            // Collections are never null (an empty array for no values).
            Some(t) if !a.func.def().result_may_be_null() => {
                out.push(Col::new(a.alias.clone(), ColType::new(t)))
            }
            Some(t) => out.push(Col::new(a.alias.clone(), ColType::nullable(t))),
            // Resolution reports this where it knows the type (source columns,
            // casts); the other computed columns are ours.
            None if l.derived.contains(&a.column)
                && plan_input
                    .column(&a.column)
                    .is_none_or(|c| c.dtype.is_none()) =>
            {
                errs.spanned_help(
                    sp.arg.as_ref().unwrap_or(&sp.call),
                    format!(
                        "{}({}) is not defined on {} columns (`{}` is {})",
                        a.func.name(),
                        a.column,
                        input.ty.dtype,
                        a.column,
                        rust_type_name(input.ty)
                    ),
                    a.func.def().input_help,
                )
            }
            None => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::parse_query;
    use quote::quote;
    use weir_plan::AggFn;

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
