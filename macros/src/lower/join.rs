//! `join:` lowered: the other side's source and ops, the join op and the
//! columns after it.

use quote::ToTokens;
use syn::ext::IdentExt;
use weir_plan::{DataType, Field, JoinType, Op};

use crate::ast::{JoinDecl, Source};
use crate::errors::Errors;
use crate::expr::{translate, Inferred};
use crate::types::{lookup, rust_type_name, Col, ColType};

use super::*;

/// What lowering a join yields.
pub(super) struct LoweredJoin {
    pub(super) name: String,
    pub(super) source_name: String,
    pub(super) fields: Vec<Field>,
    pub(super) input: Vec<Col>,
    pub(super) ops: Vec<Op>,
    pub(super) spans: Vec<OpSpans>,
    pub(super) derived: Vec<String>,
    pub(super) op: Op,
    pub(super) op_spans: OpSpans,
    /// The typed columns after the join.
    pub(super) after: Vec<Col>,
}

/// Lowers `join:` over the left side's columns `left` (named `visible`).
pub(super) fn lower_join(
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
