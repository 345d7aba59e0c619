//! The output columns: the result's types as the generated row struct
//! declares them.

use weir_plan::aggregates::ResultRule;
use weir_plan::{DataType, GroupKey, Op};

use crate::errors::Errors;
use crate::types::{lookup, rust_type_name, Col, ColType};

use super::*;

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
pub(super) fn macro_output(l: &Lowered, errs: &mut Errors) -> Vec<Col> {
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
