//! `source:` and `sink:` values: a connector name with `name = value`
//! options, each option checked against weir-plan's connector table
//! ([`weir_plan::connectors`]): its names, which are required and the rules
//! that check the values, the ones the engine's sources and sinks check
//! their builders' options with, so a value is refused with one message at
//! compile time and at start.
//!
//! A sink of the table without a typed form here (`noop`) is read into
//! [`Sink::ByName`] and built by `weir::sink::from_options`: a new sink
//! with options only needs no change in the macro.

use std::collections::BTreeMap;

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::parse::{ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::{Expr, Ident, Lit, Token};

use crate::ast::{FileFormat, KafkaSourceDecl, Setting, Sink, SinkDecl, Source, SourceDecl};
use crate::errors::{suggestion_help, Errors};
use weir_plan::connectors::{self, OptionError, OptionSpec, SinkSpec, ValueKind};

/// What an option takes.
#[derive(Clone, Copy)]
enum Kind {
    /// A string literal.
    Str,
    /// A duration string (`"5 seconds"`, zero allowed).
    Duration,
    /// A whole number in `1..=max`.
    Count { max: u64 },
    /// A whole number in `0..=max`.
    Whole { max: u64 },
    /// `true` or `false`.
    Bool,
    /// One of these names (bare or quoted).
    Choice(&'static [&'static str]),
    /// A list of columns, `[a, b]`.
    Columns,
    /// A string this connector-table rule accepts (or says why not).
    Checked(connectors::Rule),
    /// A string, or `env("VAR")` read at run time.
    Setting,
    /// A storage location string: a local path, `file:///...` or
    /// `s3://bucket/prefix` ([`weir_plan::StorageLocation::parse`]).
    Location,
}

/// One option of a connector.
struct Spec {
    name: &'static str,
    kind: Kind,
    required: bool,
}

/// A connector's options as `stream_query!` names them, from the connector
/// table (the options the macro does not offer have no macro name);
/// `needs`: whether the macro needs the option.
fn specs(options: &[OptionSpec], needs: impl Fn(&OptionSpec) -> bool) -> Vec<Spec> {
    options
        .iter()
        .filter_map(|o| {
            let kind = match o.kind {
                ValueKind::Text => Kind::Str,
                ValueKind::Setting => Kind::Setting,
                ValueKind::Location => Kind::Location,
                ValueKind::Duration => Kind::Duration,
                ValueKind::Bool => Kind::Bool,
                ValueKind::Count { max } => Kind::Count { max },
                ValueKind::Whole { max } => Kind::Whole { max },
                ValueKind::Choice(c) => Kind::Choice(c),
                ValueKind::Columns => Kind::Columns,
                ValueKind::Checked(rule) => Kind::Checked(rule),
                ValueKind::Unsupported(_) => return None,
            };
            Some(Spec {
                name: o.macro_name?,
                kind,
                required: needs(o),
            })
        })
        .collect()
}

/// Reports a connector-table refusal on `at`.
fn report(at: impl ToTokens, e: OptionError, errs: &mut Errors) {
    if e.help.is_empty() {
        errs.spanned(at, e.message);
    } else {
        errs.spanned_help(at, e.message, e.help);
    }
}

/// A checked option value.
enum Val {
    Str(String),
    Int(u64),
    Bool(bool),
    Columns(Vec<Ident>),
    Setting(Setting),
}

/// `name = value`.
struct Opt {
    name: Ident,
    value: Expr,
}

impl syn::parse::Parse for Opt {
    fn parse(input: ParseStream) -> syn::Result<Opt> {
        let name: Ident = input.parse()?;
        input.parse::<Token![=]>().map_err(|e| {
            syn::Error::new(e.span(), format!("expected `=`, as in `{name} = ...`"))
        })?;
        let value: Expr = input.parse()?;
        Ok(Opt { name, value })
    }
}

/// `name` or `name(args)`: the name and the arguments' tokens.
fn parse_connector(input: ParseStream) -> syn::Result<(Ident, Option<TokenStream>)> {
    let name: Ident = input.parse()?;
    let args = if input.peek(syn::token::Paren) {
        let content;
        syn::parenthesized!(content in input);
        Some(content.parse::<TokenStream>()?)
    } else {
        None
    };
    if !input.is_empty() {
        return Err(
            input.error("unexpected tokens after the connector; write `name(option = value, ...)`")
        );
    }
    Ok((name, args))
}

/// Parses and checks `source: ...`. Syntax errors are returned; option
/// mistakes go to `errs` (the source is still returned, with defaults).
pub fn parse_source(tokens: TokenStream, errs: &mut Errors) -> syn::Result<Option<SourceDecl>> {
    let (ident, args) = parse_connector.parse2(tokens)?;
    let name = ident.to_string();
    let Some(source) = connectors::SOURCES.iter().find(|s| s.name == name) else {
        let names: Vec<&str> = connectors::SOURCES.iter().map(|s| s.name).collect();
        errs.spanned_help(
            &ident,
            format!("unknown source `{name}`"),
            suggestion_help(&name, &names, "sources"),
        );
        return Ok(None);
    };
    let before = errs.len();
    let specs = specs(source.options, |o| o.required);
    let mut v = read_options(&ident, "source", args, &specs, errs)?;
    let options_ok = errs.len() == before;
    let kind = match name.as_str() {
        "rate" => Source::Rate {
            rows_per_second: take_int(&mut v, "rows_per_second"),
            ramp_up_time: take_str(&mut v, "ramp_up_time"),
            num_partitions: take_int(&mut v, "num_partitions"),
        },
        "files" => Source::Files {
            path: take_str(&mut v, "path").unwrap_or_default(),
            format: take_format(&mut v).unwrap_or(FileFormat::Json),
            max_files_per_trigger: take_int(&mut v, "max_files_per_trigger"),
            latest_first: take_bool(&mut v, "latest_first"),
        },
        "socket" => Source::Socket {
            host: take_str(&mut v, "host").unwrap_or_else(|| "localhost".into()),
            port: take_int(&mut v, "port").unwrap_or(0),
        },
        "rate_micro_batch" => Source::RateMicroBatch {
            rows_per_batch: take_int(&mut v, "rows_per_batch").unwrap_or(1),
            num_partitions: take_int(&mut v, "num_partitions"),
            start_timestamp: take_int(&mut v, "start_timestamp"),
            advance_millis_per_batch: take_int(&mut v, "advance_millis_per_batch"),
        },
        "kafka" => {
            let k = KafkaSourceDecl {
                bootstrap_servers: take_setting(&mut v, "bootstrap_servers"),
                subscribe: take_str(&mut v, "subscribe"),
                subscribe_pattern: take_str(&mut v, "subscribe_pattern"),
                assign: take_str(&mut v, "assign"),
                starting_offsets: take_str(&mut v, "starting_offsets"),
                max_offsets_per_trigger: take_int(&mut v, "max_offsets_per_trigger"),
                fail_on_data_loss: take_bool(&mut v, "fail_on_data_loss"),
                group_id: take_str(&mut v, "group_id"),
                format: take_format(&mut v),
            };
            // Spark: exactly one of subscribe, subscribePattern, assign
            // (the table's rule; a mistyped one is reported already). The
            // help shows the declaration's syntax.
            let set = [&k.subscribe, &k.subscribe_pattern, &k.assign].map(|o| o.is_some());
            let names = ["subscribe", "subscribe_pattern", "assign"];
            if let (Err(e), true) = (source.check_exactly_one(&names, &set), options_ok) {
                errs.spanned_help(
                    &ident,
                    e.message,
                    "e.g. `kafka(bootstrap_servers = \"127.0.0.1:9092\", subscribe = \"clicks\", format = json)`",
                );
            }
            Source::Kafka(k)
        }
        _ => Source::Memory,
    };
    Ok(Some(SourceDecl { ident, kind }))
}

/// Parses and checks `sink: ...`, as [`parse_source`] does.
pub fn parse_sink(tokens: TokenStream, errs: &mut Errors) -> syn::Result<Option<SinkDecl>> {
    let (ident, args) = parse_connector.parse2(tokens)?;
    let name = ident.to_string();
    let Some(spec) = connectors::SINKS.iter().find(|s| s.name == name) else {
        let names: Vec<&str> = connectors::SINKS.iter().map(|s| s.name).collect();
        errs.spanned_help(
            &ident,
            format!("unknown sink `{name}`"),
            suggestion_help(&name, &names, "sinks"),
        );
        return Ok(None);
    };
    if let Some(how) = spec.code {
        let Some(args) = args else {
            errs.spanned_help(&ident, format!("{name} needs a writer"), how);
            return Ok(None);
        };
        let f: Expr = syn::parse2(args)?;
        let kind = if name == "foreach" {
            Sink::Foreach(f)
        } else {
            Sink::ForeachBatch(f)
        };
        return Ok(Some(SinkDecl { ident, kind }));
    }
    let specs = specs(spec.options, |o| spec.macro_needs(o));
    let mut v = read_options(&ident, "sink", args, &specs, errs)?;
    let kind = match name.as_str() {
        "console" => Sink::Console {
            truncate: take_bool(&mut v, "truncate"),
            num_rows: take_int(&mut v, "num_rows"),
        },
        "memory" => Sink::Memory {
            name: take_str(&mut v, "name"),
        },
        "files" => Sink::Files {
            path: take_str(&mut v, "path").unwrap_or_default(),
            format: take_format(&mut v).unwrap_or(FileFormat::Parquet),
            partition_by: take_columns(&mut v, "partition_by"),
        },
        "kafka" => {
            let json = take_str(&mut v, "format").as_deref() == Some("json");
            let key = take_columns(&mut v, "key");
            if !json && !key.is_empty() {
                errs.spanned_help(
                    &ident,
                    "`key = [...]` builds the record key of JSON values; it needs `format = json`",
                    "add `format = json`, or give the result a `key` column (string or binary), as Spark's Kafka sink takes",
                );
            }
            let delivery = take_str(&mut v, "delivery");
            Sink::Kafka {
                bootstrap_servers: take_setting(&mut v, "bootstrap_servers"),
                topic: take_str(&mut v, "topic").unwrap_or_default(),
                json,
                key,
                at_least_once: delivery
                    .is_some_and(|d| connectors::at_least_once("delivery", &d).unwrap_or(false)),
            }
        }
        "postgres" => Sink::Postgres {
            url: take_setting(&mut v, "url"),
            table: take_str(&mut v, "table").unwrap_or_default(),
            key: take_columns(&mut v, "key"),
            create_table: take_bool(&mut v, "create_table"),
        },
        "redis" => Sink::Redis {
            url: take_setting(&mut v, "url"),
            key_prefix: take_str(&mut v, "key_prefix"),
            key: take_columns(&mut v, "key"),
            key_fields: take_bool(&mut v, "key_fields"),
        },
        _ => by_name(spec, v),
    };
    Ok(Some(SinkDecl { ident, kind }))
}

/// A sink built at run time from the table's options (Spark's names, the
/// values as text), in the table's order.
fn by_name(spec: &'static SinkSpec, mut v: BTreeMap<&'static str, Val>) -> Sink {
    let options = spec
        .options
        .iter()
        .filter_map(|o| {
            let text = match v.remove(o.macro_name?)? {
                Val::Setting(s) => return Some((o, s)),
                Val::Str(s) => s,
                Val::Int(i) => i.to_string(),
                Val::Bool(b) => b.to_string(),
                Val::Columns(c) => c
                    .iter()
                    .map(|i| i.unraw().to_string())
                    .collect::<Vec<_>>()
                    .join(","),
            };
            Some((o, Setting::Lit(text)))
        })
        .collect();
    Sink::ByName { spec, options }
}

/// Checks a storage location literal by the engine's own rule, reporting a
/// malformed one on the literal: true when it is valid.
pub fn check_location(lit: &syn::LitStr, what: &str, errs: &mut Errors) -> bool {
    match weir_plan::StorageLocation::parse(&lit.value()) {
        Ok(_) => true,
        Err(e) => {
            errs.spanned_help(
                lit,
                format!(
                    "invalid storage location `{}` for {what}: {}",
                    e.location(),
                    e.reason()
                ),
                weir_plan::location::ACCEPTED_LOCATIONS,
            );
            false
        }
    }
}

fn take_setting(v: &mut BTreeMap<&'static str, Val>, name: &str) -> Setting {
    match v.remove(name) {
        Some(Val::Setting(s)) => s,
        _ => Setting::Lit(String::new()),
    }
}

fn take_columns(v: &mut BTreeMap<&'static str, Val>, name: &str) -> Vec<Ident> {
    match v.remove(name) {
        Some(Val::Columns(c)) => c,
        _ => vec![],
    }
}

fn take_str(v: &mut BTreeMap<&'static str, Val>, name: &str) -> Option<String> {
    match v.remove(name)? {
        Val::Str(s) => Some(s),
        _ => None,
    }
}

fn take_int(v: &mut BTreeMap<&'static str, Val>, name: &str) -> Option<u64> {
    match v.remove(name)? {
        Val::Int(i) => Some(i),
        _ => None,
    }
}

fn take_bool(v: &mut BTreeMap<&'static str, Val>, name: &str) -> Option<bool> {
    match v.remove(name)? {
        Val::Bool(b) => Some(b),
        _ => None,
    }
}

fn take_format(v: &mut BTreeMap<&'static str, Val>) -> Option<FileFormat> {
    Some(match take_str(v, "format")?.as_str() {
        "json" => FileFormat::Json,
        "csv" => FileFormat::Csv,
        _ => FileFormat::Parquet,
    })
}

/// Checks the options against the connector's table: unknown, repeated,
/// missing and mistyped options are reported; the good ones are returned.
fn read_options(
    connector: &Ident,
    what: &str,
    args: Option<TokenStream>,
    specs: &[Spec],
    errs: &mut Errors,
) -> syn::Result<BTreeMap<&'static str, Val>> {
    let opts = match args {
        Some(a) => Punctuated::<Opt, Token![,]>::parse_terminated.parse2(a)?,
        None => Punctuated::new(),
    };
    let names: Vec<&str> = specs.iter().map(|s| s.name).collect();
    let mut out = BTreeMap::new();
    let mut seen: Vec<String> = vec![];
    for o in opts {
        let name = o.name.to_string();
        let Some(spec) = specs.iter().find(|s| s.name == name) else {
            let help = if specs.is_empty() {
                match (what, connector.to_string().as_str()) {
                    ("source", "memory") => "the memory source takes no options: its rows are handed in at run time with `Query::writer_from(&session, source)`".to_string(),
                    _ => format!("the {connector} {what} takes no options"),
                }
            } else {
                suggestion_help(&name, &names, &format!("options of {connector}"))
            };
            errs.spanned_help(
                &o.name,
                format!("unknown option `{name}` for the {connector} {what}"),
                help,
            );
            continue;
        };
        if seen.contains(&name) {
            errs.spanned(&o.name, format!("option `{name}` is given twice"));
            continue;
        }
        seen.push(name);
        if let Some(val) = check_value(spec, &o.value, errs) {
            out.insert(spec.name, val);
        }
    }
    for s in specs
        .iter()
        .filter(|s| s.required && !seen.iter().any(|n| n == s.name))
    {
        let example = match s.kind {
            Kind::Str | Kind::Location => format!("{} = \"...\"", s.name),
            Kind::Choice(c) => format!("{} = {}", s.name, c.join("|")),
            _ => format!("{} = 9999", s.name),
        };
        // The table's message.
        let message = match what {
            "source" => connectors::missing(&connector.to_string(), s.name).message,
            _ => connectors::missing_in_sink(&connector.to_string(), s.name).message,
        };
        errs.spanned_help(connector, message, format!("add `{example}`"));
    }
    Ok(out)
}

/// The value of one option, if it has the type the option takes.
fn check_value(spec: &Spec, value: &Expr, errs: &mut Errors) -> Option<Val> {
    let name = spec.name;
    let lit = match value {
        Expr::Lit(l) => Some(&l.lit),
        _ => None,
    };
    let bare = match value {
        Expr::Path(p) => p.path.get_ident().map(|i| i.to_string()),
        _ => None,
    };
    match spec.kind {
        Kind::Setting => {
            if let Expr::Call(c) = value {
                if matches!(&*c.func, Expr::Path(p) if p.path.is_ident("env")) {
                    return match (c.args.len(), c.args.first()) {
                        (
                            1,
                            Some(Expr::Lit(syn::ExprLit {
                                lit: Lit::Str(s), ..
                            })),
                        ) if !s.value().is_empty() => Some(Val::Setting(Setting::Env(s.value()))),
                        _ => {
                            errs.spanned(
                                value,
                                format!("`env` takes the variable's name as a string, e.g. {name} = env(\"MY_VAR\")"),
                            );
                            None
                        }
                    };
                }
            }
            match lit {
                Some(Lit::Str(s)) => match connectors::text(name, &s.value()) {
                    Ok(()) => return Some(Val::Setting(Setting::Lit(s.value()))),
                    Err(e) => report(value, e, errs),
                },
                _ => errs.spanned_help(
                    value,
                    format!("`{name}` takes a string or env(\"VAR\")"),
                    format!("e.g. {name} = \"...\", or {name} = env(\"VAR\") to read it from the environment when the query is built"),
                ),
            }
        }
        Kind::Checked(rule) => match (lit, &bare) {
            (Some(Lit::Str(s)), _) => match rule(name, &s.value()) {
                Ok(()) => return Some(Val::Str(s.value())),
                Err(e) => report(value, e, errs),
            },
            // A bare word (`starting_offsets = earliest`).
            (_, Some(b)) => match rule(name, b) {
                Ok(()) => return Some(Val::Str(b.clone())),
                Err(e) => report(value, e, errs),
            },
            _ => errs.spanned(
                value,
                format!("`{name}` takes a string, e.g. {name} = \"...\""),
            ),
        },
        Kind::Location => match lit {
            Some(Lit::Str(s)) => match connectors::location(name, &s.value()) {
                Ok(()) => return Some(Val::Str(s.value())),
                Err(e) => report(value, e, errs),
            },
            _ => errs.spanned(
                value,
                format!("`{name}` takes a string, e.g. {name} = \"...\""),
            ),
        },
        Kind::Str => match lit {
            Some(Lit::Str(s)) => match connectors::text(name, &s.value()) {
                Ok(()) => return Some(Val::Str(s.value())),
                Err(e) => report(value, e, errs),
            },
            _ => errs.spanned(
                value,
                format!("`{name}` takes a string, e.g. {name} = \"...\""),
            ),
        },
        Kind::Duration => match lit {
            Some(Lit::Str(s)) => match connectors::duration(name, &s.value()) {
                Ok(_) => return Some(Val::Str(s.value())),
                Err(e) => report(value, e, errs),
            },
            _ => errs.spanned(
                value,
                format!("`{name}` takes a duration string, e.g. {name} = \"5 seconds\""),
            ),
        },
        Kind::Count { max } => match lit {
            Some(Lit::Int(i)) => match connectors::parse_count(name, i.base10_digits(), max) {
                Ok(n) => return Some(Val::Int(n)),
                Err(e) => report(value, e, errs),
            },
            _ => errs.spanned(
                value,
                format!("`{name}` takes a whole number, e.g. {name} = 10"),
            ),
        },
        Kind::Whole { max } => match lit {
            Some(Lit::Int(i)) => match connectors::parse_whole(name, i.base10_digits(), max) {
                Ok(n) => return Some(Val::Int(n)),
                Err(e) => report(value, e, errs),
            },
            _ => errs.spanned(
                value,
                format!("`{name}` takes a whole number, e.g. {name} = 0"),
            ),
        },
        Kind::Bool => match lit {
            Some(Lit::Bool(b)) => return Some(Val::Bool(b.value)),
            _ => errs.spanned(value, format!("`{name}` takes true or false")),
        },
        Kind::Choice(choices) => {
            let given = match (lit, bare) {
                (Some(Lit::Str(s)), _) => Some(s.value()),
                (_, Some(b)) => Some(b),
                _ => None,
            };
            match given.map(|g| (connectors::choice(name, &g, choices), g)) {
                // The table's spelling of the choice (Spark reads any case).
                Some((Ok(()), g)) => {
                    let canonical = choices.iter().find(|c| c.eq_ignore_ascii_case(g.trim()));
                    return Some(Val::Str(canonical.map_or(g, |c| c.to_string())));
                }
                // The table's message; the help names the closest choice.
                Some((Err(e), g)) => errs.spanned_help(
                    value,
                    e.message,
                    suggestion_help(&g, choices, &format!("{name}s")),
                ),
                None => errs.spanned(
                    value,
                    format!("`{name}` takes one of {}", choices.join(", ")),
                ),
            }
        }
        Kind::Columns => {
            let cols: Option<Vec<Ident>> = match value {
                Expr::Array(a) => a
                    .elems
                    .iter()
                    .map(|e| match e {
                        Expr::Path(p) => p.path.get_ident().cloned(),
                        _ => None,
                    })
                    .collect(),
                _ => None,
            };
            match cols {
                Some(c) => return Some(Val::Columns(c)),
                None => errs.spanned(
                    value.to_token_stream(),
                    format!("`{name}` takes a list of columns, e.g. {name} = [page, day]"),
                ),
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn source(t: TokenStream) -> (Option<Source>, Vec<String>) {
        let mut errs = Errors::new();
        let s = parse_source(t, &mut errs).unwrap().map(|s| s.kind);
        (
            s,
            errs.diagnostics()
                .iter()
                .map(|d| format!("{}: {}", d.at, d.message))
                .collect(),
        )
    }

    #[test]
    fn reads_source_options() {
        let (s, e) = source(quote!(rate(rows_per_second = 5, ramp_up_time = "1 second")));
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(
            s,
            Some(Source::Rate {
                rows_per_second: Some(5),
                ramp_up_time: Some("1 second".into()),
                num_partitions: None
            })
        );
        let (s, e) = source(quote!(files(
            path = "in",
            format = csv,
            latest_first = true
        )));
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(
            s,
            Some(Source::Files {
                path: "in".into(),
                format: FileFormat::Csv,
                max_files_per_trigger: None,
                latest_first: Some(true)
            })
        );
        assert_eq!(source(quote!(memory)).0, Some(Source::Memory));
        assert_eq!(
            source(quote!(socket(port = 9999))).0,
            Some(Source::Socket {
                host: "localhost".into(),
                port: 9999
            })
        );
    }

    #[test]
    fn file_paths_are_storage_locations_checked_at_compile_time() {
        let (s, e) = source(quote!(files(path = "s3a://logs/incoming/", format = json)));
        assert!(e.is_empty(), "{e:?}");
        assert!(matches!(s, Some(Source::Files { path, .. }) if path == "s3a://logs/incoming/"));
        for ok in ["data/in", "/abs/in", "file:///abs/in", "s3://dim/users"] {
            let (_, e) = source(quote!(files(path = #ok, format = csv)));
            assert!(e.is_empty(), "{ok}: {e:?}");
        }
        let (_, e) = source(quote!(files(path = "s3:///incoming", format = json)));
        assert_eq!(
            e,
            ["\"s3:///incoming\": invalid storage location `s3:///incoming` for `path`: no bucket: write s3://bucket/prefix\nhelp: weir accepts a local path, file:///absolute/path or s3://bucket/prefix"]
        );
        let mut errs = Errors::new();
        parse_sink(
            quote!(files(path = "gs://out/views", format = parquet)),
            &mut errs,
        )
        .unwrap();
        let e: Vec<&str> = errs
            .diagnostics()
            .iter()
            .map(|d| d.message.as_str())
            .collect();
        assert_eq!(
            e,
            ["invalid storage location `gs://out/views` for `path`: the scheme `gs://` is not supported\nhelp: weir accepts a local path, file:///absolute/path or s3://bucket/prefix"]
        );
        // Credentials are refused and not repeated in the message.
        let (_, e) = source(quote!(files(
            path = "s3a://KEY:s3cr3t@logs/in",
            format = json
        )));
        assert_eq!(e.len(), 1);
        let message = e[0].split_once(": ").unwrap().1;
        assert!(message.contains("carries credentials"), "{message}");
        assert!(!message.contains("s3cr3t"), "{message}");
    }

    #[test]
    fn reports_option_mistakes() {
        let (_, e) = source(quote!(files(
            path = "in",
            format = xml,
            max_file_per_trigger = 3,
            latest_first = 1
        )));
        assert_eq!(
            e,
            [
                "xml: unknown format `xml`\nhelp: formats: json, csv, parquet",
                "max_file_per_trigger: unknown option `max_file_per_trigger` for the files source\nhelp: did you mean `max_files_per_trigger`? (options of files: path, format, max_files_per_trigger, latest_first)",
                "1: `latest_first` takes true or false",
            ]
        );
        let (_, e) = source(quote!(files(format = json)));
        assert_eq!(
            e,
            ["files: the files source needs the option `path`\nhelp: add `path = \"...\"`"]
        );
        let (_, e) = source(quote!(rate(
            rows_per_second = 0,
            ramp_up_time = "5 secs later"
        )));
        assert_eq!(
            e[0],
            "0: `rows_per_second` takes a whole number of at least 1"
        );
        assert!(e[1]
            .starts_with("\"5 secs later\": invalid duration \"5 secs later\" for `ramp_up_time`"));
        let (s, e) = source(quote!(kafak(topic = "x")));
        assert!(s.is_none());
        assert_eq!(
            e,
            ["kafak: unknown source `kafak`\nhelp: did you mean `kafka`? (sources: rate, files, socket, memory, rate_micro_batch, kafka)"]
        );
        let (s, e) = source(quote!(kafka(
            bootstrap_servers = "b:9092",
            subscribe = "a",
            subscribe_pattern = "b.*"
        )));
        assert!(s.is_some());
        assert_eq!(
            e,
            ["kafka: the kafka source needs exactly one of `subscribe`, `subscribe_pattern` and `assign`\nhelp: e.g. `kafka(bootstrap_servers = \"127.0.0.1:9092\", subscribe = \"clicks\", format = json)`"]
        );
        let (s, e) = source(quote!(kafka(
            bootstrap_servers = "b:9092",
            subscribe = "a",
            starting_offsets = earliest,
            max_offsets_per_trigger = 1000,
            format = json
        )));
        assert!(e.is_empty(), "{e:?}");
        let Some(Source::Kafka(k)) = s else {
            panic!("a kafka source");
        };
        assert_eq!(k.starting_offsets.as_deref(), Some("earliest"));
        assert_eq!(k.max_offsets_per_trigger, Some(1000));
        assert_eq!(k.format, Some(FileFormat::Json));
        let (_, e) = source(quote!(memory(name = "x")));
        assert!(e[0].contains("handed in at run time"));
    }

    /// The macro refuses what the connector table's rules refuse, with
    /// their message (the engine's sources call the same rules).
    #[test]
    fn source_options_are_checked_by_the_connector_table() {
        let (_, e) = source(quote!(kafka(bootstrap_servers = "b:9092", assign = "{}")));
        let rule = connectors::assign("assign", "{}").unwrap_err();
        assert_eq!(e, [format!("\"{{}}\": {}", rule.message)]);
        let (_, e) = source(quote!(kafka(
            bootstrap_servers = "b:9092",
            subscribe = "a",
            starting_offsets = "{\"a\":{\"0\":-3}}"
        )));
        let rule =
            connectors::starting_offsets("starting_offsets", r#"{"a":{"0":-3}}"#).unwrap_err();
        assert!(e[0].ends_with(&rule.message), "{e:?}");
        let (_, e) = source(quote!(rate_micro_batch(rows_per_batch = 0)));
        assert_eq!(
            e,
            ["0: `rows_per_batch` takes a whole number from 1 to 100000000"]
        );
        // Only the options the macro offers: Spark's others are unknown here.
        let (_, e) = source(quote!(kafka(
            bootstrap_servers = "b:9092",
            subscribe = "a",
            include_headers = true
        )));
        assert!(
            e[0].starts_with(
                "include_headers: unknown option `include_headers` for the kafka source"
            ),
            "{e:?}"
        );
        // A choice in any case, as Spark reads it, stored as the table spells it.
        let (s, e) = source(quote!(files(path = "in", format = "JSON")));
        assert!(e.is_empty(), "{e:?}");
        assert!(matches!(
            s,
            Some(Source::Files {
                format: FileFormat::Json,
                ..
            })
        ));
    }

    #[test]
    fn reads_sinks() {
        let mut errs = Errors::new();
        let s = parse_sink(
            quote!(files(path = "out", partition_by = [page, day])),
            &mut errs,
        )
        .unwrap()
        .unwrap();
        assert!(errs.is_empty(), "{errs:?}");
        match s.kind {
            Sink::Files {
                format,
                partition_by,
                ..
            } => {
                assert_eq!(format, FileFormat::Parquet);
                assert_eq!(partition_by.len(), 2);
            }
            _ => panic!(),
        }
        let s = parse_sink(quote!(foreach_batch(|id, b| Ok(()))), &mut errs)
            .unwrap()
            .unwrap();
        assert!(matches!(s.kind, Sink::ForeachBatch(_)));
        assert!(parse_sink(quote!(console(truncate = false) extra), &mut errs).is_err());
        parse_sink(quote!(consol), &mut errs).unwrap();
        assert_eq!(errs.diagnostics()[0].message, "unknown sink `consol`\nhelp: did you mean `console`? (sinks: console, memory, files, foreach_batch, foreach, kafka, postgres, redis, noop)");
        let mut errs = Errors::new();
        let s = parse_sink(
            quote!(kafka(bootstrap_servers = "localhost:9092", topic = "out")),
            &mut errs,
        )
        .unwrap()
        .unwrap();
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(s.ident, "kafka");
        assert!(matches!(s.kind, Sink::Kafka { ref topic, .. } if topic == "out"));
        parse_sink(
            quote!(kafka(bootstrap_servers = "localhost:9092")),
            &mut errs,
        )
        .unwrap();
        assert_eq!(
            errs.diagnostics()[0].message,
            "the kafka sink needs the option `topic`\nhelp: add `topic = \"...\"`"
        );
        let mut errs = Errors::new();
        let s = parse_sink(quote!(foreach(Recorder)), &mut errs)
            .unwrap()
            .unwrap();
        assert!(matches!(s.kind, Sink::Foreach(_)));
        assert!(parse_sink(quote!(foreach), &mut errs).unwrap().is_none());
        assert!(errs.diagnostics()[0]
            .message
            .starts_with("foreach needs a writer\nhelp: write `foreach(MyWriter { .. })`"));
    }

    fn sink(t: TokenStream) -> (Option<Sink>, Vec<String>) {
        let mut errs = Errors::new();
        let s = parse_sink(t, &mut errs).unwrap().map(|s| s.kind);
        let e = errs
            .diagnostics()
            .iter()
            .map(|d| format!("{}: {}", d.at, d.message))
            .collect();
        (s, e)
    }

    /// A sink of the table without a typed form is read by name: the
    /// table's options under the macro's names, kept by Spark's names.
    #[test]
    fn a_table_sink_without_a_form_of_its_own_is_read_by_name() {
        let (s, e) = sink(quote!(noop));
        assert!(e.is_empty(), "{e:?}");
        let Some(Sink::ByName { spec, options }) = s else {
            panic!("noop is read by name");
        };
        assert_eq!((spec.name, options.len()), ("noop", 0));
        let (_, e) = sink(quote!(noop(num_rows = 5)));
        assert_eq!(
            e,
            ["num_rows: unknown option `num_rows` for the noop sink\nhelp: the noop sink takes no options"]
        );
        let (_, e) = sink(quote!(nop));
        assert!(
            e[0].starts_with("nop: unknown sink `nop`\nhelp: did you mean `noop`?"),
            "{e:?}"
        );
        // Every sink of the table is a sink here.
        for s in connectors::SINKS {
            let name = syn::Ident::new(s.name, proc_macro2::Span::call_site());
            let mut errs = Errors::new();
            let _ = parse_sink(quote!(#name), &mut errs);
            assert!(
                errs.diagnostics()
                    .iter()
                    .all(|d| !d.message.starts_with("unknown sink")),
                "{}",
                s.name
            );
        }
    }

    /// The macro refuses a sink's option values with the connector table's
    /// messages (the engine's sinks check theirs with the same rules).
    #[test]
    fn sink_options_are_checked_by_the_connector_table() {
        let (_, e) = sink(quote!(console(num_rows = 0)));
        let rule = connectors::parse_count("num_rows", "0", i32::MAX as u64).unwrap_err();
        assert_eq!(e, [format!("0: {}", rule.message)]);
        let (_, e) = sink(quote!(kafka(
            bootstrap_servers = "b:9092",
            topic = "",
            delivery = at_most_once
        )));
        assert_eq!(
            e,
            [
                "\"\": `topic` must not be empty",
                "at_most_once: `delivery`: unknown delivery guarantee `at_most_once`\nhelp: use exactly_once (transactions, the default) or at_least_once",
            ]
        );
        let (s, e) = sink(quote!(kafka(
            bootstrap_servers = "b:9092",
            topic = "t",
            delivery = at_least_once,
            format = JSON
        )));
        assert!(e.is_empty(), "{e:?}");
        assert!(matches!(
            s,
            Some(Sink::Kafka {
                at_least_once: true,
                json: true,
                ..
            })
        ));
        let (_, e) = sink(quote!(redis(url = "redis://h", key_prefix = "")));
        assert_eq!(e, ["\"\": `key_prefix` must not be empty"]);
        let (_, e) = sink(quote!(postgres(url = "postgresql://h/db")));
        assert_eq!(
            e,
            ["postgres: the postgres sink needs the option `table`\nhelp: add `table = \"...\"`"]
        );
    }
}
