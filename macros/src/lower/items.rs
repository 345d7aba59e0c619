//! One `select:` or `with_column:` item lowered: its expression tree,
//! type and column references.

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::ext::IdentExt;
use weir_plan::expr::Expr as PlanExpr;

use crate::ast::SelectItemDecl;
use crate::errors::Errors;
use crate::expr::{translate, ColumnRef, Inferred};
use crate::types::{lookup, Col, ColType};

/// A select or with_column item, lowered.
pub(super) struct LoweredItem {
    pub(super) alias: String,
    pub(super) expr: PlanExpr,
    pub(super) ty: Option<ColType>,
    pub(super) columns: Vec<ColumnRef>,
    pub(super) tokens: TokenStream,
}

/// Translates one `name: expr` (or bare column) over the columns `env`;
/// an expression whose type cannot be inferred is an error asking for `as`.
pub(super) fn lower_item(
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
