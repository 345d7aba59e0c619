//! The `EXPLAIN` constant: the plan as weir-plan prints it (the same text
//! as `StreamingQuery::explain()` starts with: the sink at the root, each
//! operator above its input, the sources at the leaves), then what only the
//! declaration shows (source and sink settings, with passwords hidden, the
//! Rust types of the rows, the trigger and checkpoint as written).

use crate::ast::{join_type_name, QueryDecl, Setting, Sink, Source, TriggerDecl};
use crate::lower::Lowered;
use crate::types::{rust_type_name, Col};
use weir_plan::connectors::ValueKind;

/// The description of the query.
pub fn explain(q: &QueryDecl, l: &Lowered, output: &[Col]) -> String {
    let mut lines = vec![
        format!("== Query {} ({}) ==", l.query_name, q.ident),
        l.plan.to_string(),
        "== Declared ==".to_string(),
    ];
    let mut row = |k: &str, v: String| lines.push(format!("  {k:<10} {v}"));
    let source_name = &l.plan.nodes[l.result_node()].input;
    let src = q
        .source
        .as_ref()
        .map(|s| source_text(&s.kind))
        .unwrap_or_default();
    row("source", format!("{source_name}: {src}"));
    row("schema", columns(&l.input));
    if let (Some(j), Some(side)) = (&q.join, &l.join) {
        let src = j
            .side
            .source
            .as_ref()
            .map(|s| source_text(&s.kind))
            .unwrap_or_default();
        let (what, input) = if side.table {
            ("table", side.name.as_str())
        } else {
            ("stream", l.plan.nodes[0].input.as_str())
        };
        row(
            "join",
            format!("{} {what} {input}: {src}", join_type_name(j.how)),
        );
        row("  schema", columns(&side.input));
        if let Some((lit, ms)) = &j.refresh_every {
            row("  refresh", format!("every \"{}\" = {ms} ms", lit.value()));
        }
    }
    row("output", columns(output));
    row(
        "trigger",
        match &q.trigger {
            None => "as soon as possible (default)".into(),
            Some(TriggerDecl::ProcessingTime { lit, ms }) => {
                format!("processing_time(\"{}\") = {ms} ms", lit.value())
            }
            Some(TriggerDecl::AvailableNow) => "available_now".into(),
            Some(TriggerDecl::Once) => "once".into(),
            Some(TriggerDecl::Continuous { lit, ms }) => {
                format!("continuous(\"{}\") = {ms} ms", lit.value())
            }
        },
    );
    let sink = q
        .sink
        .as_ref()
        .map(|s| sink_text(&s.kind, &l.query_name))
        .unwrap_or_default();
    row("sink", sink);
    if let Some(s) = &q.late_rows {
        let name = format!("{}_late_rows", l.query_name);
        row("late rows", sink_text(&s.kind, &name));
    }
    row(
        "checkpoint",
        q.checkpoint
            .as_ref()
            .map(|c| format!("\"{}\"", c.value()))
            .unwrap_or_else(|| "(none)".into()),
    );
    lines.join("\n")
}

fn columns(cols: &[Col]) -> String {
    cols.iter()
        .map(|c| format!("{}: {}", c.name, rust_type_name(c.ty)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn call(name: &str, opts: Vec<String>) -> String {
    if opts.is_empty() {
        name.to_string()
    } else {
        format!("{name}({})", opts.join(", "))
    }
}

fn source_text(s: &Source) -> String {
    let mut o = vec![];
    match s {
        Source::Rate {
            rows_per_second,
            ramp_up_time,
            num_partitions,
        } => {
            if let Some(v) = rows_per_second {
                o.push(format!("rows_per_second = {v}"));
            }
            if let Some(v) = ramp_up_time {
                o.push(format!("ramp_up_time = \"{v}\""));
            }
            if let Some(v) = num_partitions {
                o.push(format!("num_partitions = {v}"));
            }
        }
        Source::Files {
            path,
            format,
            max_files_per_trigger,
            latest_first,
        } => {
            o.push(format!("path = \"{path}\""));
            o.push(format!("format = {}", format.name()));
            if let Some(v) = max_files_per_trigger {
                o.push(format!("max_files_per_trigger = {v}"));
            }
            if let Some(v) = latest_first {
                o.push(format!("latest_first = {v}"));
            }
        }
        Source::Socket { host, port } => {
            o.push(format!("host = \"{host}\""));
            o.push(format!("port = {port}"));
        }
        Source::Memory => return "memory (rows handed in at run time)".into(),
        Source::RateMicroBatch {
            rows_per_batch,
            num_partitions,
            start_timestamp,
            advance_millis_per_batch,
        } => {
            o.push(format!("rows_per_batch = {rows_per_batch}"));
            if let Some(v) = num_partitions {
                o.push(format!("num_partitions = {v}"));
            }
            if let Some(v) = start_timestamp {
                o.push(format!("start_timestamp = {v}"));
            }
            if let Some(v) = advance_millis_per_batch {
                o.push(format!("advance_millis_per_batch = {v}"));
            }
        }
        Source::Kafka(k) => {
            o.push(format!("bootstrap_servers = {}", k.bootstrap_servers));
            for (name, v) in [
                ("subscribe", &k.subscribe),
                ("subscribe_pattern", &k.subscribe_pattern),
                ("assign", &k.assign),
                ("group_id", &k.group_id),
            ] {
                if let Some(v) = v {
                    o.push(format!("{name} = {v:?}"));
                }
            }
            match k.starting_offsets.as_deref() {
                Some(v @ ("earliest" | "latest")) => o.push(format!("starting_offsets = {v}")),
                Some(v) => o.push(format!("starting_offsets = {v:?}")),
                None => {}
            }
            if let Some(v) = k.max_offsets_per_trigger {
                o.push(format!("max_offsets_per_trigger = {v}"));
            }
            if let Some(v) = k.fail_on_data_loss {
                o.push(format!("fail_on_data_loss = {v}"));
            }
            if let Some(f) = k.format {
                o.push(format!("format = {}", f.name()));
            }
        }
    }
    call(s.name(), o)
}

fn sink_text(s: &Sink, query_name: &str) -> String {
    let mut o = vec![];
    match s {
        Sink::Console { truncate, num_rows } => {
            if let Some(v) = truncate {
                o.push(format!("truncate = {v}"));
            }
            if let Some(v) = num_rows {
                o.push(format!("num_rows = {v}"));
            }
        }
        Sink::Memory { name } => o.push(format!(
            "name = \"{}\"",
            name.as_deref().unwrap_or(query_name)
        )),
        Sink::Files {
            path,
            format,
            partition_by,
        } => {
            o.push(format!("path = \"{path}\""));
            o.push(format!("format = {}", format.name()));
            if !partition_by.is_empty() {
                let p: Vec<String> = partition_by.iter().map(|i| i.to_string()).collect();
                o.push(format!("partition_by = [{}]", p.join(", ")));
            }
        }
        Sink::ForeachBatch(_) => return "foreach_batch(<function>)".into(),
        Sink::Foreach(_) => return "foreach(<writer>)".into(),
        Sink::Postgres {
            url,
            table,
            key,
            create_table,
        } => {
            o.push(format!("url = {}", redacted(url)));
            o.push(format!("table = \"{table}\""));
            if !key.is_empty() {
                let k: Vec<String> = key.iter().map(|i| i.to_string()).collect();
                o.push(format!("key = [{}]", k.join(", ")));
            }
            if let Some(b) = create_table {
                o.push(format!("create_table = {b}"));
            }
        }
        Sink::Redis {
            url,
            key_prefix,
            key,
            key_fields,
        } => {
            o.push(format!("url = {}", redacted(url)));
            if let Some(p) = key_prefix {
                o.push(format!("key_prefix = \"{p}\""));
            }
            if !key.is_empty() {
                let k: Vec<String> = key.iter().map(|i| i.to_string()).collect();
                o.push(format!("key = [{}]", k.join(", ")));
            }
            if let Some(b) = key_fields {
                o.push(format!("key_fields = {b}"));
            }
        }
        Sink::Kafka {
            bootstrap_servers,
            topic,
            json,
            key,
            at_least_once,
        } => {
            o.push(format!("bootstrap_servers = {bootstrap_servers}"));
            o.push(format!("topic = \"{topic}\""));
            if *json {
                o.push("format = json".into());
            }
            if !key.is_empty() {
                let k: Vec<String> = key.iter().map(|i| i.to_string()).collect();
                o.push(format!("key = [{}]", k.join(", ")));
            }
            o.push(format!(
                "delivery = {}",
                if *at_least_once {
                    "at_least_once"
                } else {
                    "exactly_once"
                }
            ));
        }
        Sink::ByName { options, .. } => {
            for (spec, value) in options {
                let name = spec.macro_name.unwrap_or(spec.name);
                o.push(format!("{name} = {}", option_text(spec.kind, value)));
            }
        }
    }
    call(s.name(), o)
}

/// An option's value as `stream_query!` writes it: strings quoted (a
/// connection setting's password hidden), columns as a list, the rest bare.
fn option_text(kind: ValueKind, value: &Setting) -> String {
    let Setting::Lit(v) = value else {
        return value.to_string();
    };
    match kind {
        ValueKind::Setting => redacted(value),
        ValueKind::Text | ValueKind::Location | ValueKind::Duration | ValueKind::Checked(_) => {
            format!("\"{v}\"")
        }
        ValueKind::Columns => format!("[{}]", v.replace(',', ", ")),
        _ => v.clone(),
    }
}

/// A connection setting with any password in it hidden (`EXPLAIN` is
/// printed and logged): `user:secret@` in a URL, `password=...` in a
/// key-value connection string.
fn redacted(s: &Setting) -> String {
    let Setting::Lit(v) = s else {
        return s.to_string();
    };
    let mut v = v.clone();
    if let (Some(scheme), Some(at)) = (v.find("://"), v.rfind('@')) {
        if let Some(colon) = v[scheme + 3..at].find(':') {
            v.replace_range(scheme + 3 + colon + 1..at, "***");
        }
    }
    let words: Vec<String> = v
        .split(' ')
        .map(|w| match w.split_once('=') {
            Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
            _ => w.to_string(),
        })
        .collect();
    format!("\"{}\"", words.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sink_read_by_name_prints_its_options_as_written() {
        let noop = weir_plan::connectors::sink("noop").unwrap();
        let s = Sink::ByName {
            spec: noop,
            options: vec![],
        };
        assert_eq!(sink_text(&s, "q"), "noop");
        let redis = weir_plan::connectors::sink("redis").unwrap();
        let opt = |n: &str| redis.option(n).unwrap();
        let s = Sink::ByName {
            spec: redis,
            options: vec![
                (opt("url"), Setting::Lit("redis://:pw@h:6379".into())),
                (opt("keyPrefix"), Setting::Lit("views".into())),
                (opt("keyColumns"), Setting::Lit("page,day".into())),
                (opt("keyFields"), Setting::Lit("true".into())),
            ],
        };
        assert_eq!(
            sink_text(&s, "q"),
            "redis(url = \"redis://:***@h:6379\", key_prefix = \"views\", key = [page, day], key_fields = true)"
        );
        assert_eq!(
            option_text(ValueKind::Setting, &Setting::Env("URL".into())),
            "env(\"URL\")"
        );
    }
}
