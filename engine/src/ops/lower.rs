//! The one place a plan expression becomes a DataFusion expression.
//!
//! The plan's tree ([`weir_plan::expr::Expr`]) is lowered node by node:
//! columns, literals, operators, `IS NULL`, `BETWEEN`, `IN`, `LIKE`,
//! `CASE` and calls of scalar functions the context knows. What the tree
//! keeps as SQL text (a construct it does not model), casts and intervals
//! (whose types DataFusion's settings decide, e.g. `VARCHAR` as a string
//! view) and calls of anything else are handed to DataFusion's SQL planner
//! as that subtree's text, so every expression DataFusion accepts still runs.

use datafusion::common::{Column, DFSchema, ScalarValue};
use datafusion::logical_expr::expr::{Between, Case, InList, Like};
use datafusion::logical_expr::{binary_expr, Expr as DfExpr, Operator};
use datafusion::prelude::SessionContext;
use weir_plan::expr::{BinaryOp, Expr, Literal, UnaryOp};

/// Lowers `expr` over `schema`, resolving functions in `ctx`.
pub fn lower(
    expr: &Expr,
    ctx: &SessionContext,
    schema: &DFSchema,
) -> datafusion::error::Result<DfExpr> {
    let sub = |e: &Expr| lower(e, ctx, schema).map(Box::new);
    Ok(match expr {
        Expr::Column {
            qualifier: None,
            name,
        } => DfExpr::Column(Column::new_unqualified(name)),
        Expr::Literal(l) => match literal(l) {
            Some(v) => DfExpr::Literal(v, None),
            None => delegate(expr, ctx, schema)?,
        },
        Expr::Unary { op, expr: inner } => match op {
            UnaryOp::Not => DfExpr::Not(sub(inner)?),
            UnaryOp::Minus => DfExpr::Negative(sub(inner)?),
            UnaryOp::Plus => lower(inner, ctx, schema)?,
        },
        Expr::Binary { left, op, right } => binary_expr(
            lower(left, ctx, schema)?,
            operator(*op),
            lower(right, ctx, schema)?,
        ),
        Expr::IsNull {
            expr: inner,
            negated,
        } => {
            let e = sub(inner)?;
            if *negated {
                DfExpr::IsNotNull(e)
            } else {
                DfExpr::IsNull(e)
            }
        }
        Expr::Between {
            expr: inner,
            negated,
            low,
            high,
        } => DfExpr::Between(Between::new(sub(inner)?, *negated, sub(low)?, sub(high)?)),
        Expr::InList {
            expr: inner,
            list,
            negated,
        } => DfExpr::InList(InList::new(
            sub(inner)?,
            list.iter()
                .map(|e| lower(e, ctx, schema))
                .collect::<datafusion::error::Result<_>>()?,
            *negated,
        )),
        Expr::Like {
            expr: inner,
            pattern,
            negated,
            case_insensitive,
        } => DfExpr::Like(Like::new(
            *negated,
            sub(inner)?,
            sub(pattern)?,
            None,
            *case_insensitive,
        )),
        Expr::Case {
            operand,
            branches,
            otherwise,
        } => DfExpr::Case(Case::new(
            operand.as_deref().map(sub).transpose()?,
            branches
                .iter()
                .map(|(w, t)| Ok((sub(w)?, sub(t)?)))
                .collect::<datafusion::error::Result<_>>()?,
            otherwise.as_deref().map(sub).transpose()?,
        )),
        Expr::Call(call) if call.over.is_none() && !call.distinct => {
            let udf = ctx
                .state()
                .scalar_functions()
                .get(&call.name.to_ascii_lowercase())
                .cloned();
            match udf {
                Some(udf) if call.args.iter().all(|a| !matches!(a, Expr::Wildcard)) => udf.call(
                    call.args
                        .iter()
                        .map(|a| lower(a, ctx, schema))
                        .collect::<datafusion::error::Result<_>>()?,
                ),
                _ => delegate(expr, ctx, schema)?,
            }
        }
        Expr::Column { .. }
        | Expr::Call(_)
        | Expr::Cast { .. }
        | Expr::Interval { .. }
        | Expr::Wildcard
        | Expr::Other { .. }
        | Expr::Invalid { .. } => delegate(expr, ctx, schema)?,
    })
}

/// DataFusion's SQL planner on this subtree's text.
fn delegate(
    expr: &Expr,
    ctx: &SessionContext,
    schema: &DFSchema,
) -> datafusion::error::Result<DfExpr> {
    ctx.parse_sql_expr(&expr.to_string(), schema)
}

/// A literal as DataFusion's SQL planner types it: integers as `Int64`,
/// other numbers as `Float64`, strings as `Utf8`.
fn literal(l: &Literal) -> Option<ScalarValue> {
    Some(match l {
        Literal::Null => ScalarValue::Null,
        Literal::Bool(b) => ScalarValue::Boolean(Some(*b)),
        Literal::String(s) => ScalarValue::Utf8(Some(s.clone())),
        Literal::Number(n) => match n.parse::<i64>() {
            Ok(i) => ScalarValue::Int64(Some(i)),
            Err(_) if n.contains(['.', 'e', 'E']) => ScalarValue::Float64(Some(n.parse().ok()?)),
            Err(_) => return None,
        },
    })
}

fn operator(op: BinaryOp) -> Operator {
    match op {
        BinaryOp::And => Operator::And,
        BinaryOp::Or => Operator::Or,
        BinaryOp::Eq => Operator::Eq,
        BinaryOp::NotEq => Operator::NotEq,
        BinaryOp::Lt => Operator::Lt,
        BinaryOp::LtEq => Operator::LtEq,
        BinaryOp::Gt => Operator::Gt,
        BinaryOp::GtEq => Operator::GtEq,
        BinaryOp::Plus => Operator::Plus,
        BinaryOp::Minus => Operator::Minus,
        BinaryOp::Multiply => Operator::Multiply,
        BinaryOp::Divide => Operator::Divide,
        BinaryOp::Modulo => Operator::Modulo,
        BinaryOp::Concat => Operator::StringConcat,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, BooleanArray, Float64Array, Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use arrow::record_batch::RecordBatch;

    use super::*;

    fn batch() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, true),
            Field::new("x", DataType::Float64, true),
            Field::new("page", DataType::Utf8, true),
            Field::new("ok", DataType::Boolean, true),
            Field::new("Mixed", DataType::Int64, true),
            Field::new(
                "ts",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                true,
            ),
        ]));
        let ts = arrow::array::TimestampMicrosecondArray::from(vec![
            Some(3_723_000_000),
            None,
            Some(0),
            Some(86_400_000_000),
        ])
        .with_timezone("UTC");
        let cols: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(vec![Some(1), Some(-2), None, Some(40)])),
            Arc::new(Float64Array::from(vec![
                Some(1.5),
                None,
                Some(-0.25),
                Some(8.0),
            ])),
            Arc::new(StringArray::from(vec![
                Some("home"),
                Some("rock and roll"),
                None,
                Some("Cart"),
            ])),
            Arc::new(BooleanArray::from(vec![
                Some(true),
                Some(false),
                None,
                Some(true),
            ])),
            Arc::new(Int64Array::from(vec![Some(7), Some(8), Some(9), None])),
            Arc::new(ts),
        ];
        RecordBatch::try_new(schema, cols).unwrap()
    }

    /// Lowering the tree evaluates exactly as DataFusion's SQL planner does
    /// on the same text (the path every expression took before the tree).
    #[test]
    fn lowered_expressions_evaluate_as_datafusion_reads_the_sql() {
        let ctx = SessionContext::new();
        crate::ops::functions::register(&ctx);
        let planner = crate::ops::stateless::ExprPlanner::new();
        let b = batch();
        ctx.register_batch("t", b.clone()).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        for sql in [
            "n > 0 AND page <> 'home'",
            "page = 'rock and roll' OR NOT ok",
            "n % 2 = 1",
            "(n + 1) * 2 - x / 4",
            "-n <= -(x - 1.5)",
            "n BETWEEN 0 AND 10",
            "n NOT IN (1, 2, 3)",
            "page LIKE 'ho%'",
            "page ILIKE 'cart'",
            "page IS NULL",
            "x IS NOT NULL",
            "CASE WHEN n > 1 THEN 'big' WHEN n IS NULL THEN 'none' ELSE 'small' END",
            "CASE n WHEN 1 THEN 'one' ELSE 'other' END",
            "lower(page) || '!'",
            "upper(concat(page, 'x'))",
            "coalesce(n, 0) + 1",
            "abs(n)",
            "length(page) > 3",
            "hour(ts) + minute(ts)",
            "CAST(n AS DOUBLE) / 2.0",
            "CAST(n AS VARCHAR)",
            "ts + INTERVAL '15 minutes' > ts",
            "\"Mixed\" + 1",
            "N + 1",
            "1e3 + n",
            "starts_with(page, 'ho')",
            "lower(trim(page))",
            "substring(page, 1, 2)",
            "ceil(x) + floor(x)",
            "nullif(n, 1)",
        ] {
            let ours = planner.plan(sql, b.schema_ref()).unwrap();
            let a = ours.evaluate(&b).unwrap().into_array(b.num_rows()).unwrap();
            // DataFusion's whole query path (SQL planner, analyzer,
            // optimizer) on the same text is the reference.
            let query = format!("SELECT {sql} AS v FROM t");
            let out = rt.block_on(async { ctx.sql(&query).await?.collect().await });
            let out = out.unwrap_or_else(|e| panic!("{sql}: {e}"));
            let e = arrow::compute::concat(
                &out.iter().map(|r| r.column(0).as_ref()).collect::<Vec<_>>(),
            )
            .unwrap();
            assert_eq!(a.data_type(), e.data_type(), "{sql}");
            assert_eq!(&a, &e, "{sql}");
        }
    }

    #[test]
    fn an_unknown_column_is_an_error_not_a_panic() {
        let ctx = SessionContext::new();
        let b = batch();
        let schema = DFSchema::try_from(b.schema().as_ref().clone()).unwrap();
        let lowered = lower(&Expr::parse("nope > 1").unwrap(), &ctx, &schema).unwrap();
        assert!(ctx.create_physical_expr(lowered, &schema).is_err());
        let planner = crate::ops::stateless::ExprPlanner::new();
        let e = planner
            .plan("no_such_fn(page)", b.schema_ref())
            .unwrap_err()
            .to_string();
        assert!(e.contains("no_such_fn"), "{e}");
        let e = planner
            .plan("page = ", b.schema_ref())
            .unwrap_err()
            .to_string();
        assert!(e.contains("page ="), "{e}");
    }
}
