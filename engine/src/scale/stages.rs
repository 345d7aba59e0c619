//! How a scale-out query is cut into stages. A stateful operator needs all
//! rows of one key in one task. When the operator's key includes the Kafka
//! message `key` (the input's partitioning: one key, one partition), the
//! query runs whole in one task per input partition. Otherwise it runs in
//! two stages, as Kafka Streams does: the first, one task per input
//! partition, runs the stateless part and writes each row to a repartition
//! topic keyed by the operator's key, transactionally with its progress;
//! the second, one task per repartition partition, reads them back and runs
//! the watermark, the stateful operators and what follows.

use weir_plan::{GroupKey, Op, StreamPlan};

use crate::error::{Result, WeirError};

/// The first stage's routing column when an aggregation has no column key
/// (a global or window-only aggregation): one constant, one partition.
pub(crate) const ROUTE_ALL: &str = "__weir_route";

/// A query cut in two at its first stateful operator.
#[derive(Debug, Clone)]
pub(crate) struct Split {
    /// The stateless part (and the watermarks).
    pub first: Vec<Op>,
    /// The watermarks, then the stateful operators and what follows.
    pub second: Vec<Op>,
    /// The columns rows are routed by (the repartition topic's key).
    pub route_by: Vec<String>,
    /// The stateful operator's name and position, for the topic's name.
    pub operator: (String, usize),
}

/// The query's single node's operations (a scale-out query reads one source).
fn ops(plan: &StreamPlan) -> &[Op] {
    plan.nodes.first().map(|n| n.ops.as_slice()).unwrap_or(&[])
}

fn is_stateful(op: &Op) -> bool {
    matches!(op, Op::Aggregate { .. } | Op::Dedup { .. })
}

/// Whether a stateful operator's rows already meet in one task: its key
/// includes the message key, unchanged since the source.
fn keyed_by_message_key(before: &[Op], op: &Op) -> bool {
    let redefined = before.iter().any(|o| match o {
        Op::WithColumn { name, .. } => name == "key",
        Op::Select { columns } => columns
            .iter()
            .any(|c| c.alias == "key" && c.expr.as_column() != Some("key")),
        _ => false,
    });
    let keyed = match op {
        Op::Aggregate { keys, .. } => keys
            .iter()
            .any(|k| matches!(k, GroupKey::Column { column } if column == "key")),
        Op::Dedup { columns, .. } => columns.iter().any(|c| c == "key"),
        _ => false,
    };
    keyed && !redefined
}

/// Cuts `plan`: `None` when it runs whole per input partition (no stateful
/// operator, or the first one is keyed by the message key).
pub(crate) fn split(plan: &StreamPlan) -> Result<Option<Split>> {
    // (One stream, no sort or limit: the plan's rules, `scale_out_divides`.)
    let ops = ops(plan);
    let Some(k) = ops.iter().position(is_stateful) else {
        return Ok(None);
    };
    if keyed_by_message_key(&ops[..k], &ops[k]) {
        return Ok(None);
    }
    let route_by = match &ops[k] {
        Op::Aggregate { keys, .. } => {
            let cols: Vec<String> = keys
                .iter()
                .filter_map(|k| match k {
                    GroupKey::Column { column } => Some(column.clone()),
                    GroupKey::Window { .. } => None,
                })
                .collect();
            if cols.is_empty() {
                vec![ROUTE_ALL.to_string()]
            } else {
                cols
            }
        }
        Op::Dedup { columns, .. } => columns.clone(),
        other => {
            return Err(WeirError::Config(format!(
                "scale-out cannot divide `{}` before an aggregation: it needs every row in one task; run this query in one process",
                other.name()
            )))
        }
    };
    let mut first = Vec::new();
    let mut second = Vec::new();
    for op in &ops[..k] {
        // The watermark runs in both stages: the first publishes its
        // event times (see `query/shared_watermark.rs`), the second's
        // stateful operators evict by it.
        if matches!(op, Op::Watermark { .. }) {
            second.push(op.clone());
        }
        first.push(op.clone());
    }
    if route_by == [ROUTE_ALL] {
        first.push(Op::WithColumn {
            name: ROUTE_ALL.into(),
            expr: "'all'".into(),
        });
    }
    second.extend(ops[k..].iter().cloned());
    Ok(Some(Split {
        first,
        second,
        route_by,
        operator: (ops[k].name().to_string(), k),
    }))
}

/// `plan` with its node's operations replaced.
pub(crate) fn with_ops(plan: &StreamPlan, ops: Vec<Op>) -> StreamPlan {
    let mut p = plan.clone();
    if let Some(n) = p.nodes.first_mut() {
        n.ops = ops;
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_plan::{DataType, Field, OutputMode, WindowSpec};

    fn plan(ops: Vec<Op>) -> StreamPlan {
        StreamPlan::single(
            "s",
            vec![
                Field::new("key", DataType::String),
                Field::new("page", DataType::String),
                Field::new("ts", DataType::Timestamp),
            ],
            ops,
            OutputMode::Append,
        )
    }

    fn agg(keys: Vec<GroupKey>) -> Op {
        Op::Aggregate { keys, aggs: vec![] }
    }

    fn column(c: &str) -> GroupKey {
        GroupKey::Column { column: c.into() }
    }

    #[test]
    fn keyed_by_the_message_key_runs_whole() {
        assert!(split(&plan(vec![agg(vec![column("key")])]))
            .unwrap()
            .is_none());
        assert!(split(&plan(vec![Op::Filter {
            predicate: "true".into()
        }]))
        .unwrap()
        .is_none());
    }

    #[test]
    fn a_redefined_key_is_not_the_message_key() {
        let s = split(&plan(vec![
            Op::WithColumn {
                name: "key".into(),
                expr: "page".into(),
            },
            agg(vec![column("key")]),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(s.route_by, vec!["key".to_string()]);
    }

    #[test]
    fn other_keys_go_through_a_repartition_with_the_watermark_in_both_stages() {
        let wm = Op::Watermark {
            column: "ts".into(),
            delay: "1 minute".into(),
        };
        let filter = Op::Filter {
            predicate: "page <> ''".into(),
        };
        let window = GroupKey::Window {
            window: WindowSpec {
                column: Some("ts".into()),
                expr: None,
                size: "1 minute".into(),
                slide: None,
                gap: None,
            },
            alias: "window".into(),
        };
        let s = split(&plan(vec![
            wm.clone(),
            filter.clone(),
            agg(vec![window.clone(), column("page")]),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(s.first, vec![wm.clone(), filter]);
        assert_eq!(s.second[0], wm);
        assert_eq!(s.route_by, vec!["page".to_string()]);
        let s = split(&plan(vec![wm, agg(vec![window])])).unwrap().unwrap();
        assert_eq!(s.route_by, vec![ROUTE_ALL.to_string()]);
        assert!(matches!(s.first.last(), Some(Op::WithColumn { name, .. }) if name == ROUTE_ALL));
    }
}
