//! A [`StreamPlan`] as Rust code that rebuilds it with struct literals
//! through `::weir::plan`, so `Query::plan()` is the plan the macro checked.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use weir_plan::aggregates::Arg;
use weir_plan::{
    AggFn, GroupKey, JoinType, Op, OutputMode, SinkKind, StreamPlan, TriggerDecl, WatermarkPolicy,
};

use crate::types::data_type_tokens;

/// A `String` literal.
fn string(v: &str) -> TokenStream {
    quote!(::std::string::String::from(#v))
}

/// An expression of the plan: read from its SQL text when the plan is built.
fn expr_tokens(e: &weir_plan::expr::Expr) -> TokenStream {
    let text = e.to_string();
    quote!(::weir::plan::expr::Expr::read(#text))
}

/// A duration of the plan: read from its text when the plan is built.
fn duration_tokens(d: &weir_plan::Duration) -> TokenStream {
    let text = d.text();
    quote!(::weir::plan::Duration::read(#text))
}

fn opt_duration_tokens(d: &Option<weir_plan::Duration>) -> TokenStream {
    match d {
        Some(d) => {
            let d = duration_tokens(d);
            quote!(::std::option::Option::Some(#d))
        }
        None => quote!(::std::option::Option::None),
    }
}

/// An `Option<String>` literal.
fn opt_string(v: &Option<String>) -> TokenStream {
    match v {
        Some(v) => {
            let v = string(v);
            quote!(::std::option::Option::Some(#v))
        }
        None => quote!(::std::option::Option::None),
    }
}

/// The output mode as a path.
pub fn output_mode(m: OutputMode) -> TokenStream {
    match m {
        OutputMode::Append => quote!(::weir::plan::OutputMode::Append),
        OutputMode::Update => quote!(::weir::plan::OutputMode::Update),
        OutputMode::Complete => quote!(::weir::plan::OutputMode::Complete),
    }
}

/// An aggregate function as an expression: its variant (named after the
/// catalogue's Spark name) with its second argument, if it takes one.
pub fn agg_fn(f: AggFn) -> TokenStream {
    let variant = format_ident!("{}", upper_camel(f.name()));
    match f.arg() {
        Arg::None => quote!(::weir::plan::AggFn::#variant),
        Arg::Rsd(r) => {
            let v = r.value();
            quote!(::weir::plan::AggFn::#variant {
                rsd: match ::weir::plan::Rsd::new(#v) {
                    ::std::result::Result::Ok(r) => r,
                    ::std::result::Result::Err(_) => ::weir::plan::Rsd::DEFAULT,
                }
            })
        }
        Arg::IgnoreNulls(b) => quote!(::weir::plan::AggFn::#variant { ignore_nulls: #b }),
    }
}

/// `count_distinct` -> `CountDistinct`.
fn upper_camel(name: &str) -> String {
    name.split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// A join type as a path.
pub fn join_type(j: JoinType) -> TokenStream {
    let v = match j {
        JoinType::Inner => quote!(Inner),
        JoinType::LeftOuter => quote!(LeftOuter),
        JoinType::RightOuter => quote!(RightOuter),
        JoinType::FullOuter => quote!(FullOuter),
        JoinType::LeftSemi => quote!(LeftSemi),
        JoinType::LeftAnti => quote!(LeftAnti),
    };
    quote!(::weir::plan::JoinType::#v)
}

fn key(k: &GroupKey) -> TokenStream {
    match k {
        GroupKey::Window { window, alias } => {
            let (column, expr, size, slide) = (
                opt_string(&window.column),
                opt_string(&window.expr),
                duration_tokens(&window.size),
                opt_duration_tokens(&window.slide),
            );
            let gap = opt_duration_tokens(&window.gap);
            let alias = string(alias);
            quote!(::weir::plan::GroupKey::Window {
                window: ::weir::plan::WindowSpec { column: #column, expr: #expr, size: #size, slide: #slide, gap: #gap },
                alias: #alias,
            })
        }
        GroupKey::Column { column } => {
            let c = string(column);
            quote!(::weir::plan::GroupKey::Column { column: #c })
        }
    }
}

fn op(o: &Op) -> TokenStream {
    match o {
        Op::Filter { predicate } => {
            let p = expr_tokens(predicate);
            quote!(::weir::plan::Op::Filter { predicate: #p })
        }
        Op::Select { columns } => {
            let items = columns.iter().map(|c| {
                let (e, a) = (expr_tokens(&c.expr), string(&c.alias));
                quote!(::weir::plan::SelectItem { expr: #e, alias: #a })
            });
            quote!(::weir::plan::Op::Select {
                columns: ::std::vec![#(#items),*]
            })
        }
        Op::WithColumn { name, expr } => {
            let (n, e) = (string(name), expr_tokens(expr));
            quote!(::weir::plan::Op::WithColumn { name: #n, expr: #e })
        }
        Op::Watermark { column, delay } => {
            let (c, d) = (string(column), duration_tokens(delay));
            quote!(::weir::plan::Op::Watermark { column: #c, delay: #d })
        }
        Op::Aggregate { keys, aggs } => {
            let keys = keys.iter().map(key);
            let aggs = aggs.iter().map(|a| {
                let (f, c, al) = (agg_fn(a.func), string(&a.column), string(&a.alias));
                quote!(::weir::plan::AggSpec { func: #f, column: #c, alias: #al })
            });
            quote!(::weir::plan::Op::Aggregate {
                keys: ::std::vec![#(#keys),*],
                aggs: ::std::vec![#(#aggs),*]
            })
        }
        Op::Dedup {
            columns,
            within_watermark,
        } => {
            let cols = columns.iter().map(|c| string(c));
            quote!(::weir::plan::Op::Dedup { columns: ::std::vec![#(#cols),*], within_watermark: #within_watermark })
        }
        Op::Join {
            right,
            how,
            on,
            using,
        } => {
            let on = match on {
                Some(on) => {
                    let on = expr_tokens(on);
                    quote!(::std::option::Option::Some(#on))
                }
                None => quote!(::std::option::Option::None),
            };
            let (r, h) = (string(right), join_type(*how));
            let using = match using {
                Some(u) => {
                    let u = u.iter().map(|c| string(c));
                    quote!(::std::option::Option::Some(::std::vec![#(#u),*]))
                }
                None => quote!(::std::option::Option::None),
            };
            quote!(::weir::plan::Op::Join { right: #r, how: #h, on: #on, using: #using })
        }
        Op::Sort { by } => {
            let by = by.iter().map(|k| {
                let (c, d) = (string(&k.column), k.desc);
                quote!(::weir::plan::SortKey { column: #c, desc: #d })
            });
            quote!(::weir::plan::Op::Sort {
                by: ::std::vec![#(#by),*]
            })
        }
        Op::Limit { n } => quote!(::weir::plan::Op::Limit { n: #n }),
    }
}

fn sink_kind(k: SinkKind) -> TokenStream {
    match k {
        SinkKind::Console => quote!(Console),
        SinkKind::Memory => quote!(Memory),
        SinkKind::File => quote!(File),
        SinkKind::ForeachBatch => quote!(ForeachBatch),
        SinkKind::Kafka => quote!(Kafka),
        SinkKind::KafkaJson => quote!(KafkaJson),
        SinkKind::Noop => quote!(Noop),
        SinkKind::Other => quote!(Other),
    }
}

fn trigger(t: TriggerDecl) -> TokenStream {
    match t {
        TriggerDecl::Default => quote!(Default),
        TriggerDecl::ProcessingTime(ms) => quote!(ProcessingTime(#ms)),
        TriggerDecl::AvailableNow => quote!(AvailableNow),
        TriggerDecl::Once => quote!(Once),
        TriggerDecl::Continuous(ms) => quote!(Continuous(#ms)),
    }
}

/// An expression of type `::weir::plan::StreamPlan` equal to `plan`
/// (static tables with their schemas; the macro never has their rows).
pub fn plan(plan: &StreamPlan) -> TokenStream {
    let fields = |schema: &[weir_plan::Field]| {
        let fields = schema.iter().map(|f| {
            let (n, t) = (string(&f.name), data_type_tokens(f.dtype));
            quote!(::weir::plan::Field { name: #n, dtype: #t })
        });
        quote!(::std::vec![#(#fields),*])
    };
    let sources = plan.sources.iter().map(|(name, decl)| {
        let (name, schema) = (string(name), fields(&decl.schema));
        quote!(sources.insert(#name, ::weir::plan::SourceDecl { schema: #schema });)
    });
    let statics = plan.statics.iter().map(|(name, decl)| {
        let (name, schema) = (string(name), fields(&decl.schema));
        quote!(statics.insert(#name, ::weir::plan::StaticDecl { schema: #schema, rows: ::std::vec::Vec::new() });)
    });
    let nodes = plan.nodes.iter().map(|n| {
        let (id, input) = (string(&n.id), string(&n.input));
        let ops = n.ops.iter().map(op);
        quote!(::weir::plan::Node { id: #id, input: #input, ops: ::std::vec![#(#ops),*] })
    });
    let result = string(&plan.result);
    let mode = output_mode(plan.output_mode);
    let no_data = plan.conf.no_data_batches;
    let policy = match plan.conf.watermark_policy {
        WatermarkPolicy::Min => quote!(Min),
        WatermarkPolicy::Max => quote!(Max),
    };
    let sink = match &plan.sink {
        Some(d) => {
            let (k, c) = (sink_kind(d.kind), d.checkpoint);
            quote!(::std::option::Option::Some(::weir::plan::SinkDecl {
                kind: ::weir::plan::SinkKind::#k,
                checkpoint: #c,
            }))
        }
        None => quote!(::std::option::Option::None),
    };
    let trig = match plan.trigger {
        Some(t) => {
            let t = trigger(t);
            quote!(::std::option::Option::Some(::weir::plan::TriggerDecl::#t))
        }
        None => quote!(::std::option::Option::None),
    };
    let scale_out = match &plan.scale_out {
        Some(g) => quote!(::std::option::Option::Some(::std::string::String::from(#g))),
        None => quote!(::std::option::Option::None),
    };
    quote! {{
        let mut sources = ::std::collections::BTreeMap::new();
        #(#sources)*
        #[allow(unused_mut)]
        let mut statics = ::std::collections::BTreeMap::new();
        #(#statics)*
        ::weir::plan::StreamPlan {
            sources,
            statics,
            nodes: ::std::vec![#(#nodes),*],
            result: #result,
            output_mode: #mode,
            conf: ::weir::plan::Conf {
                no_data_batches: #no_data,
                watermark_policy: ::weir::plan::WatermarkPolicy::#policy,
            },
            sink: #sink,
            trigger: #trig,
            scale_out: #scale_out,
        }
    }}
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_plan::{DataType, Field};

    #[test]
    fn writes_every_op_as_a_struct_literal() {
        let p = StreamPlan::single(
            "events",
            vec![Field::new("ts", DataType::Timestamp)],
            vec![
                Op::Filter {
                    predicate: "a > 1".into(),
                },
                Op::Watermark {
                    column: "ts".into(),
                    delay: "1 minute".into(),
                },
                Op::Limit { n: 3 },
            ],
            OutputMode::Update,
        );
        let t = plan(&p);
        syn::parse2::<syn::Expr>(t.clone()).unwrap();
        let t = t.to_string();
        assert!(
            t.contains("predicate : :: weir :: plan :: expr :: Expr :: read (\"a > 1\")"),
            "{t}"
        );
        assert!(t.contains(":: weir :: plan :: OutputMode :: Update"));
        assert!(t.contains("n : 3u64"));
        let mut p = p;
        p.sink = Some(weir_plan::SinkDecl {
            kind: SinkKind::File,
            checkpoint: true,
        });
        p.trigger = Some(TriggerDecl::ProcessingTime(5000));
        let t = plan(&p).to_string();
        assert!(
            t.contains("kind : :: weir :: plan :: SinkKind :: File , checkpoint : true"),
            "{t}"
        );
        assert!(
            t.contains(":: weir :: plan :: TriggerDecl :: ProcessingTime (5000u64)"),
            "{t}"
        );
    }
}
