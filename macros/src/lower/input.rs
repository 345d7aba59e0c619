//! The source, its schema and the row ops (`filter` → `select` →
//! `with_column` → `watermark`), lowered.

use quote::ToTokens;
use syn::ext::IdentExt;
use weir_plan::{DataType, Op, SelectItem};

use crate::ast::{QueryDecl, Source};
use crate::errors::Errors;
use crate::expr::{translate, Inferred};
use crate::types::{Col, ColType};

use super::*;

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
pub(super) struct Input {
    /// The source's name in the plan.
    pub(super) source_name: String,
    /// The source's columns.
    pub(super) input: Vec<Col>,
    /// The ops.
    pub(super) ops: Vec<Op>,
    /// Their tokens.
    pub(super) spans: Vec<OpSpans>,
    /// The typed columns after the ops.
    pub(super) cols: Vec<Col>,
    /// Every column name after the ops (typed or not).
    pub(super) visible: Vec<String>,
    /// Columns computed from an expression.
    pub(super) derived: Vec<String>,
}

/// Lowers a declaration's source, schema and row ops. Returns `None` when
/// there is no source or no usable schema (the error is already reported).
pub(super) fn lower_input(q: &QueryDecl, errs: &mut Errors) -> Option<Input> {
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
