//! The plan as text: one printer for the `stream_query!` macro's `EXPLAIN`
//! and the engine's `StreamingQuery::explain()`.
//!
//! A tree in the shape of Spark's `explain()`: the sink at the root, each
//! operator above its input, the sources at the leaves; `+-` marks a node's
//! last child and `:-` the others (a join has two). Operators carry the names
//! Spark's physical plan gives them (`Filter`, `Project`,
//! `EventTimeWatermark`, `StateStoreSave Aggregate`, `Deduplicate`,
//! `StreamingSymmetricHashJoin`, `Sort`, `Limit`, `StreamingRelation`).
//!
//! ```
//! use weir_plan::{DataType, Field, Op, OutputMode, StreamPlan};
//! let plan = StreamPlan::single(
//!     "events",
//!     vec![Field::new("n", DataType::Int64)],
//!     vec![Op::Filter { predicate: "n > 0".into() }],
//!     OutputMode::Append,
//! );
//! assert_eq!(
//!     plan.to_string(),
//!     "WriteToStream sink=(not set), outputMode=Append\n\
//!      +- Filter n > 0\n   \
//!         +- StreamingRelation events [n: bigint]"
//! );
//! ```

use std::fmt;

use crate::plan::{
    AggFn, AggSpec, GroupKey, JoinType, Node, Op, SelectItem, SortKey, StreamPlan, TriggerDecl,
    WatermarkPolicy,
};
use crate::types::Field;

/// One line of the tree and the lines under it.
struct Tree {
    text: String,
    children: Vec<Tree>,
}

impl Tree {
    fn leaf(text: String) -> Tree {
        Tree {
            text,
            children: vec![],
        }
    }

    /// Writes this tree, its lines after `prefix`; `branch` is `+- ` or
    /// `:- ` (empty at the root).
    fn write(&self, f: &mut fmt::Formatter<'_>, prefix: &str, branch: &str) -> fmt::Result {
        write!(f, "{prefix}{branch}{}", self.text)?;
        let inner = match branch {
            "" => prefix.to_string(),
            "+- " => format!("{prefix}   "),
            _ => format!("{prefix}:  "),
        };
        for (i, c) in self.children.iter().enumerate() {
            f.write_str("\n")?;
            let last = i + 1 == self.children.len();
            c.write(f, &inner, if last { "+- " } else { ":- " })?;
        }
        Ok(())
    }
}

impl fmt::Display for StreamPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let root = Tree {
            text: write_line(self),
            children: vec![input_tree(self, &self.result, &mut vec![])],
        };
        root.write(f, "", "")
    }
}

/// The root: the sink and how it is written.
fn write_line(p: &StreamPlan) -> String {
    let mut s = format!(
        "WriteToStream sink={}, outputMode={}",
        p.sink
            .as_ref()
            .map(|s| s.kind.name())
            .unwrap_or("(not set)"),
        p.output_mode.spark_name()
    );
    if let Some(t) = p.trigger {
        s.push_str(&format!(", trigger={}", trigger(t)));
    }
    if let Some(sink) = &p.sink {
        let c = if sink.checkpoint { "set" } else { "none" };
        s.push_str(&format!(", checkpoint={c}"));
    }
    if let Some(group) = &p.scale_out {
        s.push_str(&format!(", scaleOut={group}"));
    }
    if p.conf.watermark_policy == WatermarkPolicy::Max {
        s.push_str(", multipleWatermarkPolicy=max");
    }
    if !p.conf.no_data_batches {
        s.push_str(", noDataMicroBatches=false");
    }
    s
}

fn trigger(t: TriggerDecl) -> String {
    match t {
        TriggerDecl::Default => "Default".into(),
        TriggerDecl::ProcessingTime(ms) => format!("ProcessingTime({ms} ms)"),
        TriggerDecl::AvailableNow => "AvailableNow".into(),
        TriggerDecl::Once => "Once".into(),
        TriggerDecl::Continuous(ms) => format!("Continuous({ms} ms)"),
    }
}

/// The tree of what `name` reads: a node (its ops), a source or a static
/// table. `open` holds the nodes being printed, so a plan whose nodes read
/// each other in a circle prints the circle instead of never ending.
fn input_tree(p: &StreamPlan, name: &str, open: &mut Vec<String>) -> Tree {
    if let Some(node) = p.node(name) {
        if open.iter().any(|n| n == name) {
            return Tree::leaf(format!("<cycle: node {name} reads itself>"));
        }
        open.push(name.to_string());
        let t = ops_tree(p, node, node.ops.len(), open);
        open.pop();
        return t;
    }
    if let Some(s) = p.sources.get(name) {
        return Tree::leaf(format!("StreamingRelation {name} [{}]", columns(&s.schema)));
    }
    if let Some(t) = p.statics.get(name) {
        return Tree::leaf(format!("StaticTable {name} [{}]", columns(&t.schema)));
    }
    Tree::leaf(format!("<unknown input {name}>"))
}

/// The tree of `node`'s first `n` ops over its input.
fn ops_tree(p: &StreamPlan, node: &Node, n: usize, open: &mut Vec<String>) -> Tree {
    let Some(op) = n.checked_sub(1).and_then(|i| node.ops.get(i)) else {
        return input_tree(p, &node.input, open);
    };
    let below = ops_tree(p, node, n - 1, open);
    let mut children = vec![below];
    if let Op::Join { right, .. } = op {
        children.push(input_tree(p, right, open));
    }
    Tree {
        text: op_line(p, op),
        children,
    }
}

fn columns(fields: &[Field]) -> String {
    fields
        .iter()
        .map(|f| format!("{}: {}", f.name, f.dtype.spark_name()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One operator's line.
fn op_line(p: &StreamPlan, op: &Op) -> String {
    match op {
        Op::Filter { predicate, .. } => format!("Filter {predicate}"),
        Op::Select { columns, .. } => {
            let items: Vec<String> = columns.iter().map(select_item).collect();
            format!("Project [{}]", items.join(", "))
        }
        Op::WithColumn { name, expr, .. } => format!("Project [*, {expr} AS {name}]"),
        Op::Watermark { column, delay, .. } => {
            format!("EventTimeWatermark {column}, delay \"{delay}\"")
        }
        Op::Aggregate { keys, aggs, .. } => {
            let session = keys
                .iter()
                .any(|k| matches!(k, GroupKey::Window { window, .. } if window.is_session()));
            let keys: Vec<String> = keys.iter().map(group_key).collect();
            let aggs: Vec<String> = aggs.iter().map(aggregate).collect();
            format!(
                "{} Aggregate keys=[{}], functions=[{}]",
                if session {
                    "SessionWindowStateStoreSave"
                } else {
                    "StateStoreSave"
                },
                keys.join(", "),
                aggs.join(", ")
            )
        }
        Op::Dedup {
            columns,
            within_watermark,
            ..
        } => format!(
            "{} [{}]",
            if *within_watermark {
                "DeduplicateWithinWatermark"
            } else {
                "Deduplicate"
            },
            columns.join(", ")
        ),
        Op::Join {
            right,
            how,
            on,
            using,
            ..
        } => {
            let name = if p.statics.contains_key(right) {
                "HashJoin"
            } else {
                "StreamingSymmetricHashJoin"
            };
            let cond = match (on, using) {
                (Some(on), _) => format!(", on {on}"),
                (None, Some(keys)) => format!(", using [{}]", keys.join(", ")),
                (None, None) => String::new(),
            };
            format!("{name} {}{cond}", join_type(*how))
        }
        Op::Sort { by, .. } => {
            let keys: Vec<String> = by.iter().map(sort_key).collect();
            format!("Sort [{}]", keys.join(", "))
        }
        Op::Limit { n, .. } => format!("Limit {n}"),
    }
}

fn join_type(j: JoinType) -> &'static str {
    j.spark_name()
}

fn select_item(c: &SelectItem) -> String {
    let expr = c.expr.to_string();
    let bare = expr
        .strip_prefix('"')
        .and_then(|e| e.strip_suffix('"'))
        .unwrap_or(&expr);
    if bare == c.alias {
        expr
    } else {
        format!("{expr} AS {}", c.alias)
    }
}

fn sort_key(k: &SortKey) -> String {
    format!("{} {}", k.column, if k.desc { "DESC" } else { "ASC" })
}

/// A grouping key as written in a query: `window(ts, "1 minute") AS window`.
fn group_key(k: &GroupKey) -> String {
    match k {
        GroupKey::Window { window, alias } => {
            let on = window
                .column
                .clone()
                .or_else(|| window.expr.clone())
                .unwrap_or_default();
            let args = match (&window.gap, &window.slide) {
                (Some(gap), _) => return format!("session_window({on}, \"{gap}\") AS {alias}"),
                (None, Some(slide)) => format!("\"{}\", \"{slide}\"", window.size),
                (None, None) => format!("\"{}\"", window.size),
            };
            format!("window({on}, {args}) AS {alias}")
        }
        GroupKey::Column { column } => column.clone(),
    }
}

fn aggregate(a: &AggSpec) -> String {
    if a.func == AggFn::CountDistinct {
        return format!("count(DISTINCT {}) AS {}", a.column, a.alias);
    }
    if a.column == "*" {
        return format!("{}(*) AS {}", a.func.name(), a.alias);
    }
    // The catalogue's spelling: a second argument when it is not the default.
    format!("{} AS {}", a.func.call(&a.column), a.alias)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{OutputMode, SinkDecl, SinkKind, StaticDecl, WindowSpec};
    use crate::types::DataType;

    fn ts(name: &str) -> Field {
        Field::new(name, DataType::Timestamp)
    }

    #[test]
    fn prints_every_op_above_its_input() {
        let mut p = StreamPlan::single(
            "sales",
            vec![
                Field::new("shop", DataType::String),
                Field::new("amount", DataType::Int64),
                ts("ts"),
            ],
            vec![
                Op::Filter {
                    predicate: "amount > 0".into(),
                },
                Op::WithColumn {
                    name: "shop".into(),
                    expr: "upper(shop)".into(),
                },
                Op::Select {
                    columns: vec![
                        SelectItem {
                            expr: "shop".into(),
                            alias: "shop".into(),
                        },
                        SelectItem {
                            expr: "amount * 2".into(),
                            alias: "double".into(),
                        },
                        SelectItem {
                            expr: "ts".into(),
                            alias: "ts".into(),
                        },
                    ],
                },
                Op::Watermark {
                    column: "ts".into(),
                    delay: "1 minute".into(),
                },
                Op::Dedup {
                    columns: vec!["shop".into(), "ts".into()],
                    within_watermark: true,
                },
                Op::Dedup {
                    columns: vec!["shop".into()],
                    within_watermark: false,
                },
                Op::Aggregate {
                    keys: vec![
                        GroupKey::Window {
                            window: WindowSpec {
                                column: Some("ts".into()),
                                expr: None,
                                size: "10 minutes".into(),
                                slide: Some("5 minutes".into()),
                                gap: None,
                            },
                            alias: "window".into(),
                        },
                        GroupKey::Column {
                            column: "shop".into(),
                        },
                    ],
                    aggs: vec![
                        AggSpec {
                            func: AggFn::Sum,
                            column: "double".into(),
                            alias: "total".into(),
                        },
                        AggSpec {
                            func: AggFn::Count,
                            column: "*".into(),
                            alias: "n".into(),
                        },
                    ],
                },
                Op::Sort {
                    by: vec![
                        SortKey {
                            column: "total".into(),
                            desc: true,
                        },
                        SortKey {
                            column: "shop".into(),
                            desc: false,
                        },
                    ],
                },
                Op::Limit { n: 3 },
            ],
            OutputMode::Complete,
        );
        p.sink = Some(SinkDecl {
            kind: SinkKind::Memory,
            checkpoint: false,
        });
        p.trigger = Some(TriggerDecl::ProcessingTime(5000));
        assert_eq!(
            p.to_string(),
            r#"WriteToStream sink=memory, outputMode=Complete, trigger=ProcessingTime(5000 ms), checkpoint=none
+- Limit 3
   +- Sort [total DESC, shop ASC]
      +- StateStoreSave Aggregate keys=[window(ts, "10 minutes", "5 minutes") AS window, shop], functions=[sum(double) AS total, count(*) AS n]
         +- Deduplicate [shop]
            +- DeduplicateWithinWatermark [shop, ts]
               +- EventTimeWatermark ts, delay "1 minute"
                  +- Project [shop, amount * 2 AS double, ts]
                     +- Project [*, upper(shop) AS shop]
                        +- Filter amount > 0
                           +- StreamingRelation sales [shop: string, amount: bigint, ts: timestamp]"#
        );
    }

    /// Aggregates print as the catalogue writes their calls: a second
    /// argument when not the default, `count(*)` kept.
    #[test]
    fn aggregates_print_their_second_arguments() {
        let agg = |func, column: &str, alias: &str| AggSpec {
            func,
            column: column.into(),
            alias: alias.into(),
        };
        let aggs = [
            agg(AggFn::Count, "*", "n"),
            agg(
                AggFn::ApproxCountDistinct {
                    rsd: crate::plan::Rsd::new(0.01).unwrap(),
                },
                "user",
                "u",
            ),
            agg(AggFn::Last { ignore_nulls: true }, "user", "l"),
            agg(
                AggFn::First {
                    ignore_nulls: false,
                },
                "user",
                "f",
            ),
            agg(AggFn::CollectList, "user", "all"),
            agg(AggFn::CollectSet, "user", "distinct"),
        ];
        let printed: Vec<String> = aggs.iter().map(aggregate).collect();
        assert_eq!(
            printed,
            [
                "count(*) AS n",
                "approx_count_distinct(user, 0.01) AS u",
                "last(user, true) AS l",
                "first(user) AS f",
                "collect_list(user) AS all",
                "collect_set(user) AS distinct",
            ]
        );
    }

    #[test]
    fn a_join_has_both_inputs_under_it() {
        let wm = |c: &str| Op::Watermark {
            column: c.into(),
            delay: "10 minutes".into(),
        };
        let mut p = StreamPlan::single(
            "clicks",
            vec![Field::new("imp_id", DataType::Int64), ts("click_ts")],
            vec![wm("click_ts")],
            OutputMode::Append,
        );
        p.sources.insert(
            "impressions".into(),
            crate::plan::SourceDecl {
                schema: vec![Field::new("id", DataType::Int64), ts("imp_ts")],
            },
        );
        p.statics.insert(
            "ads".into(),
            StaticDecl {
                schema: vec![Field::new("id", DataType::Int64)],
                rows: vec![],
            },
        );
        p.nodes.push(Node {
            id: "joined".into(),
            input: "impressions".into(),
            ops: vec![
                wm("imp_ts"),
                Op::Join {
                    right: "result".into(),
                    how: JoinType::LeftOuter,
                    on: Some("imp_id = id AND click_ts >= imp_ts".into()),
                    using: None,
                },
                Op::Join {
                    right: "ads".into(),
                    how: JoinType::Inner,
                    on: None,
                    using: Some(vec!["id".into()]),
                },
            ],
        });
        p.result = "joined".into();
        assert_eq!(
            p.to_string(),
            r#"WriteToStream sink=(not set), outputMode=Append
+- HashJoin Inner, using [id]
   :- StreamingSymmetricHashJoin LeftOuter, on imp_id = id AND click_ts >= imp_ts
   :  :- EventTimeWatermark imp_ts, delay "10 minutes"
   :  :  +- StreamingRelation impressions [id: bigint, imp_ts: timestamp]
   :  +- EventTimeWatermark click_ts, delay "10 minutes"
   :     +- StreamingRelation clicks [imp_id: bigint, click_ts: timestamp]
   +- StaticTable ads [id: bigint]"#
        );
    }

    #[test]
    fn names_session_windows_and_settings_beyond_the_defaults() {
        let mut p = StreamPlan::single(
            "clicks",
            vec![Field::new("user", DataType::String), ts("ts")],
            vec![Op::Aggregate {
                keys: vec![
                    GroupKey::Window {
                        window: WindowSpec {
                            column: Some("ts".into()),
                            expr: None,
                            size: Default::default(),
                            slide: None,
                            gap: Some("5 minutes".into()),
                        },
                        alias: "session_window".into(),
                    },
                    GroupKey::Column {
                        column: "user".into(),
                    },
                ],
                aggs: vec![AggSpec {
                    func: AggFn::CountDistinct,
                    column: "page".into(),
                    alias: "pages".into(),
                }],
            }],
            OutputMode::Append,
        );
        p.sink = Some(SinkDecl {
            kind: SinkKind::Kafka,
            checkpoint: true,
        });
        p.scale_out = Some("views".into());
        p.conf.watermark_policy = WatermarkPolicy::Max;
        p.conf.no_data_batches = false;
        let text = p.to_string();
        assert_eq!(
            text.lines().next().unwrap(),
            "WriteToStream sink=kafka, outputMode=Append, checkpoint=set, scaleOut=views, multipleWatermarkPolicy=max, noDataMicroBatches=false"
        );
        assert_eq!(
            text.lines().nth(1).unwrap(),
            "+- SessionWindowStateStoreSave Aggregate keys=[session_window(ts, \"5 minutes\") AS session_window, user], functions=[count(DISTINCT page) AS pages]"
        );
    }

    #[test]
    fn a_plan_reading_itself_or_nothing_still_prints() {
        let mut p = StreamPlan::single("s", vec![], vec![], OutputMode::Append);
        p.nodes[0].input = "result".into();
        p.nodes.push(Node {
            id: "other".into(),
            input: "missing".into(),
            ops: vec![],
        });
        assert_eq!(
            p.to_string(),
            "WriteToStream sink=(not set), outputMode=Append\n+- <cycle: node result reads itself>"
        );
        p.result = "other".into();
        assert!(p.to_string().ends_with("+- <unknown input missing>"));
    }
}
