//! Schema resolution: the columns (with types and watermark flags) that each
//! node of a plan produces, and every naming or typing mistake on the way.

use std::collections::BTreeMap;

use crate::duration::Duration;
use crate::expr::Expr;
use crate::plan::{GroupKey, JoinType, Op, StreamPlan};
use crate::types::{DataType, Field};
use crate::violation::{Location, Part, Rule, Violation};

/// A column as resolution sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    /// Its name.
    pub name: String,
    /// Its type, when known (SQL expressions without a type hint are not typed here).
    pub dtype: Option<DataType>,
    /// True when the column is (derived from) an event-time column with a watermark.
    pub watermark: bool,
}

/// What a node produces, and facts the streaming rules need.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NodeSchema {
    /// Output columns in order.
    pub columns: Vec<Column>,
    /// True when the node reads (transitively) from a streaming source.
    pub streaming: bool,
    /// True when a watermark was declared upstream of (or in) this node.
    pub has_watermark: bool,
    /// True when a streaming aggregation ran upstream of (or in) this node.
    pub aggregated: bool,
}

impl NodeSchema {
    /// The column with this name.
    pub fn column(&self, name: &str) -> Option<&Column> {
        self.columns.iter().find(|c| c.name == name)
    }
}

/// An alias of [`Violation`] for resolution errors.
pub type ResolveError = Violation;

/// Resolves every node's schema, in plan order. Mistakes are collected, not
/// fatal: an unknown column becomes an untyped column so later checks go on.
pub fn resolve(plan: &StreamPlan) -> (BTreeMap<String, NodeSchema>, Vec<Violation>) {
    let mut errs = Vec::new();
    let mut schemas: BTreeMap<String, NodeSchema> = BTreeMap::new();
    let from_fields = |fields: &[Field], streaming: bool| NodeSchema {
        columns: fields
            .iter()
            .map(|f| Column {
                name: f.name.clone(),
                dtype: Some(f.dtype),
                watermark: false,
            })
            .collect(),
        streaming,
        has_watermark: false,
        aggregated: false,
    };
    for (name, s) in &plan.sources {
        schemas.insert(name.clone(), from_fields(&s.schema, true));
    }
    for (name, s) in &plan.statics {
        schemas.insert(name.clone(), from_fields(&s.schema, false));
    }
    for (ni, node) in plan.nodes.iter().enumerate() {
        let mut cur = match schemas.get(&node.input) {
            Some(s) => s.clone(),
            None => {
                errs.push(
                    Violation::new(
                        Rule::UnknownInput,
                        Location::node(ni),
                        format!(
                        "node `{}` reads `{}`, which is not a source, static table or earlier node",
                        node.id, node.input
                    ),
                        None,
                    )
                    .about(node.input.as_str()),
                );
                NodeSchema {
                    streaming: true,
                    ..Default::default()
                }
            }
        };
        for (oi, op) in node.ops.iter().enumerate() {
            apply_op(plan, &schemas, &mut cur, ni, oi, op, &mut errs);
        }
        schemas.insert(node.id.clone(), cur);
    }
    if !schemas.contains_key(&plan.result) {
        errs.push(
            Violation::new(
                Rule::UnknownInput,
                Location::Plan,
                format!("the result node `{}` does not exist", plan.result),
                None,
            )
            .about(plan.result.as_str()),
        );
    }
    (schemas, errs)
}

/// The candidate `name` most likely meant: the shortest one it is a prefix
/// of (at least 3 characters typed), else the nearest by edit distance when
/// close enough to be a typo. Case-insensitive.
pub fn did_you_mean<'a>(name: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let lower = name.to_ascii_lowercase();
    if lower.len() >= 3 {
        let prefixed = candidates
            .iter()
            .filter(|c| c.len() > name.len() && c.to_ascii_lowercase().starts_with(&lower))
            .min_by_key(|c| c.len());
        if let Some(c) = prefixed {
            return Some(c);
        }
    }
    let (dist, best) = candidates
        .iter()
        .map(|c| (edit_distance(&lower, &c.to_ascii_lowercase()), *c))
        .min_by_key(|(d, _)| *d)?;
    let limit = (name.len().max(best.len()) / 3).max(2);
    (dist <= limit).then_some(best)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The rule "a column must exist", for a column `name` among the columns
/// `available` (in order), at `at`: the unknown-column violation, with a
/// "did you mean" over them, or `None` when `name` is one of them. What the
/// plan's resolution reports; the macro calls it for the identifiers it
/// sees in Rust expressions.
pub fn check_column(name: &str, available: &[&str], at: Location) -> Option<Violation> {
    (!available.contains(&name)).then(|| unknown_among(name, available, at))
}

/// The violation for a column `name` that the schema `cur` does not have.
fn unknown_column(name: &str, cur: &NodeSchema, at: Location) -> Violation {
    let names: Vec<&str> = cur.columns.iter().map(|c| c.name.as_str()).collect();
    unknown_among(name, &names, at)
}

/// "unknown column `name`", with a "did you mean" over `available`.
fn unknown_among(name: &str, available: &[&str], at: Location) -> Violation {
    // Unquoted SQL names are read in lower case: `userId` is `userid`.
    if let Some(c) = available
        .iter()
        .find(|c| c.eq_ignore_ascii_case(name) && **c != name)
    {
        return Violation::new(
            Rule::UnknownColumn,
            at,
            format!("unknown column `{name}`"),
            Some(format!(
                "SQL reads unquoted names in lower case: write the column `{c}` in double quotes, \"{c}\""
            )),
        )
        .about(name);
    }
    let help = match did_you_mean(name, available).map(|c| format!("did you mean `{c}`?")) {
        Some(s) => format!("{s} (available: {})", available.join(", ")),
        None => format!("available columns: {}", available.join(", ")),
    };
    Violation::new(
        Rule::UnknownColumn,
        at,
        format!("unknown column `{name}`"),
        Some(help),
    )
    .about(name)
}

fn check_sql_columns(expr: &Expr, cur: &NodeSchema, at: Location, errs: &mut Vec<Violation>) {
    if let Some(e) = expr.invalid() {
        errs.push(Violation::new(
            Rule::InvalidExpression,
            at,
            e.to_string(),
            Some("write one SQL expression, e.g. `value > 10 AND page <> 'home'`".into()),
        ));
        return;
    }
    for c in expr.columns() {
        if cur.column(&c).is_none() {
            errs.push(unknown_column(&c, cur, at.clone()));
        }
    }
}

fn apply_op(
    plan: &StreamPlan,
    schemas: &BTreeMap<String, NodeSchema>,
    cur: &mut NodeSchema,
    ni: usize,
    oi: usize,
    op: &Op,
    errs: &mut Vec<Violation>,
) {
    let at = |part: Part| Location::Op {
        node: ni,
        op: oi,
        part,
    };
    match op {
        Op::Filter { predicate } => check_sql_columns(predicate, cur, at(Part::Whole), errs),
        Op::Select { columns } => {
            let mut out: Vec<Column> = Vec::new();
            for (i, item) in columns.iter().enumerate() {
                check_sql_columns(&item.expr, cur, at(Part::Item(i)), errs);
                if out.iter().any(|c| c.name == item.alias) {
                    errs.push(
                        Violation::new(
                            Rule::DuplicateColumn,
                            at(Part::Item(i)),
                            format!("duplicate output column `{}`", item.alias),
                            Some("give each output column its own name".into()),
                        )
                        .about(item.alias.as_str()),
                    );
                }
                out.push(derived(cur, &item.expr, &item.alias));
            }
            cur.columns = out;
        }
        Op::WithColumn { name, expr } => {
            check_sql_columns(expr, cur, at(Part::Whole), errs);
            let col = derived(cur, expr, name);
            match cur.columns.iter_mut().find(|c| c.name == *name) {
                Some(c) => *c = col,
                None => cur.columns.push(col),
            }
        }
        Op::Watermark { column, delay } => {
            if let Err(e) = delay.ms() {
                errs.push(Violation::new(
                    Rule::BadDuration,
                    at(Part::Delay),
                    format!("invalid watermark delay \"{delay}\": {e}"),
                    Some("write a duration like \"10 minutes\" or \"30 seconds\"".into()),
                ));
            }
            match cur.columns.iter_mut().find(|c| c.name == *column) {
                None => errs.push(unknown_column(column, cur, at(Part::Column(0)))),
                Some(c) => {
                    if matches!(c.dtype, Some(t) if t != DataType::Timestamp && t != DataType::Window)
                    {
                        errs.push(Violation::new(
                            Rule::TypeMismatch,
                            at(Part::Column(0)),
                            format!(
                                "watermark column `{column}` must be a timestamp, but it is {}",
                                c.dtype.unwrap()
                            ),
                            Some("declare the event-time column as Timestamp, or convert it with to_timestamp(...)".into()),
                        ).about(column.as_str()));
                    }
                    c.watermark = true;
                    cur.has_watermark = true;
                }
            }
        }
        Op::Aggregate { keys, aggs } => {
            let mut out: Vec<Column> = Vec::new();
            for (i, k) in keys.iter().enumerate() {
                match k {
                    GroupKey::Column { column } => match cur.column(column) {
                        Some(c) => out.push(c.clone()),
                        None => {
                            errs.push(unknown_column(column, cur, at(Part::Key(i))));
                            out.push(Column {
                                name: column.clone(),
                                dtype: None,
                                watermark: false,
                            });
                        }
                    },
                    GroupKey::Window { window, alias } => {
                        if let Some(gap) = &window.gap {
                            if let Err(e) = gap.positive_ms() {
                                errs.push(Violation::new(
                                    Rule::BadDuration,
                                    at(Part::KeySize(i)),
                                    format!("invalid session gap \"{gap}\": {e}"),
                                    Some("write a positive duration like \"5 minutes\"".into()),
                                ));
                            }
                        }
                        let durations: &[(&str, Option<&Duration>, Part)] = if window.is_session() {
                            &[]
                        } else {
                            &[
                                ("size", Some(&window.size), Part::KeySize(i)),
                                ("slide", window.slide.as_ref(), Part::KeySlide(i)),
                            ]
                        };
                        for &(what, d, part) in durations {
                            if let Some(d) = d {
                                if let Err(e) = d.positive_ms() {
                                    errs.push(Violation::new(
                                        Rule::BadDuration,
                                        at(part),
                                        format!("invalid window {what} \"{d}\": {e}"),
                                        Some(
                                            "write a positive duration like \"10 minutes\"".into(),
                                        ),
                                    ));
                                }
                            }
                        }
                        if let (false, Ok(size), Some(Ok(slide))) = (
                            window.is_session(),
                            window.size.positive_ms(),
                            window.slide.as_ref().map(Duration::positive_ms),
                        ) {
                            if slide > size {
                                errs.push(Violation::new(
                                    Rule::WindowSlideLargerThanSize,
                                    at(Part::KeySlide(i)),
                                    format!("the window slide \"{}\" must be less than or equal to the window size \"{}\"", window.slide.as_ref().map(Duration::text).unwrap_or_default(), window.size),
                                    Some("use a slide no longer than the window, or drop the slide for a tumbling window".into()),
                                ));
                            }
                        }
                        let mut wm = false;
                        match window.time_column() {
                            None => errs.push(Violation::new(
                                Rule::UnknownColumn,
                                at(Part::Key(i)),
                                "a window needs a time column or window_time(<window column>)"
                                    .into(),
                                None,
                            )),
                            Some(tc) => match cur.column(&tc) {
                                None => errs.push(unknown_column(&tc, cur, at(Part::Key(i)))),
                                Some(c) => {
                                    wm = c.watermark;
                                    let ok = if window.is_window_time() {
                                        matches!(c.dtype, Some(DataType::Window) | None)
                                    } else {
                                        matches!(c.dtype, Some(DataType::Timestamp) | None)
                                    };
                                    if !ok {
                                        errs.push(Violation::new(
                                            Rule::TypeMismatch,
                                            at(Part::Key(i)),
                                            format!(
                                                "window column `{tc}` must be a timestamp, but it is {}",
                                                c.dtype.unwrap()
                                            ),
                                            Some("window over an event-time column of type Timestamp".into()),
                                        ).about(tc.as_str()));
                                    }
                                }
                            },
                        }
                        out.push(Column {
                            name: alias.clone(),
                            dtype: Some(DataType::Window),
                            watermark: wm,
                        });
                    }
                }
                if keys[..i].iter().any(|p| p.output_name() == k.output_name()) {
                    errs.push(
                        Violation::new(
                            Rule::DuplicateColumn,
                            at(Part::Key(i)),
                            format!("duplicate output column `{}`", k.output_name()),
                            Some("group by each column once, and by at most one window".into()),
                        )
                        .about(k.output_name()),
                    );
                }
            }
            for (i, a) in aggs.iter().enumerate() {
                let input = if a.column == "*" {
                    if !a.func.def().takes_star {
                        errs.push(Violation::new(
                            Rule::TypeMismatch,
                            at(Part::Agg(i)),
                            format!("{}(*) is not defined; only count takes *", a.func.name()),
                            Some(format!("name a column: {}(<column>)", a.func.name())),
                        ));
                    }
                    None
                } else {
                    match cur.column(&a.column) {
                        None => {
                            errs.push(unknown_column(&a.column, cur, at(Part::Agg(i))));
                            None
                        }
                        Some(c) => c.dtype,
                    }
                };
                let known_input = a.column == "*" || input.is_some();
                let rt = a.func.result_type(input);
                if known_input && a.column != "*" && rt.is_none() {
                    errs.push(
                        Violation::new(
                            Rule::TypeMismatch,
                            at(Part::Agg(i)),
                            format!(
                                "{}({}) is not defined on {} columns",
                                a.func.name(),
                                a.column,
                                input.map(|t| t.name()).unwrap_or("?")
                            ),
                            Some(a.func.def().input_help.into()),
                        )
                        .about(a.column.as_str()),
                    );
                }
                if out.iter().any(|c| c.name == a.alias) {
                    errs.push(
                        Violation::new(
                            Rule::DuplicateColumn,
                            at(Part::Agg(i)),
                            format!("duplicate output column `{}`", a.alias),
                            Some("give each aggregate its own name".into()),
                        )
                        .about(a.alias.as_str()),
                    );
                }
                out.push(Column {
                    name: a.alias.clone(),
                    dtype: rt,
                    watermark: false,
                });
            }
            cur.columns = out;
            if cur.streaming {
                cur.aggregated = true;
            }
        }
        Op::Dedup { columns, .. } => {
            for (i, c) in columns.iter().enumerate() {
                if cur.column(c).is_none() {
                    errs.push(unknown_column(c, cur, at(Part::Column(i))));
                }
            }
        }
        Op::Join {
            right,
            using,
            on,
            how,
        } => {
            let Some(r) = schemas.get(right) else {
                errs.push(
                    Violation::new(
                        Rule::UnknownInput,
                        at(Part::Whole),
                        format!("join with `{right}`, which is not a static table or earlier node"),
                        None,
                    )
                    .about(right.as_str()),
                );
                return;
            };
            let _ = plan;
            let mut cols = cur.columns.clone();
            let n_left = cols.len();
            if let Some(keys) = using {
                for (i, k) in keys.iter().enumerate() {
                    if cur.column(k).is_none() {
                        errs.push(unknown_column(k, cur, at(Part::Column(i))));
                    }
                    if r.column(k).is_none() {
                        errs.push(unknown_column(k, r, at(Part::Column(i))));
                    }
                }
                // Spark's USING output: the keys, the left's other
                // columns, then the right's.
                let (mut key_cols, rest): (Vec<Column>, Vec<Column>) =
                    cols.into_iter().partition(|c| keys.contains(&c.name));
                key_cols.sort_by_key(|c| keys.iter().position(|k| *k == c.name));
                cols = key_cols;
                cols.extend(rest);
                cols.extend(
                    r.columns
                        .iter()
                        .filter(|c| !keys.contains(&c.name))
                        .cloned(),
                );
            } else {
                cols.extend(r.columns.iter().cloned());
            }
            let merged = NodeSchema {
                columns: cols,
                streaming: cur.streaming || r.streaming,
                has_watermark: cur.has_watermark || r.has_watermark,
                aggregated: cur.aggregated || r.aggregated,
            };
            if let Some(on) = on {
                check_sql_columns(on, &merged, at(Part::Whole), errs);
            }
            // A semi or anti join only filters the left side's rows (USING
            // keys first, as Spark and the engine give them).
            if matches!(how, JoinType::LeftSemi | JoinType::LeftAnti) {
                let mut out = merged;
                out.columns.truncate(n_left);
                *cur = out;
            } else {
                *cur = merged;
            }
        }
        Op::Sort { by } => {
            for (i, k) in by.iter().enumerate() {
                if cur.column(&k.column).is_none() {
                    errs.push(unknown_column(&k.column, cur, at(Part::Column(i))));
                }
            }
        }
        Op::Limit { .. } => {}
    }
}

/// The column an expression produces: a bare column keeps its type and
/// watermark; `CAST(... AS T)` has type `T`; anything else is untyped here.
fn derived(cur: &NodeSchema, expr: &Expr, name: &str) -> Column {
    if let Some(c) = expr.as_column().and_then(|src| cur.column(src)) {
        return Column {
            name: name.to_string(),
            ..c.clone()
        };
    }
    Column {
        name: name.to_string(),
        dtype: expr.cast_type(),
        watermark: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::tests::events;
    use crate::plan::*;

    #[test]
    fn an_unquoted_mixed_case_column_is_told_to_quote_it() {
        let p = StreamPlan::single(
            "events",
            vec![Field::new("userId", DataType::Int64)],
            vec![Op::Filter {
                predicate: "userId > 1".into(),
            }],
            OutputMode::Append,
        );
        let (_, errs) = resolve(&p);
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].message, "unknown column `userid`");
        assert!(errs[0].help.as_deref().unwrap().contains("\"userId\""));
        // Quoted, it is the column.
        let p = StreamPlan::single(
            "events",
            vec![Field::new("userId", DataType::Int64)],
            vec![Op::Filter {
                predicate: "\"userId\" > 1".into(),
            }],
            OutputMode::Append,
        );
        assert!(resolve(&p).1.is_empty());
    }

    #[test]
    fn unknown_column_suggests_the_nearest() {
        let p = StreamPlan::single(
            "events",
            events(),
            vec![Op::Filter {
                predicate: "vaule > 1".into(),
            }],
            OutputMode::Append,
        );
        let (_, errs) = resolve(&p);
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].message, "unknown column `vaule`");
        assert!(errs[0]
            .help
            .as_deref()
            .unwrap()
            .starts_with("did you mean `value`?"));
    }

    #[test]
    fn aggregate_types_and_watermark_flow() {
        let p = StreamPlan::single(
            "events",
            events(),
            vec![
                Op::Watermark {
                    column: "ts".into(),
                    delay: "10 minutes".into(),
                },
                Op::Aggregate {
                    keys: vec![
                        GroupKey::Window {
                            window: WindowSpec {
                                column: Some("ts".into()),
                                expr: None,
                                size: "10 minutes".into(),
                                slide: None,
                                gap: None,
                            },
                            alias: "window".into(),
                        },
                        GroupKey::Column {
                            column: "key".into(),
                        },
                    ],
                    aggs: vec![
                        AggSpec {
                            func: AggFn::Sum,
                            column: "value".into(),
                            alias: "s".into(),
                        },
                        AggSpec {
                            func: AggFn::Avg,
                            column: "value".into(),
                            alias: "a".into(),
                        },
                    ],
                },
            ],
            OutputMode::Append,
        );
        let (schemas, errs) = resolve(&p);
        assert!(errs.is_empty(), "{errs:?}");
        let r = &schemas["result"];
        assert_eq!(r.columns[0].dtype, Some(DataType::Window));
        assert!(r.columns[0].watermark);
        assert_eq!(r.column("s").unwrap().dtype, Some(DataType::Int64));
        assert_eq!(r.column("a").unwrap().dtype, Some(DataType::Float64));
    }

    #[test]
    fn duplicate_keys_and_negative_delays_are_reported() {
        let p = StreamPlan::single(
            "events",
            events(),
            vec![
                Op::Watermark {
                    column: "ts".into(),
                    delay: "-1 minute".into(),
                },
                Op::Aggregate {
                    keys: vec![
                        GroupKey::Column {
                            column: "key".into(),
                        },
                        GroupKey::Column {
                            column: "key".into(),
                        },
                    ],
                    aggs: vec![],
                },
            ],
            OutputMode::Update,
        );
        let (_, errs) = resolve(&p);
        let got: Vec<(Rule, &str)> = errs.iter().map(|e| (e.rule, e.message.as_str())).collect();
        assert_eq!(
            got,
            [
                (
                    Rule::BadDuration,
                    "invalid watermark delay \"-1 minute\": the duration must not be negative"
                ),
                (Rule::DuplicateColumn, "duplicate output column `key`"),
            ]
        );
        assert_eq!(
            errs[1].at,
            Location::Op {
                node: 0,
                op: 1,
                part: Part::Key(1)
            }
        );
    }

    #[test]
    fn type_errors_are_reported() {
        let p = StreamPlan::single(
            "events",
            events(),
            vec![
                Op::Watermark {
                    column: "key".into(),
                    delay: "10 minutes".into(),
                },
                Op::Aggregate {
                    keys: vec![GroupKey::Window {
                        window: WindowSpec {
                            column: Some("key".into()),
                            expr: None,
                            size: "10 minutes".into(),
                            slide: Some("20 minutes".into()),
                            gap: None,
                        },
                        alias: "window".into(),
                    }],
                    aggs: vec![AggSpec {
                        func: AggFn::Sum,
                        column: "key".into(),
                        alias: "s".into(),
                    }],
                },
            ],
            OutputMode::Update,
        );
        let (_, errs) = resolve(&p);
        let rules: Vec<Rule> = errs.iter().map(|e| e.rule).collect();
        assert_eq!(
            rules,
            vec![
                Rule::TypeMismatch,
                Rule::WindowSlideLargerThanSize,
                Rule::TypeMismatch,
                Rule::TypeMismatch
            ]
        );
    }
}
