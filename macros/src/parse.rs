//! The grammar of `stream_query!`: `query Name { key: value, ... }` with the
//! keys in any order, each at most once. Each entry is parsed on its own, so
//! one broken entry does not hide the mistakes in the others.

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::parse::{ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::{Attribute, Expr, Ident, LitStr, Token};
use weir_plan::aggregates::{self, AggregateDef, Arg, Param};
use weir_plan::duration::parse_positive_duration_ms;
use weir_plan::{JoinType, OutputMode, Rsd};

use crate::ast::*;
use crate::connectors::{check_location, parse_sink, parse_source};
use crate::errors::{suggestion_help, Errors};
use crate::types::parse_rust_type;

mod kw {
    syn::custom_keyword!(query);
    syn::custom_keyword!(delay);
}

/// The keys of a declaration, in the order the docs list them.
pub const KEYS: &[&str] = &[
    "source",
    "schema",
    "filter",
    "select",
    "with_column",
    "watermark",
    "join",
    "drop_duplicates",
    "drop_duplicates_within_watermark",
    "group_by",
    "aggregate",
    "order_by",
    "limit",
    "output_mode",
    "trigger",
    "sink",
    "late_rows",
    "checkpoint",
    "name",
    "scale_out",
];

/// Keys whose values shape the plan: if one of them is broken, the plan
/// checks are skipped (they would report the consequences, not the cause).
/// A source with a bad option still has its schema, so it is not one of them.
const PLAN_KEYS: &[&str] = &[
    "schema",
    "filter",
    "select",
    "with_column",
    "watermark",
    "join",
    "drop_duplicates",
    "drop_duplicates_within_watermark",
    "group_by",
    "aggregate",
    "order_by",
    "limit",
    "output_mode",
];

/// Parses the macro input. Returns `None` only when not even the
/// `query Name { ... }` frame parses; every other mistake is pushed to
/// `errs` and parsing goes on.
pub fn parse_query(input: TokenStream, errs: &mut Errors) -> Option<QueryDecl> {
    let (attrs, ident, body) = match parse_frame.parse2(input) {
        Ok(f) => f,
        Err(e) => {
            errs.syn(e);
            return None;
        }
    };
    let mut q = QueryDecl::empty(ident);
    for a in attrs {
        if a.path().is_ident("doc") {
            q.docs.push(a);
        } else {
            errs.spanned(&a, "only doc comments (`///`) are allowed on a query");
        }
    }
    let mut seen: Vec<String> = vec![];
    for entry in split_commas(body) {
        let before = errs.len();
        let key = parse_entry(&mut q, entry, &mut seen, KEYS, errs);
        if errs.len() > before && key.is_some_and(|k| PLAN_KEYS.contains(&k.as_str())) {
            q.incomplete = true;
        }
    }
    let required = [
        ("source", q.source.is_some(), "add e.g. `source: rate(rows_per_second = 5)` or `source: files(path = \"data/in\", format = json)`"),
        ("sink", q.sink.is_some(), "add e.g. `sink: console(truncate = false)`"),
    ];
    for (key, present, help) in required {
        if !present && !seen.iter().any(|s| s == key) {
            errs.spanned_help(
                &q.ident,
                format!("query `{}` has no `{key}:`", q.ident),
                help,
            );
            if key == "source" {
                q.incomplete = true;
            }
        }
    }
    Some(q)
}

/// `#[doc] query Name { body }`.
fn parse_frame(input: ParseStream) -> syn::Result<(Vec<Attribute>, Ident, TokenStream)> {
    let attrs = input.call(Attribute::parse_outer)?;
    input
        .parse::<kw::query>()
        .map_err(|e| syn::Error::new(e.span(), "expected `query Name { ... }`"))?;
    let ident: Ident = input.parse()?;
    let content;
    syn::braced!(content in input);
    let body: TokenStream = content.parse()?;
    if !input.is_empty() {
        return Err(
            input.error("one `stream_query!` declares one query; use one macro call per query")
        );
    }
    Ok((attrs, ident, body))
}

/// Splits at the commas that are not inside a group; empty pieces are dropped.
fn split_commas(body: TokenStream) -> Vec<TokenStream> {
    let mut out = vec![];
    let mut cur = TokenStream::new();
    for tt in body {
        match &tt {
            TokenTree::Punct(p) if p.as_char() == ',' => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            _ => cur.extend([tt]),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Parses one `key: value` into `q`; returns the key's name when it is known.
fn parse_entry(
    q: &mut QueryDecl,
    entry: TokenStream,
    seen: &mut Vec<String>,
    allowed: &[&str],
    errs: &mut Errors,
) -> Option<String> {
    let head = |input: ParseStream| -> syn::Result<(Ident, TokenStream)> {
        let key = input.call(Ident::parse_any)?;
        if !input.peek(Token![:]) || input.peek(Token![::]) {
            return Err(syn::Error::new(
                key.span(),
                format!("expected `{key}: value`"),
            ));
        }
        input.parse::<Token![:]>()?;
        Ok((key, input.parse()?))
    };
    let (key, value) = match head.parse2(entry) {
        Ok(kv) => kv,
        Err(e) => {
            errs.syn(e);
            return None;
        }
    };
    let name = key.to_string();
    if KEYS.contains(&name.as_str()) && !allowed.contains(&name.as_str()) {
        errs.spanned_help(
            &key,
            format!("`{name}:` is not allowed in the other side of a join"),
            format!(
                "this side takes {}; the query's own keys (`group_by:`, `aggregate:`, ...) apply after the join",
                allowed.iter().map(|k| format!("`{k}:`")).collect::<Vec<_>>().join(", ")
            ),
        );
        return None;
    }
    if !KEYS.contains(&name.as_str()) {
        let help = match name.as_str() {
            "format" => "the format is an option of the source or sink: `files(path = \"...\", format = json)`".to_string(),
            "window" => "windows are grouping keys: `group_by: [window(event_ts, \"1 minute\")]`".to_string(),
            "session_window" => "session windows are grouping keys: `group_by: [session_window(event_ts, \"5 minutes\"), user]`".to_string(),
            _ => suggestion_help(&name, KEYS, "keys"),
        };
        errs.spanned_help(&key, format!("unknown key `{name}`"), help);
        return None;
    }
    if seen.contains(&name) {
        errs.spanned(
            &key,
            format!("`{name}:` is given twice; each key may appear once"),
        );
        return None;
    }
    seen.push(name.clone());
    if value.is_empty() {
        errs.spanned(&key, format!("`{name}:` needs a value"));
        return Some(name);
    }
    let res: syn::Result<()> = match name.as_str() {
        "source" => parse_source(value, errs).map(|s| q.source = s),
        "sink" => parse_sink(value, errs).map(|s| q.sink = s),
        "late_rows" => {
            q.late_rows_key = Some(key.clone());
            parse_sink(value, errs).map(|s| q.late_rows = s)
        }
        "schema" => {
            q.schema_key = Some(key.clone());
            (|i: ParseStream| parse_schema(i, errs))
                .parse2(value)
                .map(|s| q.schema = Some(s))
        }
        "filter" => syn::parse2::<Expr>(value).map(|e| q.filter = Some(e)),
        "select" => parse_select.parse2(value).map(|items| {
            q.select = Some(SelectDecl {
                key: key.clone(),
                items,
            })
        }),
        "with_column" => parse_with_column.parse2(value).map(|items| {
            q.with_column = Some(SelectDecl {
                key: key.clone(),
                items,
            })
        }),
        "watermark" => (|i: ParseStream| parse_watermark(i, &key))
            .parse2(value)
            .map(|w| q.watermark = Some(w)),
        "join" => (|i: ParseStream| parse_join(i, &key, errs))
            .parse2(value)
            .map(|j| q.join = j.map(Box::new)),
        "drop_duplicates" | "drop_duplicates_within_watermark" => {
            (|i: ParseStream| parse_columns(i, &name))
                .parse2(value)
                .map(|columns| {
                    let d = Some(ColumnsDecl {
                        key: key.clone(),
                        columns,
                    });
                    if name == "drop_duplicates" {
                        q.drop_duplicates = d;
                    } else {
                        q.drop_duplicates_within_watermark = d;
                    }
                })
        }
        "order_by" => parse_order_by.parse2(value).map(|keys| {
            q.order_by = Some(OrderByDecl {
                key: key.clone(),
                keys,
            })
        }),
        "limit" => (|i: ParseStream| parse_limit(i, errs))
            .parse2(value)
            .map(|n| {
                q.limit = n.map(|n| LimitDecl {
                    key: key.clone(),
                    n,
                })
            }),
        "group_by" => (|i: ParseStream| parse_group_by(i, errs))
            .parse2(value)
            .map(|keys| {
                q.group_by = Some(GroupByDecl {
                    key: key.clone(),
                    keys,
                })
            }),
        "aggregate" => (|i: ParseStream| parse_aggregate(i, errs))
            .parse2(value)
            .map(|aggs| {
                q.aggregate = Some(AggregateDecl {
                    key: key.clone(),
                    aggs,
                })
            }),
        "output_mode" => (|i: ParseStream| parse_mode(i, errs))
            .parse2(value)
            .map(|m| q.output_mode = m),
        "trigger" => {
            q.trigger_tokens = Some(value.clone());
            (|i: ParseStream| parse_trigger(i, errs))
                .parse2(value)
                .map(|t| q.trigger = t)
        }
        "checkpoint" => (|i: ParseStream| parse_nonempty_str(i, errs, "checkpoint"))
            .parse2(value)
            .map(|s| {
                // A malformed location is reported on its literal; the
                // checkpoint stays declared (no "needs a checkpoint" error).
                if let Some(lit) = &s {
                    check_location(lit, "`checkpoint:`", errs);
                }
                q.checkpoint = s
            }),
        "scale_out" => (|i: ParseStream| parse_nonempty_str(i, errs, "scale_out"))
            .parse2(value)
            .map(|s| q.scale_out = s),
        _ => (|i: ParseStream| parse_nonempty_str(i, errs, "name"))
            .parse2(value)
            .map(|s| q.name = s),
    };
    if let Err(e) = res {
        errs.syn(e);
    }
    Some(name)
}

/// The keys of a join's `stream: { ... }` block.
const STREAM_SIDE_KEYS: &[&str] = &[
    "source",
    "schema",
    "filter",
    "select",
    "with_column",
    "watermark",
];

/// The keys of a join's `table: { ... }` block (plus `refresh_every:`).
const TABLE_SIDE_KEYS: &[&str] = &["source", "schema"];

/// The keys of `join: { ... }`.
const JOIN_KEYS: &[&str] = &["how", "stream", "table", "on", "using"];

/// `{ how: left_outer, stream: { ... } | table: { ... }, on: expr | using: [cols] }`.
/// Returns `None` (with the errors pushed) when the join is unusable.
fn parse_join(input: ParseStream, key: &Ident, errs: &mut Errors) -> syn::Result<Option<JoinDecl>> {
    let content;
    syn::braced!(content in input);
    let body: TokenStream = content.parse()?;
    let before = errs.len();
    let mut how = (JoinType::Inner, None);
    let mut side: Option<(Ident, QueryDecl, bool)> = None;
    let mut refresh_every = None;
    let mut on = None;
    let mut using = None;
    let mut seen: Vec<String> = vec![];
    for entry in split_commas(body) {
        let head = |input: ParseStream| -> syn::Result<(Ident, TokenStream)> {
            let k = input.call(Ident::parse_any)?;
            if !input.peek(Token![:]) || input.peek(Token![::]) {
                return Err(syn::Error::new(k.span(), format!("expected `{k}: value`")));
            }
            input.parse::<Token![:]>()?;
            Ok((k, input.parse()?))
        };
        let (k, value) = match head.parse2(entry) {
            Ok(kv) => kv,
            Err(e) => {
                errs.syn(e);
                continue;
            }
        };
        let name = k.to_string();
        if !JOIN_KEYS.contains(&name.as_str()) {
            errs.spanned_help(
                &k,
                format!("unknown key `{name}` in `join:`"),
                suggestion_help(&name, JOIN_KEYS, "keys of `join:`"),
            );
            continue;
        }
        if seen.contains(&name) || (name == "table" || name == "stream") && side.is_some() {
            errs.spanned(
                &k,
                format!("`{name}:` is given twice; a join has one other side"),
            );
            continue;
        }
        seen.push(name.clone());
        if value.is_empty() {
            errs.spanned(&k, format!("`{name}:` needs a value"));
            continue;
        }
        let res: syn::Result<()> = match name.as_str() {
            "how" => {
                syn::parse2::<Ident>(value).map(|i| match JOIN_TYPES.iter().find(|(n, _)| i == n) {
                    Some((_, t)) => how = (*t, Some(i)),
                    None => {
                        let names: Vec<&str> = JOIN_TYPES.iter().map(|(n, _)| *n).collect();
                        errs.spanned_help(
                            &i,
                            format!("unknown join type `{i}`"),
                            suggestion_help(&i.to_string(), &names, "join types"),
                        );
                    }
                })
            }
            "stream" | "table" => {
                let table = name == "table";
                (|i: ParseStream| {
                    let c;
                    syn::braced!(c in i);
                    c.parse::<TokenStream>()
                })
                .parse2(value)
                .map(|body| {
                    let mut q = QueryDecl::empty(k.clone());
                    let mut side_seen = vec![];
                    let allowed = if table { TABLE_SIDE_KEYS } else { STREAM_SIDE_KEYS };
                    for e in split_commas(body) {
                        if table {
                            if let Some(r) = refresh_entry(&e, errs) {
                                refresh_every = r;
                                continue;
                            }
                            if let Some(TokenTree::Ident(k)) = e.clone().into_iter().next() {
                                let kn = k.to_string();
                                if STREAM_SIDE_KEYS.contains(&kn.as_str()) && !allowed.contains(&kn.as_str()) {
                                    let msg = if kn == "watermark" {
                                        "a static table has no event time, so no `watermark:`".to_string()
                                    } else {
                                        format!("`{kn}:` is not supported on a static table; it is joined as its source gives it")
                                    };
                                    errs.spanned_help(
                                        &k,
                                        msg,
                                        "a table takes `source:`, `schema:` and `refresh_every:`",
                                    );
                                    q.incomplete = true;
                                    continue;
                                }
                            }
                        }
                        let before = errs.len();
                        parse_entry(&mut q, e, &mut side_seen, allowed, errs);
                        if errs.len() > before {
                            q.incomplete = true;
                        }
                    }
                    if q.source.is_none() && !side_seen.iter().any(|s| s == "source") {
                        errs.spanned_help(
                            &k,
                            format!("the joined {name} has no `source:`"),
                            if table {
                                "add e.g. `source: files(path = \"data/pages\", format = csv)` or `source: memory`"
                            } else {
                                "add e.g. `source: memory` or `source: files(path = \"data/clicks\", format = json)`"
                            },
                        );
                        q.incomplete = true;
                    }
                    side = Some((k.clone(), q, table));
                })
            }
            "on" => syn::parse2::<Expr>(value).map(|e| on = Some(e)),
            _ => (|i: ParseStream| parse_columns(i, "using"))
                .parse2(value)
                .map(|columns| {
                    using = Some(ColumnsDecl {
                        key: k.clone(),
                        columns,
                    })
                }),
        };
        if let Err(e) = res {
            errs.syn(e);
        }
    }
    if side.is_none() {
        errs.spanned_help(
            key,
            "`join:` needs the other side",
            "add `stream: { source: ..., schema: ... }` (a stream-stream join) or `table: { source: ..., schema: ... }` (a stream-static join)",
        );
    }
    match (&on, &using) {
        (None, None) => errs.spanned_help(
            key,
            "`join:` needs a condition",
            "add `on: a == b` (any boolean expression over both sides) or `using: [column]` (columns both sides have)",
        ),
        (Some(e), Some(_)) => errs.spanned_help(
            e,
            "a join takes `on:` or `using:`, not both",
            "put every condition in `on:`",
        ),
        _ => {}
    }
    let Some((_, side, table)) = side else {
        return Ok(None);
    };
    if errs.len() > before {
        return Ok(None);
    }
    Ok(Some(JoinDecl {
        key: key.clone(),
        how: how.0,
        how_ident: how.1,
        side,
        table,
        refresh_every,
        on,
        using,
    }))
}

/// `refresh_every: "10 minutes"` in a table block: `Some(parsed)` when the
/// entry is that key (`Some(None)` when its value is bad), else `None`.
fn refresh_entry(entry: &TokenStream, errs: &mut Errors) -> Option<Option<(LitStr, u64)>> {
    let mut it = entry.clone().into_iter();
    match it.next() {
        Some(TokenTree::Ident(i)) if i == "refresh_every" => {}
        _ => return None,
    }
    let rest: TokenStream = it.collect();
    let parsed = (|i: ParseStream| {
        i.parse::<Token![:]>()?;
        i.parse::<LitStr>()
    })
    .parse2(rest);
    Some(match parsed {
        Ok(lit) => match parse_positive_duration_ms(&lit.value()) {
            Ok(ms) => Some((lit, ms as u64)),
            Err(e) => {
                errs.spanned(&lit, e.to_string());
                None
            }
        },
        Err(e) => {
            errs.syn(syn::Error::new(
                e.span(),
                "`refresh_every:` takes a duration, e.g. `refresh_every: \"10 minutes\"`",
            ));
            None
        }
    })
}

fn parse_nonempty_str(
    input: ParseStream,
    errs: &mut Errors,
    key: &str,
) -> syn::Result<Option<LitStr>> {
    let s: LitStr = input
        .parse()
        .map_err(|e| syn::Error::new(e.span(), format!("`{key}:` takes a string literal")))?;
    if s.value().trim().is_empty() {
        errs.spanned(&s, format!("`{key}:` must not be empty"));
        return Ok(None);
    }
    Ok(Some(s))
}

/// `Name { field: Type, ... }`.
fn parse_schema(input: ParseStream, errs: &mut Errors) -> syn::Result<SchemaDecl> {
    let ident: Ident = input.parse()?;
    let content;
    syn::braced!(content in input);
    let raw = content.parse_terminated(syn::Field::parse_named, Token![,])?;
    if raw.is_empty() {
        errs.spanned(
            &ident,
            "the schema has no fields; declare at least one, e.g. `Click { page: String }`",
        );
    }
    let mut fields: Vec<SchemaField> = vec![];
    for f in raw {
        let fident = f.ident.clone().expect("named field");
        let name = fident.unraw().to_string();
        let mut docs = vec![];
        for a in f.attrs {
            if a.path().is_ident("doc") {
                docs.push(a);
            } else {
                errs.spanned(&a, "only doc comments (`///`) are allowed on schema fields");
            }
        }
        if fields.iter().any(|g| g.name == name) {
            errs.spanned(&fident, format!("the schema has two fields named `{name}`"));
            continue;
        }
        match parse_rust_type(&f.ty) {
            Ok(ty) => fields.push(SchemaField {
                docs,
                ident: fident,
                name,
                ty,
            }),
            Err(msg) => errs.spanned(&f.ty, msg),
        }
    }
    Ok(SchemaDecl { ident, fields })
}

/// `{ column, name: expr, ... }`.
fn parse_select(input: ParseStream) -> syn::Result<Vec<SelectItemDecl>> {
    parse_items(input, "select")
}

/// The items of `select:` or `with_column:`.
fn parse_items(input: ParseStream, key: &str) -> syn::Result<Vec<SelectItemDecl>> {
    let content;
    let braces = syn::braced!(content in input);
    let mut items = vec![];
    while !content.is_empty() {
        if !content.peek(Ident) {
            return Err(content.error("a select item is a column or `name: expression`"));
        }
        let alias: Ident = content.parse()?;
        let expr = if content.peek(Token![:]) && !content.peek(Token![::]) {
            content.parse::<Token![:]>()?;
            Some(content.parse::<Expr>()?)
        } else {
            None
        };
        if !content.is_empty() {
            if !content.peek(Token![,]) {
                return Err(
                    content.error("expected `,`; to compute a column, name it: `name: expression`")
                );
            }
            content.parse::<Token![,]>()?;
        }
        items.push(SelectItemDecl { alias, expr });
    }
    if items.is_empty() {
        return Err(syn::Error::new(
            braces.span.join(),
            format!("`{key}:` needs at least one column"),
        ));
    }
    Ok(items)
}

/// `{ name: expr, ... }`: like a select, but every item computes a column
/// (added, or replacing the column of that name) and the others stay.
fn parse_with_column(input: ParseStream) -> syn::Result<Vec<SelectItemDecl>> {
    let items = parse_items(input, "with_column")?;
    for item in &items {
        if item.expr.is_none() {
            let a = &item.alias;
            return Err(syn::Error::new(
                a.span(),
                format!("`with_column:` computes columns: write `{a}: expression`; the other columns stay as they are"),
            ));
        }
    }
    Ok(items)
}

/// `[column, ...]`, at least one.
fn parse_columns(input: ParseStream, key: &str) -> syn::Result<Vec<Ident>> {
    let content;
    let brackets = syn::bracketed!(content in input);
    let cols = Punctuated::<Ident, Token![,]>::parse_terminated(&content)?;
    if cols.is_empty() {
        return Err(syn::Error::new(
            brackets.span.join(),
            format!("`{key}:` needs at least one column, e.g. `{key}: [id]`"),
        ));
    }
    Ok(cols.into_iter().collect())
}

/// `[column, column desc, column asc, ...]`.
fn parse_order_by(input: ParseStream) -> syn::Result<Vec<(Ident, bool)>> {
    let content;
    let brackets = syn::bracketed!(content in input);
    let keys = Punctuated::<(Ident, bool), Token![,]>::parse_terminated_with(&content, |i| {
        let col: Ident = i.parse()?;
        let desc = if i.peek(Ident) {
            let dir: Ident = i.parse()?;
            match dir.to_string().as_str() {
                "desc" => true,
                "asc" => false,
                _ => {
                    return Err(syn::Error::new(
                        dir.span(),
                        format!("expected `asc` or `desc` after `{col}`, or `,`"),
                    ))
                }
            }
        } else {
            false
        };
        Ok((col, desc))
    })?;
    if keys.is_empty() {
        return Err(syn::Error::new(
            brackets.span.join(),
            "`order_by:` needs at least one column, e.g. `order_by: [n desc]`",
        ));
    }
    Ok(keys.into_iter().collect())
}

/// `N`, a whole number.
fn parse_limit(input: ParseStream, errs: &mut Errors) -> syn::Result<Option<u64>> {
    let lit: syn::LitInt = input.parse().map_err(|e| {
        syn::Error::new(e.span(), "`limit:` takes a whole number, e.g. `limit: 10`")
    })?;
    match lit.base10_parse::<u64>() {
        Ok(n) => Ok(Some(n)),
        Err(_) => {
            errs.spanned(&lit, "`limit:` takes a whole number, e.g. `limit: 10`");
            Ok(None)
        }
    }
}

/// `column delay "duration"`.
fn parse_watermark(input: ParseStream, key: &Ident) -> syn::Result<WatermarkDecl> {
    let column: Ident = input.parse()?;
    input.parse::<kw::delay>().map_err(|e| {
        syn::Error::new(
            e.span(),
            format!("expected `delay`, as in `watermark: {column} delay \"10 minutes\"`"),
        )
    })?;
    let delay: LitStr = input.parse().map_err(|e| {
        syn::Error::new(
            e.span(),
            "expected the delay as a string, e.g. \"10 minutes\"",
        )
    })?;
    Ok(WatermarkDecl {
        key: key.clone(),
        column,
        delay,
    })
}

/// `[window(col, "size"[, "slide"]), session_window(col, "gap"), column, ...]`.
fn parse_group_by(input: ParseStream, errs: &mut Errors) -> syn::Result<Vec<KeyDecl>> {
    let content;
    let brackets = syn::bracketed!(content in input);
    let mut keys = vec![];
    if content.is_empty() {
        return Err(syn::Error::new(
            brackets.span.join(),
            "`group_by:` needs at least one key; leave it out to aggregate the whole stream",
        ));
    }
    while !content.is_empty() {
        let ident: Ident = content.parse()?;
        if content.peek(syn::token::Paren) {
            let args;
            let parens = syn::parenthesized!(args in content);
            let call = {
                let mut t = ident.to_token_stream();
                parens.surround(&mut t, |t| t.extend(args.fork().parse::<TokenStream>()));
                t
            };
            if ident == "window" {
                let column: Ident = args.parse()?;
                args.parse::<Token![,]>()?;
                let size: LitStr = args.parse()?;
                let slide = if args.peek(Token![,]) && args.peek2(LitStr) {
                    args.parse::<Token![,]>()?;
                    Some(args.parse::<LitStr>()?)
                } else {
                    None
                };
                if args.peek(Token![,]) {
                    args.parse::<Token![,]>()?;
                }
                if !args.is_empty() {
                    return Err(args.error(
                        "window takes (column, \"size\") or (column, \"size\", \"slide\")",
                    ));
                }
                keys.push(KeyDecl::Window {
                    tokens: call,
                    column,
                    size,
                    slide,
                });
            } else if ident == "session_window" {
                keys.push(parse_session_window(&args, call)?);
            } else {
                errs.spanned_help(
                    &ident,
                    format!("`{ident}(...)` cannot be a grouping key"),
                    "group_by takes columns, window(column, size), window(column, size, slide) and session_window(column, gap); compute other keys in `select:`",
                );
                let _: TokenStream = args.parse()?;
            }
        } else {
            keys.push(KeyDecl::Column(ident));
        }
        if !content.is_empty() {
            content.parse::<Token![,]>()?;
        }
    }
    Ok(keys)
}

/// The arguments of `session_window(column, "gap")`; `call` is the whole call.
fn parse_session_window(args: ParseStream, call: TokenStream) -> syn::Result<KeyDecl> {
    const USAGE: &str =
        "session_window takes (column, \"gap\"), e.g. session_window(event_ts, \"5 minutes\")";
    let column: Ident = args.parse().map_err(|e| syn::Error::new(e.span(), USAGE))?;
    args.parse::<Token![,]>()
        .map_err(|e| syn::Error::new(e.span(), USAGE))?;
    let gap: LitStr = args.parse().map_err(|e| {
        syn::Error::new(
            e.span(),
            "expected the session gap as a string, e.g. \"5 minutes\"",
        )
    })?;
    if args.peek(Token![,]) {
        args.parse::<Token![,]>()?;
    }
    if !args.is_empty() {
        return Err(args.error(USAGE));
    }
    Ok(KeyDecl::Session {
        tokens: call,
        column,
        gap,
    })
}

/// `{ name: func(column), ... }`.
fn parse_aggregate(input: ParseStream, errs: &mut Errors) -> syn::Result<Vec<AggDecl>> {
    let content;
    let braces = syn::braced!(content in input);
    let mut aggs = vec![];
    let entries =
        Punctuated::<(Ident, Ident, TokenStream, TokenStream), Token![,]>::parse_terminated_with(
            &content,
            |i| {
                let alias: Ident = i.parse()?;
                i.parse::<Token![:]>().map_err(|e| {
                    syn::Error::new(e.span(), format!("expected `:`, as in `{alias}: count()`"))
                })?;
                let func: Ident = i.parse()?;
                let args;
                let parens = syn::parenthesized!(args in i);
                let args: TokenStream = args.parse()?;
                let mut call = func.to_token_stream();
                parens.surround(&mut call, |t| t.extend(args.clone()));
                Ok((alias, func, args, call))
            },
        )?;
    if entries.is_empty() {
        return Err(syn::Error::new(
            braces.span.join(),
            "`aggregate:` needs at least one aggregate, e.g. `{ n: count() }`",
        ));
    }
    for (alias, func, args, call) in entries {
        let name = func.to_string();
        let Some(def) = aggregates::lookup(&name) else {
            let names: Vec<&str> = aggregates::AGGREGATES.iter().map(|d| d.name).collect();
            errs.spanned_help(
                &func,
                format!("unknown aggregate function `{name}`"),
                suggestion_help(&name, &names, "aggregate functions"),
            );
            continue;
        };
        let (arg, lit) = match parse_agg_args.parse2(args) {
            Ok(a) => a,
            Err(e) => {
                errs.syn(e);
                continue;
            }
        };
        if arg.is_none() && !def.takes_star {
            errs.spanned_help(
                &call,
                format!("`{name}` needs a column"),
                format!("write `{alias}: {name}(column)`"),
            );
            continue;
        }
        let Some(param) = agg_param(def, &name, lit.as_ref(), errs) else {
            continue;
        };
        aggs.push(AggDecl {
            alias,
            kind: (def.make)(param),
            arg,
            call,
        });
    }
    Ok(aggs)
}

/// `()`, `(*)`, `(column)` or `(column, literal)`.
fn parse_agg_args(input: ParseStream) -> syn::Result<(Option<Ident>, Option<syn::Lit>)> {
    const ONE_COLUMN: &str = "aggregates take one column; compute expressions in `select:` first";
    if input.is_empty() {
        return Ok((None, None));
    }
    if input.peek(Token![*]) {
        input.parse::<Token![*]>()?;
        return Ok((None, None));
    }
    let col: Ident = input
        .parse()
        .map_err(|e| syn::Error::new(e.span(), ONE_COLUMN))?;
    let mut lit = None;
    if input.peek(Token![,]) && input.peek2(syn::Lit) {
        input.parse::<Token![,]>()?;
        lit = Some(input.parse::<syn::Lit>()?);
    }
    if input.peek(Token![,]) {
        input.parse::<Token![,]>()?;
    }
    if !input.is_empty() {
        return Err(input.error(ONE_COLUMN));
    }
    Ok((Some(col), lit))
}

/// The second argument of an aggregate, checked against what `def` takes;
/// `None` after reporting a mistake.
fn agg_param(
    def: &AggregateDef,
    name: &str,
    lit: Option<&syn::Lit>,
    errs: &mut Errors,
) -> Option<Arg> {
    let Some(lit) = lit else {
        return Some(Arg::None);
    };
    match (def.param, lit) {
        (Param::Rsd, syn::Lit::Float(f)) => {
            let v = f.base10_parse::<f64>().ok()?;
            match Rsd::new(v) {
                Ok(r) => Some(Arg::Rsd(r)),
                Err(e) => {
                    errs.spanned_help(
                        lit,
                        e,
                        "the default 0.05 keeps 512 registers per group; 0.01 keeps 16384 (16 KiB)",
                    );
                    None
                }
            }
        }
        (Param::IgnoreNulls, syn::Lit::Bool(b)) => Some(Arg::IgnoreNulls(b.value)),
        (Param::None, _) => {
            errs.spanned_help(
                lit,
                format!("`{name}` takes one column"),
                format!("write `{}`", def.usage()),
            );
            None
        }
        (Param::Rsd, _) => {
            errs.spanned_help(
                lit,
                format!("`{name}`'s second argument is the relative standard deviation, a float"),
                format!("write e.g. `{name}(column, 0.01)`; leave it out for Spark's default 0.05"),
            );
            None
        }
        (Param::IgnoreNulls, _) => {
            errs.spanned_help(
                lit,
                format!("`{name}`'s second argument is ignoreNulls, `true` or `false`"),
                format!("write `{name}(column, true)` to skip nulls; leave it out to count them as Spark does"),
            );
            None
        }
    }
}

fn parse_mode(input: ParseStream, errs: &mut Errors) -> syn::Result<Option<ModeDecl>> {
    let ident: Ident = input.parse()?;
    let mode = match ident.to_string().as_str() {
        "append" => OutputMode::Append,
        "update" => OutputMode::Update,
        "complete" => OutputMode::Complete,
        other => {
            errs.spanned_help(
                &ident,
                format!("unknown output mode `{other}`"),
                suggestion_help(other, &["append", "update", "complete"], "output modes"),
            );
            return Ok(None);
        }
    };
    Ok(Some(ModeDecl { ident, mode }))
}

fn parse_trigger(input: ParseStream, errs: &mut Errors) -> syn::Result<Option<TriggerDecl>> {
    let ident: Ident = input.parse()?;
    let t = match ident.to_string().as_str() {
        "processing_time" => {
            let content;
            syn::parenthesized!(content in input);
            let lit: LitStr = content.parse()?;
            match parse_positive_duration_ms(&lit.value()) {
                Ok(ms) => TriggerDecl::ProcessingTime { lit, ms: ms as u64 },
                Err(e) => {
                    errs.spanned_help(
                        &lit,
                        format!("invalid trigger interval \"{}\": {e}", lit.value()),
                        "write a positive duration like \"10 seconds\"; leave `trigger:` out to run micro-batches as soon as possible",
                    );
                    return Ok(None);
                }
            }
        }
        "continuous" => {
            let content;
            syn::parenthesized!(content in input);
            let lit: LitStr = content.parse()?;
            match parse_positive_duration_ms(&lit.value()) {
                Ok(ms) => TriggerDecl::Continuous { lit, ms: ms as u64 },
                Err(e) => {
                    errs.spanned_help(
                        &lit,
                        format!("invalid checkpoint interval \"{}\": {e}", lit.value()),
                        "write a positive duration like \"1 second\"",
                    );
                    return Ok(None);
                }
            }
        }
        "available_now" => TriggerDecl::AvailableNow,
        "once" => TriggerDecl::Once,
        other => {
            errs.spanned_help(
                &ident,
                format!("unknown trigger `{other}`"),
                "triggers: processing_time(\"1 minute\"), available_now, once, continuous(\"1 second\"); leave `trigger:` out to run micro-batches as soon as possible",
            );
            return Ok(None);
        }
    };
    if !input.is_empty() {
        return Err(input.error("unexpected tokens after the trigger"));
    }
    Ok(Some(t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;
    use weir_plan::AggFn;

    fn parse(t: TokenStream) -> (Option<QueryDecl>, Vec<String>) {
        let mut errs = Errors::new();
        let q = parse_query(t, &mut errs);
        (
            q,
            errs.diagnostics()
                .iter()
                .map(|d| format!("{}: {}", d.at, d.message))
                .collect(),
        )
    }

    #[test]
    fn parses_a_full_declaration() {
        let (q, e) = parse(quote! {
            /// Page views per minute.
            query PageViews {
                source: files(path = "data/clicks", format = json, max_files_per_trigger = 10),
                schema: Click { page: String, event_ts: Timestamp, user: Option<String>, n: i64 },
                filter: n > 0 && page != "x",
                select: { page, event_ts, n2: n * 2 },
                watermark: event_ts delay "2 minutes",
                group_by: [window(event_ts, "1 minute", "30 seconds"), page],
                aggregate: { views: count(), total: sum(n2), all: count(*) },
                output_mode: update,
                trigger: processing_time("1 minute"),
                sink: console(truncate = false, num_rows = 20),
                checkpoint: "chk/page_views",
                name: "page_views_1m",
            }
        });
        assert!(e.is_empty(), "{e:?}");
        let q = q.unwrap();
        assert_eq!(q.docs.len(), 1);
        assert_eq!(q.schema.as_ref().unwrap().fields.len(), 4);
        assert_eq!(q.select.as_ref().unwrap().items.len(), 3);
        let keys = &q.group_by.as_ref().unwrap().keys;
        assert!(
            matches!(&keys[0], KeyDecl::Window { slide: Some(s), .. } if s.value() == "30 seconds")
        );
        let aggs = &q.aggregate.as_ref().unwrap().aggs;
        assert_eq!(
            aggs.iter().map(|a| a.kind).collect::<Vec<_>>(),
            [AggFn::Count, AggFn::Sum, AggFn::Count]
        );
        assert!(aggs[2].arg.is_none());
        assert_eq!(aggs[1].call.to_string(), "sum (n2)");
        assert!(matches!(
            q.trigger,
            Some(TriggerDecl::ProcessingTime { ms: 60_000, .. })
        ));
        assert_eq!(q.output_mode.unwrap().mode, OutputMode::Update);
        assert!(!q.incomplete);
    }

    #[test]
    fn parses_session_windows() {
        let (q, e) = parse(quote! {
            query Q {
                source: memory,
                schema: Click { user: String, ts: Timestamp },
                group_by: [session_window(ts, "5 minutes",), user],
                aggregate: { n: count() },
                sink: console,
            }
        });
        assert!(e.is_empty(), "{e:?}");
        let keys = &q.unwrap().group_by.unwrap().keys;
        assert!(matches!(
            &keys[0],
            KeyDecl::Session { column, gap, .. } if column == "ts" && gap.value() == "5 minutes"
        ));
        assert!(matches!(&keys[1], KeyDecl::Column(c) if c == "user"));

        for (key, message) in [
            (
                quote!(session_window(ts)),
                "session_window takes (column, \"gap\"), e.g. session_window(event_ts, \"5 minutes\")",
            ),
            (
                quote!(session_window(ts, 5)),
                "expected the session gap as a string, e.g. \"5 minutes\"",
            ),
            (
                quote!(session_window(ts, "5 minutes", "1 minute")),
                "session_window takes (column, \"gap\"), e.g. session_window(event_ts, \"5 minutes\")",
            ),
        ] {
            let (q, e) = parse(quote! {
                query Q {
                    source: memory,
                    schema: Click { user: String, ts: Timestamp },
                    group_by: [#key, user],
                    aggregate: { n: count() },
                    sink: console,
                }
            });
            assert_eq!(e, [format!(": {message}")], "{key}");
            assert!(q.unwrap().incomplete);
        }
    }

    #[test]
    fn reports_every_grammar_mistake() {
        let (q, e) = parse(quote! {
            query Q {
                source: rate(),
                fliter: value > 1,
                output_mode: upsert,
                trigger: processing_time("0 seconds"),
                aggregate: { n: cnt(), s: sum() },
                source: rate(),
            }
        });
        assert!(q.unwrap().incomplete);
        assert_eq!(
            e,
            [
                "fliter: unknown key `fliter`\nhelp: did you mean `filter`? (keys: source, schema, filter, select, with_column, watermark, join, drop_duplicates, drop_duplicates_within_watermark, group_by, aggregate, order_by, limit, output_mode, trigger, sink, late_rows, checkpoint, name, scale_out)",
                "upsert: unknown output mode `upsert`\nhelp: output modes: append, update, complete",
                "\"0 seconds\": invalid trigger interval \"0 seconds\": the duration must be greater than zero\nhelp: write a positive duration like \"10 seconds\"; leave `trigger:` out to run micro-batches as soon as possible",
                "cnt: unknown aggregate function `cnt`\nhelp: did you mean `count`? (aggregate functions: count, sum, min, max, avg, count_distinct, approx_count_distinct, first, last, stddev_samp, stddev_pop, var_samp, var_pop, collect_list, collect_set)",
                "sum (): `sum` needs a column\nhelp: write `s: sum(column)`",
                "source: `source:` is given twice; each key may appear once",
                "Q: query `Q` has no `sink:`\nhelp: add e.g. `sink: console(truncate = false)`",
            ]
        );
    }

    #[test]
    fn schema_and_select_mistakes() {
        let (_, e) = parse(quote! {
            query Q {
                source: memory,
                schema: S { a: u32, b: String, b: i64, #[serde(skip)] c: bool },
                select: { a, b c },
                sink: console,
            }
        });
        assert_eq!(e.len(), 4, "{e:?}");
        assert!(e[0].starts_with("u32: unsupported column type `u32`"));
        assert!(e[1].starts_with("b: the schema has two fields named `b`"));
        assert!(e[2].contains("only doc comments"));
        assert!(e[3].contains("expected `,`; to compute a column, name it"));
    }

    #[test]
    fn parses_the_operations_after_select() {
        let (q, e) = parse(quote! {
            query Q {
                source: memory,
                schema: S { id: String, ts: Timestamp, n: i64 },
                with_column: { n2: n * 2, id: lower(id) },
                watermark: ts delay "1 minute",
                drop_duplicates: [id],
                drop_duplicates_within_watermark: [id, n],
                group_by: [id],
                aggregate: { total: sum(n2) },
                order_by: [total desc, id asc, n],
                limit: 10,
                output_mode: complete,
                trigger: continuous("1 second"),
                sink: kafka(bootstrap_servers = "localhost:9092", topic = "t"),
            }
        });
        assert!(e.is_empty(), "{e:?}");
        let q = q.unwrap();
        assert_eq!(q.with_column.as_ref().unwrap().items.len(), 2);
        assert_eq!(q.drop_duplicates.as_ref().unwrap().columns.len(), 1);
        assert_eq!(
            q.drop_duplicates_within_watermark
                .as_ref()
                .unwrap()
                .columns
                .len(),
            2
        );
        let keys: Vec<(String, bool)> = q
            .order_by
            .as_ref()
            .unwrap()
            .keys
            .iter()
            .map(|(c, d)| (c.to_string(), *d))
            .collect();
        assert_eq!(
            keys,
            [
                ("total".to_string(), true),
                ("id".to_string(), false),
                ("n".to_string(), false)
            ]
        );
        assert_eq!(q.limit.as_ref().unwrap().n, 10);
        assert!(matches!(
            q.trigger,
            Some(TriggerDecl::Continuous { ms: 1000, .. })
        ));
        assert_eq!(
            q.trigger_tokens.unwrap().to_string(),
            "continuous (\"1 second\")"
        );
    }

    #[test]
    fn operation_mistakes() {
        let (q, e) = parse(quote! {
            query Q {
                source: memory,
                schema: S { id: String, n: i64 },
                with_column: { id },
                drop_duplicates: [],
                order_by: [n up],
                limit: "10",
                trigger: continuous("0 seconds"),
                sink: console,
            }
        });
        assert!(q.unwrap().incomplete);
        assert_eq!(
            e,
            [
                ": `with_column:` computes columns: write `id: expression`; the other columns stay as they are",
                ": `drop_duplicates:` needs at least one column, e.g. `drop_duplicates: [id]`",
                ": expected `asc` or `desc` after `n`, or `,`",
                ": `limit:` takes a whole number, e.g. `limit: 10`",
                "\"0 seconds\": invalid checkpoint interval \"0 seconds\": the duration must be greater than zero\nhelp: write a positive duration like \"1 second\"",
            ]
        );
    }

    #[test]
    fn checkpoint_is_a_storage_location_checked_at_compile_time() {
        let (q, e) = parse(quote! {
            query Q { source: rate, sink: console, checkpoint: "s3://chk/page_views/" }
        });
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(
            q.unwrap().checkpoint.unwrap().value(),
            "s3://chk/page_views/"
        );
        let (q, e) = parse(quote! {
            query Q { source: rate, sink: console, checkpoint: "s3://Chk_Bucket/q" }
        });
        assert_eq!(
            e,
            ["\"s3://Chk_Bucket/q\": invalid storage location `s3://Chk_Bucket/q` for `checkpoint:`: `Chk_Bucket` is not a valid S3 bucket name (3 to 63 lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit)\nhelp: weir accepts a local path, file:///absolute/path or s3://bucket/prefix"]
        );
        // Still declared: no second "needs a checkpoint" error follows.
        assert!(q.unwrap().checkpoint.is_some());
    }

    #[test]
    fn watermark_needs_delay() {
        let (_, e) = parse(
            quote! { query Q { source: rate, watermark: timestamp "10 seconds", sink: console } },
        );
        assert_eq!(
            e,
            [": expected `delay`, as in `watermark: timestamp delay \"10 minutes\"`"]
        );
    }

    #[test]
    fn frame_errors() {
        let (q, e) = parse(quote! { PageViews { } });
        assert!(q.is_none());
        assert_eq!(e, [": expected `query Name { ... }`"]);
        let (_, e) = parse(quote! { query Q { source = rate, sink: console } });
        assert_eq!(e[0], ": expected `source: value`");
    }
}
