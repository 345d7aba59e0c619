//! The `EXPLAIN` constant: the query as a short, readable text (source,
//! ops in the order they run, result columns, mode, trigger, sink).

use weir_plan::{GroupKey, Op};

use crate::ast::{join_type_name, QueryDecl, Setting, Sink, Source, TriggerDecl};
use crate::lower::Lowered;
use crate::types::{rust_type_name, Col};

/// The description of the query.
pub fn explain(q: &QueryDecl, l: &Lowered, output: &[Col]) -> String {
    let mut lines = vec![format!("query {} ({})", l.query_name, q.ident)];
    let mut row = |k: &str, v: String| lines.push(format!("  {k:<10} {v}"));
    let ri = l.result_node();
    let source_name = &l.plan.nodes[ri].input;
    let src = q
        .source
        .as_ref()
        .map(|s| source_text(&s.kind))
        .unwrap_or_default();
    row("source", format!("{source_name}: {src}"));
    row("schema", columns(&l.input));
    for op in l.result_ops() {
        if let (Op::Join { how, on, using, .. }, Some(j), Some(side)) = (op, &q.join, &l.join) {
            let src = j
                .side
                .source
                .as_ref()
                .map(|s| source_text(&s.kind))
                .unwrap_or_default();
            let what = if side.table { "table" } else { "stream" };
            let input = if side.table {
                side.name.as_str()
            } else {
                l.plan.nodes[0].input.as_str()
            };
            row(
                "join",
                format!("{} {what} {input}: {src}", join_type_name(*how)),
            );
            row("  schema", columns(&side.input));
            if !side.table {
                for op in &l.plan.nodes[0].ops {
                    let (k, v) = op_text(op);
                    row(&format!("  {k}"), v);
                }
            }
            if let Some((lit, ms)) = &j.refresh_every {
                row("  refresh", format!("every \"{}\" = {ms} ms", lit.value()));
            }
            match (on, using) {
                (Some(on), _) => row("  on", on.clone()),
                (None, Some(keys)) => row("  using", keys.join(", ")),
                _ => {}
            }
            continue;
        }
        match op {
            Op::Aggregate { keys, .. } if !keys.is_empty() => {
                row("group by", group_keys(keys));
                row("aggregate", op_text(op).1);
            }
            _ => {
                let (k, v) = op_text(op);
                row(k, v);
            }
        }
    }
    row("output", columns(output));
    row("mode", l.plan.output_mode.spark_name().to_ascii_lowercase());
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
            start_timestamp,
            advance_millis_per_batch,
        } => {
            o.push(format!("rows_per_batch = {rows_per_batch}"));
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
    }
    call(s.name(), o)
}

/// The explain row of one op: its label and text (an aggregate's text is
/// its aggregates; [`group_keys`] gives its keys).
fn op_text(op: &Op) -> (&'static str, String) {
    match op {
        Op::Filter { predicate } => ("filter", predicate.clone()),
        Op::Select { columns } => (
            "select",
            columns
                .iter()
                .map(|c| {
                    if crate::expr::sql_ident(&c.alias) == c.expr {
                        c.alias.clone()
                    } else {
                        format!("{} AS {}", c.expr, c.alias)
                    }
                })
                .collect::<Vec<_>>()
                .join(", "),
        ),
        Op::WithColumn { name, expr } => ("with col", format!("{expr} AS {name}")),
        Op::Watermark { column, delay } => ("watermark", format!("{column} delay \"{delay}\"")),
        Op::Dedup {
            columns,
            within_watermark,
        } => (
            if *within_watermark {
                "dedup wm"
            } else {
                "dedup"
            },
            columns.join(", "),
        ),
        Op::Sort { by } => (
            "order by",
            by.iter()
                .map(|k| {
                    if k.desc {
                        format!("{} DESC", k.column)
                    } else {
                        k.column.clone()
                    }
                })
                .collect::<Vec<_>>()
                .join(", "),
        ),
        Op::Limit { n } => ("limit", n.to_string()),
        Op::Aggregate { aggs, .. } => (
            "aggregate",
            aggs.iter()
                .map(|a| format!("{}({}) AS {}", a.func.name(), a.column, a.alias))
                .collect::<Vec<_>>()
                .join(", "),
        ),
        Op::Join { right, how, .. } => ("join", format!("{} {right}", join_type_name(*how))),
    }
}

/// The grouping keys as written in `group_by:`.
fn group_keys(keys: &[GroupKey]) -> String {
    keys.iter()
        .map(|k| match k {
            GroupKey::Window { window, alias } => {
                let col = window.time_column().unwrap_or_default();
                if let Some(gap) = &window.gap {
                    return format!("session_window({col}, \"{gap}\") AS {alias}");
                }
                match &window.slide {
                    Some(sl) => format!("window({col}, \"{}\", \"{sl}\") AS {alias}", window.size),
                    None => format!("window({col}, \"{}\") AS {alias}", window.size),
                }
            }
            GroupKey::Column { column } => column.clone(),
        })
        .collect::<Vec<_>>()
        .join(", ")
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
