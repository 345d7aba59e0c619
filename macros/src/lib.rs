//! `stream_query!`: a streaming pipeline declared in Rust and checked at
//! compile time.
//!
//! This crate is glue: [`stream_query!`] runs parse (`parse.rs`) → lower to a
//! `weir_plan::StreamPlan` (`lower.rs`) → the plan's streaming rules mapped
//! to the user's tokens (`check.rs`) → code generation (`codegen.rs`). Each
//! step is an ordinary function with unit tests. A valid declaration is
//! then compared with its lock file (`lock.rs`): a change that would break
//! the query's checkpoints is a compile error. Every error of a
//! declaration is reported in one compile; when there is any, the expansion
//! is only `compile_error!`s.
//!
//! See the facade crate `weir` for the grammar and examples.

#![warn(missing_docs)]

mod ast;
mod check;
mod codegen;
mod connectors;
mod errors;
mod explain;
mod expr;
mod lock;
mod lower;
mod parse;
mod plan_tokens;
mod row;
mod types;

use proc_macro2::TokenStream;

/// Declares a streaming query: its source and schema, transformations,
/// watermark, grouping and aggregates, output mode, trigger and sink.
///
/// Expands to the input row struct (named by `schema:`), the result row
/// struct (`<Query>Row`) and the query struct with `NAME`, `EXPLAIN`,
/// `plan()`, `writer()`, `writer_from()`, `start()` and `rows()`.
///
/// (This example is compiled and run as a doctest of the facade crate `weir`,
/// which re-exports this macro; a proc-macro crate cannot run it itself.)
///
/// ```text
/// weir::stream_query! {
///     query RateLab {
///         source: rate(rows_per_second = 5),
///         watermark: timestamp delay "10 seconds",
///         group_by: [window(timestamp, "10 seconds")],
///         aggregate: { n: count() },
///         output_mode: update,
///         sink: console(truncate = false),
///     }
/// }
/// ```
#[proc_macro]
pub fn stream_query(input: proc_macro::TokenStream) -> proc_macro::TokenStream {
    expand(input.into()).into()
}

/// The whole pipeline on token streams (testable without a compiler).
fn expand(input: TokenStream) -> TokenStream {
    let mut errs = errors::Errors::new();
    let Some(q) = parse::parse_query(input, &mut errs) else {
        return errs.into_compile_errors();
    };
    let lowered = lower::lower(&q, &mut errs);
    let Some(l) = lowered else {
        return errs.into_compile_errors();
    };
    if !q.incomplete {
        check::check_plan(&l, &mut errs);
    }
    check::distinct_struct_names(&q, &mut errs);
    let output = lower::output_columns(&l, &mut errs);
    check::sink_columns_exist(&q, &output, &mut errs);
    check::not_supported_yet(&q, &mut errs);
    check::late_rows_can_happen(&q, &l, &mut errs);
    check::scale_out_can_divide(&q, &mut errs);
    if !errs.is_empty() {
        return errs.into_compile_errors();
    }
    // Only a valid declaration is compared with (or written to) its lock file.
    let tracking = lock::check_lock(&q, &l, &mut errs);
    if !errs.is_empty() {
        return errs.into_compile_errors();
    }
    let mut out = codegen::expand(&q, &l, &output);
    out.extend(tracking);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    /// The `EXPLAIN` text of a declaration that must have no errors.
    fn explained(decl: TokenStream) -> String {
        let mut errs = errors::Errors::new();
        let q = parse::parse_query(decl, &mut errs).unwrap();
        let l = lower::lower(&q, &mut errs).unwrap();
        let out = lower::output_columns(&l, &mut errs);
        assert!(errs.is_empty(), "{errs:?}");
        explain::explain(&q, &l, &out)
    }

    /// The lowered plan of a declaration that must have no errors.
    fn explained_plan(decl: TokenStream) -> weir_plan::StreamPlan {
        let mut errs = errors::Errors::new();
        let q = parse::parse_query(decl, &mut errs).unwrap();
        let l = lower::lower(&q, &mut errs).unwrap();
        assert!(errs.is_empty(), "{errs:?}");
        l.plan
    }

    #[test]
    fn expands_a_valid_query_to_items() {
        let out = expand(quote! {
            /// Page views per minute.
            query PageViews {
                source: files(path = "data/clicks", format = json, max_files_per_trigger = 10, latest_first = false),
                schema: Click { page: String, event_ts: Timestamp, user: Option<String>, n: i64 },
                filter: n > 0 && page != "x",
                select: { page, event_ts, n2: n * 2 },
                watermark: event_ts delay "2 minutes",
                group_by: [window(event_ts, "1 minute"), page],
                aggregate: { views: count(), total: sum(n2) },
                output_mode: update,
                trigger: processing_time("1 minute"),
                sink: console(truncate = false, num_rows = 20),
                checkpoint: "chk/page_views",
                name: "page_views_1m",
            }
        });
        let file: syn::File = syn::parse2(out.clone()).expect("the expansion parses as items");
        let names: Vec<String> = file
            .items
            .iter()
            .filter_map(|i| match i {
                syn::Item::Struct(s) => Some(s.ident.to_string()),
                _ => None,
            })
            .collect();
        assert_eq!(names, ["Click", "PageViewsRow", "PageViews"]);
        let text = out.to_string();
        assert!(!text.contains("compile_error"));
        // The plan is emitted once, as the literal the writer builds from.
        assert!(text.contains("\"n > 0 AND page <> 'x'\""), "{text}");
        assert!(text.contains("DataStream :: from_plan"), "{text}");
        assert!(text.contains(":: std :: time :: Duration :: from_millis (60000u64)"));
        assert!(text.contains("pub const NAME : & 'static str = \"page_views_1m\""));
        assert!(text.contains("pub fn start"));
    }

    #[test]
    fn explains_the_plan() {
        let text = explained(quote! {
            query PageViews {
                source: files(path = "data/clicks", format = json, max_files_per_trigger = 10),
                schema: Click { page: String, event_ts: Timestamp, user: Option<String>, n: i64 },
                filter: n > 0 && page != "x",
                select: { page, event_ts, n2: n * 2 },
                watermark: event_ts delay "2 minutes",
                group_by: [window(event_ts, "1 minute"), page],
                aggregate: { views: count(), total: sum(n2) },
                output_mode: update,
                trigger: processing_time("1 minute"),
                sink: console(truncate = false, num_rows = 20),
                checkpoint: "chk/page_views",
            }
        });
        assert_eq!(
            text,
            r#"== Query page_views (PageViews) ==
WriteToStream sink=console, outputMode=Update, trigger=ProcessingTime(60000 ms), checkpoint=set
+- StateStoreSave Aggregate keys=[window(event_ts, "1 minute") AS window, page], functions=[count(*) AS views, sum(n2) AS total]
   +- EventTimeWatermark event_ts, delay "2 minutes"
      +- Project [page, event_ts, n * 2 AS n2]
         +- Filter n > 0 AND page <> 'x'
            +- StreamingRelation click [page: string, event_ts: timestamp, user: string, n: bigint]
== Declared ==
  source     click: files(path = "data/clicks", format = json, max_files_per_trigger = 10)
  schema     page: String, event_ts: Timestamp, user: Option<String>, n: i64
  output     window: Window, page: String, views: i64, total: Option<i64>
  trigger    processing_time("1 minute") = 60000 ms
  sink       console(truncate = false, num_rows = 20)
  checkpoint "chk/page_views""#
        );
        // The plan's part is weir-plan's printer, the text the engine's
        // `explain()` starts with.
        let plan = explained_plan(quote! {
            query PageViews {
                source: files(path = "data/clicks", format = json, max_files_per_trigger = 10),
                schema: Click { page: String, event_ts: Timestamp, user: Option<String>, n: i64 },
                filter: n > 0 && page != "x",
                select: { page, event_ts, n2: n * 2 },
                watermark: event_ts delay "2 minutes",
                group_by: [window(event_ts, "1 minute"), page],
                aggregate: { views: count(), total: sum(n2) },
                output_mode: update,
                trigger: processing_time("1 minute"),
                sink: console(truncate = false, num_rows = 20),
                checkpoint: "chk/page_views",
            }
        })
        .to_string();
        assert!(
            text.contains(&format!("==\n{plan}\n== Declared ==")),
            "{text}"
        );
    }

    #[test]
    fn explains_the_operations_after_select() {
        let text = explained(quote! {
            query Top {
                source: memory,
                schema: Sale { id: String, shop: String, amount: i64, ts: Timestamp },
                with_column: { shop: upper(shop) },
                watermark: ts delay "1 minute",
                drop_duplicates_within_watermark: [id],
                group_by: [shop],
                aggregate: { total: sum(amount) },
                order_by: [total desc, shop],
                limit: 3,
                output_mode: complete,
                sink: memory,
            }
        });
        let ops: Vec<&str> = text.lines().skip(2).take(8).collect();
        assert_eq!(
            ops,
            [
                "+- Limit 3",
                "   +- Sort [total DESC, shop ASC]",
                "      +- StateStoreSave Aggregate keys=[shop], functions=[sum(amount) AS total]",
                "         +- DeduplicateWithinWatermark [id]",
                "            +- EventTimeWatermark ts, delay \"1 minute\"",
                "               +- Project [*, upper(shop) AS shop]",
                "                  +- StreamingRelation sale [id: string, shop: string, amount: bigint, ts: timestamp]",
                "== Declared ==",
            ]
        );
    }

    #[test]
    fn errors_expand_to_compile_errors_only() {
        let out = expand(quote! {
            query Q {
                source: rate(rows_per_second = 5),
                filter: vlaue > 1,
                group_by: [window(timestamp, "10 minits")],
                aggregate: { n: count() },
                sink: console,
            }
        });
        let file: syn::File = syn::parse2(out).unwrap();
        assert_eq!(file.items.len(), 3);
        assert!(file.items.iter().all(|i| matches!(i, syn::Item::Macro(m) if m.mac.path.segments.last().unwrap().ident == "compile_error")));
    }

    /// Every declaration in `ui-tests/pass/` expands without a compile
    /// error (the facade's integration tests then compile and run them).
    #[test]
    fn pass_cases_expand_cleanly() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../ui-tests/pass");
        let mut seen = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let file = syn::parse_file(&std::fs::read_to_string(&path).unwrap()).unwrap();
            for item in file.items {
                let syn::Item::Macro(m) = item else { continue };
                if m.mac.path.segments.last().unwrap().ident != "stream_query" {
                    continue;
                }
                let out = expand(m.mac.tokens.clone()).to_string();
                assert!(!out.contains("compile_error"), "{}: {out}", path.display());
                seen += 1;
            }
        }
        assert!(seen >= 10, "only {seen} declarations found");
    }

    #[test]
    fn expands_and_explains_a_session_window() {
        let decl = quote! {
            query UserSessions {
                source: memory,
                schema: Click { user: String, ts: Timestamp },
                watermark: ts delay "10 minutes",
                group_by: [session_window(ts, "5 minutes"), user],
                aggregate: { clicks: count() },
                sink: memory,
            }
        };
        let text = expand(decl.clone()).to_string();
        assert!(!text.contains("compile_error"), "{text}");
        assert!(
            text.contains("gap : :: std :: option :: Option :: Some (:: weir :: plan :: Duration :: read (\"5 minutes\"))"),
            "{text}"
        );
        assert!(
            text.contains("pub session_window : :: weir :: Window"),
            "{text}"
        );

        let text = explained(decl);
        assert!(
            text.contains(
                "\n+- SessionWindowStateStoreSave Aggregate keys=[session_window(ts, \"5 minutes\") AS session_window, user], functions=[count(*) AS clicks]\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("  output     session_window: Window, user: String, clicks: i64\n"),
            "{text}"
        );
    }

    #[test]
    fn memory_sources_have_no_start() {
        let out = expand(quote! {
            query Sums {
                source: memory,
                schema: Sale { shop: String, amount: i64 },
                group_by: [shop],
                aggregate: { total: sum(amount) },
                output_mode: complete,
                sink: memory,
            }
        })
        .to_string();
        assert!(!out.contains("fn start"));
        assert!(out.contains("fn writer_from"));
        assert!(out.contains(":: weir :: sink :: MemorySink :: new (\"sums\")"));
    }

    #[test]
    fn explain_hides_passwords_in_connection_settings() {
        for (url, shown) in [
            (
                "postgresql://weir:s3cret@db:5432/x",
                "postgresql://weir:***@db:5432/x",
            ),
            (
                "host=db user=weir password=s3cret",
                "host=db user=weir password=***",
            ),
        ] {
            let text = explained(quote! {
                query Totals {
                    source: memory,
                    schema: Sale { shop: String, amount: i64 },
                    group_by: [shop],
                    aggregate: { total: sum(amount) },
                    output_mode: complete,
                    sink: postgres(url = #url, table = "totals"),
                    checkpoint: "chk",
                }
            });
            assert!(text.contains(shown), "{text}");
            assert!(!text.contains("s3cret"), "{text}");
        }
    }
}
