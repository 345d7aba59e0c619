//! The plan `stream_query!` emits as a literal (`Query::plan()`) is the
//! plan the engine runs (`Query::writer(..)?.plan()`), for every query
//! declared in `ui-tests/pass/`, equal as JSON (the conformance format);
//! that plan is the one the engine ran before the writer was built from the
//! literal (recorded as insta snapshots: a checkpoint records it, names
//! included); and both explain the same way.
//!
//! A difference names its place: `plan.nodes[0].ops[2].keys[0].window.slide:
//! literal "5 seconds", builder null`.

use serde_json::Value;
use weir::plan::{Field, Op, StreamPlan};
use weir::source::{BoxSource, MemoryStream};
use weir::{Session, StreamWriter};

use crate::{
    pass_clicks_enriched as clicks_enriched, pass_dedup_events as dedup_events,
    pass_files_append as files_append, pass_foreach_batch as foreach_batch,
    pass_foreach_rows as foreach_rows, pass_joins as joins, pass_late_rows as late_rows,
    pass_micro_batches as micro_batches, pass_noop_sink as noop_sink,
    pass_page_views as page_views, pass_rate_lab as rate_lab, pass_s3_paths as s3_paths,
    pass_shop_totals as shop_totals, pass_top_shops as top_shops,
    pass_user_sessions as user_sessions,
};

/// One declared query: its name, its literal plan and its builder's writer.
struct Declared {
    name: &'static str,
    literal: StreamPlan,
    explain: &'static str,
    writer: weir::Result<StreamWriter>,
}

/// A memory source with these columns (for queries declared `source: memory`).
fn memory(fields: Vec<Field>) -> BoxSource {
    Box::new(MemoryStream::new(&fields))
}

macro_rules! declared {
    ($query:path, $writer:expr) => {{
        use $query as q;
        Declared {
            name: stringify!($query),
            literal: q::plan(),
            explain: q::EXPLAIN,
            writer: $writer,
        }
    }};
}

/// Every query of `ui-tests/pass/` compiled into this binary, each built
/// the way a user builds it: `writer(session)` on its declared source, or
/// `writer_from` with a memory stream of its declared rows.
fn declared(session: &Session) -> Vec<Declared> {
    use weir::Row;
    let s = session;
    #[allow(unused_mut)]
    let mut all = vec![
        declared!(clicks_enriched::ClicksEnriched, q::writer(s)),
        declared!(clicks_enriched::ClicksPerUser, q::writer(s)),
        declared!(dedup_events::UniqueEvents, q::writer(s)),
        declared!(dedup_events::UniquePairs, q::writer(s)),
        declared!(files_append::LabFiles, q::writer(s)),
        declared!(foreach_batch::EvenValues, q::writer(s)),
        declared!(foreach_batch::Words, q::writer(s)),
        declared!(
            foreach_rows::TotalsPerShop,
            q::writer_from(s, memory(foreach_rows::ShopSale::fields()))
        ),
        declared!(joins::ClicksByTier, q::writer(s)),
        declared!(
            joins::ClickedImpressions,
            q::writer_from(
                s,
                memory(joins::Shown::fields()),
                memory(joins::Clicked::fields())
            )
        ),
        declared!(
            late_rows::OrdersPerWindow,
            q::writer_from(s, memory(late_rows::Order::fields()))
        ),
        declared!(micro_batches::Evens, q::writer(s)),
        declared!(micro_batches::Recent, q::writer(s)),
        declared!(micro_batches::Unique, q::writer(s)),
        declared!(noop_sink::NoopBench, q::writer(s)),
        declared!(page_views::PageViews, q::writer(s)),
        declared!(rate_lab::RateLab, q::writer(s)),
        declared!(s3_paths::S3Clicks, q::writer(s)),
        declared!(
            shop_totals::ShopTotals,
            q::writer_from(s, memory(shop_totals::Sale::fields()))
        ),
        declared!(
            top_shops::TopShops,
            q::writer_from(s, memory(top_shops::Sale::fields()))
        ),
        declared!(
            user_sessions::UserSessions,
            q::writer_from(s, memory(user_sessions::Click::fields()))
        ),
    ];
    #[cfg(feature = "kafka")]
    {
        // The declaration reads the broker's address from KAFKA_BOOTSTRAP.
        crate::kafka::bootstrap();
        all.push(declared!(
            crate::pass_page_views_scaled::PageViewsScaled,
            q::writer(s)
        ));
    }
    all
}

/// Every place where `a` (the literal) and `b` (the builder's) differ, as
/// `path: literal <a>, builder <b>`.
fn differences(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let (va, vb) = (
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                );
                differences(&format!("{path}.{k}"), va, vb, out);
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            for i in 0..x.len().max(y.len()) {
                let (va, vb) = (
                    x.get(i).unwrap_or(&Value::Null),
                    y.get(i).unwrap_or(&Value::Null),
                );
                differences(&format!("{path}[{i}]"), va, vb, out);
            }
        }
        _ if a != b => out.push(format!("{path}: literal {a}, builder {b}")),
        _ => {}
    }
}

/// The differences between two plans, compared as JSON.
fn plan_differences(literal: &StreamPlan, builder: &StreamPlan) -> Vec<String> {
    let a = serde_json::to_value(literal).unwrap();
    let b = serde_json::to_value(builder).unwrap();
    let mut out = vec![];
    differences("plan", &a, &b, &mut out);
    out
}

/// The last segment of a declared query's path (`joins::ClicksByTier`).
fn short(name: &str) -> &str {
    name.rsplit("::").next().unwrap_or(name).trim()
}

#[test]
fn literal_plans_are_the_running_plans() {
    let session = Session::new();
    let mut failures = vec![];
    for d in declared(&session) {
        let writer = match d.writer {
            Ok(w) => w,
            Err(e) => {
                failures.push(format!("{}: the writer fails: {e}", d.name));
                continue;
            }
        };
        // What `start()` checks: the rules the macro applied at compile time.
        if let Err(e) = writer.validate() {
            failures.push(format!("{}: the running plan breaks a rule: {e}", d.name));
        }
        for diff in plan_differences(&d.literal, &writer.plan()) {
            failures.push(format!("{}: {diff}", d.name));
        }
    }
    assert!(
        failures.is_empty(),
        "stream_query!'s literal plan is not the plan its writer runs:\n{}",
        failures.join("\n")
    );
}

#[test]
fn a_join_runs_in_a_node_of_its_own_after_both_inputs() {
    let literal = joins::ClickedImpressions::plan();
    let nodes: Vec<(&str, &str, usize)> = literal
        .nodes
        .iter()
        .map(|n| (n.id.as_str(), n.input.as_str(), n.ops.len()))
        .collect();
    assert_eq!(
        nodes,
        [
            ("result", "stream", 1),
            ("result_right", "stream_1", 1),
            ("joined", "result", 1)
        ]
    );
    assert_eq!(literal.result, "joined");
    assert!(
        matches!(&literal.nodes[2].ops[0], Op::Join { right, .. } if right == "result_right"),
        "{literal:?}"
    );
    // The static table keeps its declared name; what follows the join
    // runs in the join's node.
    let literal = joins::ClicksByTier::plan();
    assert_eq!(literal.statics.keys().collect::<Vec<_>>(), ["page"]);
    let joined = literal.node("joined").unwrap();
    assert!(matches!(&joined.ops[0], Op::Join { right, .. } if right == "page"));
    assert_eq!(literal.result, "joined");
}

#[test]
fn a_decoded_kafka_source_has_the_corrupt_record_column() {
    #[cfg(feature = "kafka")]
    {
        let literal = crate::pass_page_views_scaled::PageViewsScaled::plan();
        let names: Vec<&str> = literal.sources["stream"]
            .schema
            .iter()
            .map(|f| f.name.as_str())
            .collect();
        assert_eq!(names, ["page", "event_ts", "_corrupt_record"]);
    }
}

#[test]
fn the_comparison_finds_a_difference_and_names_its_place() {
    let literal = top_shops::TopShops::plan();
    let mut changed = literal.clone();
    let Some(Op::Limit { n }) = changed.nodes[0].ops.last_mut() else {
        panic!("TopShops ends with a limit: {literal:?}");
    };
    *n = 4;
    assert_eq!(
        plan_differences(&literal, &changed),
        ["plan.nodes[0].ops[3].n: literal 3, builder 4"]
    );
    // Names are a difference too (a checkpoint records them).
    let mut renamed = literal.clone();
    renamed.nodes[0].input = "sale".into();
    assert_eq!(
        plan_differences(&literal, &renamed),
        [r#"plan.nodes[0].input: literal "stream", builder "sale""#]
    );
}

/// Every `query Name {` in `ui-tests/pass/*.rs` is compared above (a new
/// declaration without its comparison fails here).
#[test]
fn every_passing_declaration_is_compared() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/ui-tests/pass");
    let session = Session::new();
    let compared: Vec<String> = declared(&session)
        .iter()
        .map(|d| short(d.name).to_string())
        .collect();
    let mut missing = vec![];
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        #[cfg(not(feature = "kafka"))]
        if path.ends_with("page_views_scaled.rs") {
            continue;
        }
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let Some(rest) = line.trim().strip_prefix("query ") else {
                continue;
            };
            let name = rest.trim_end_matches('{').trim();
            if !compared.iter().any(|c| c == name) {
                missing.push(format!("{} ({})", name, path.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "declarations without a plan comparison: {missing:?}"
    );
    assert!(compared.len() >= 20, "{compared:?}");
}

/// A plan tree's text with its sources' names left out, and the column
/// the engine adds to a decoded Kafka source.
fn without_source_names(tree: &str) -> String {
    tree.lines()
        .map(|line| match line.split_once("StreamingRelation ") {
            Some((head, rest)) => {
                let columns = rest.split_once(" [").map(|(_, c)| c).unwrap_or(rest);
                format!("{head}StreamingRelation [{columns}")
            }
            None => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
        .replace(", _corrupt_record: string]", "]")
}

/// The macro's `EXPLAIN` and the engine's `explain()` print the plan with
/// the same printer: `EXPLAIN` shows the checked plan's tree (its sources
/// named after the declared rows), a running query the running plan's
/// tree (the literal's), then its run-time facts.
#[test]
fn both_explain_with_the_plan_printer() {
    let session = Session::new();
    for d in declared(&session) {
        let tree = without_source_names(&d.literal.to_string());
        let explained = d
            .explain
            .split_once("==\n")
            .and_then(|(_, rest)| rest.split_once("\n== Declared ==\n"))
            .map(|(tree, _)| without_source_names(tree))
            .unwrap_or_default();
        assert_eq!(explained, tree, "{}:\n{}", d.name, d.explain);
    }
    let sales = MemoryStream::new(&<top_shops::Sale as weir::Row>::fields());
    let writer = top_shops::TopShops::writer_from(&session, Box::new(sales.clone())).unwrap();
    let plan = writer.plan();
    let q = writer.start().unwrap();
    let text = q.explain();
    q.stop().unwrap();
    assert!(
        text.starts_with(&format!("== Physical Plan ==\n{plan}\n== Run time ==\n")),
        "{text}"
    );
    assert!(text.contains("\nSource stream: MemoryStream"), "{text}");
    assert!(text.contains("\nState: "), "{text}");
    assert!(
        text.contains(" partitions per stateful operator, memory store\n"),
        "{text}"
    );
    assert!(text.contains(" (temporary)\n"), "{text}");
    assert_eq!(plan.to_string(), top_shops::TopShops::plan().to_string());
}

/// The plan each declared query runs (`writer.plan()`) is the one recorded
/// in `tests/it/snapshots/it__plan_agreement__running_plan_<Query>.snap`,
/// recorded from the builder calls `stream_query!` emitted before it built
/// from its literal plan: the checkpoint's query fingerprint reads this
/// plan (names included), so an existing checkpoint keeps working.
#[test]
fn running_plans_are_the_recorded_ones() {
    let session = Session::new();
    for d in declared(&session) {
        let writer = d.writer.unwrap_or_else(|e| panic!("{}: {e}", d.name));
        insta::assert_json_snapshot!(format!("running_plan_{}", short(d.name)), writer.plan());
    }
}

/// What a checkpoint keeps of a declared query: the plan (and its
/// fingerprint) in `<checkpoint>/metadata`, recorded in
/// `tests/it/snapshots/it__plan_agreement__checkpoint_plan_<Query>.snap`
/// from the builder calls `stream_query!` emitted before it built from its
/// literal plan. A restart compares the new query's plan with it, so an
/// existing checkpoint keeps working only while this stays the same.
#[test]
fn checkpoints_keep_the_recorded_plans() {
    let session = Session::new();
    let mut started = 0;
    for d in declared(&session) {
        let name = short(d.name);
        // The queries on memory sources start here (no servers, no files).
        if ![
            "TotalsPerShop",
            "ClickedImpressions",
            "OrdersPerWindow",
            "ShopTotals",
            "TopShops",
            "UserSessions",
        ]
        .contains(&name)
        {
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        let writer = d.writer.unwrap_or_else(|e| panic!("{}: {e}", d.name));
        let q = writer
            .checkpoint_location(dir.path().to_str().unwrap())
            .start()
            .unwrap_or_else(|e| panic!("{}: {e}", d.name));
        q.process_all_available().unwrap();
        q.stop().unwrap();
        let text = std::fs::read_to_string(dir.path().join("metadata")).unwrap();
        let meta: Value = serde_json::from_str(&text).unwrap();
        insta::assert_json_snapshot!(
            format!("checkpoint_plan_{name}"),
            serde_json::json!({"fingerprint": meta["fingerprint"], "plan": meta["plan"]})
        );
        started += 1;
    }
    assert_eq!(started, 6);
}

/// The declared stream-stream join (built from the literal plan) and the
/// same query written with explicit builder calls have one plan and give
/// the same rows.
#[test]
fn a_declared_join_runs_as_its_builder_calls() {
    use joins::{Clicked, ClickedImpressions, Shown};
    use weir::plan::{JoinType, OutputMode};
    use weir::sink::MemorySink;
    use weir::Timestamp;

    let t = |m: u32| {
        Timestamp::parse(&format!("2024-01-01T{:02}:{:02}:00Z", 12 + m / 60, m % 60)).unwrap()
    };
    let shown = |id: i64, m| Shown {
        imp_id: id,
        imp_ts: t(m),
    };
    let clicked = |id: i64, m| Clicked {
        click_imp_id: id,
        click_ts: t(m),
    };
    let batches = [
        (vec![shown(1, 0), shown(2, 1)], vec![clicked(1, 5)]),
        (vec![shown(3, 40)], vec![clicked(2, 30), clicked(1, 6)]),
        (vec![shown(4, 90)], vec![clicked(3, 41), clicked(4, 95)]),
        (vec![shown(5, 200)], vec![]),
    ];
    let run = |declared: bool| {
        let session = Session::new();
        let imps = MemoryStream::new(&<Shown as weir::Row>::fields());
        let clicks = MemoryStream::new(&<Clicked as weir::Row>::fields());
        let writer = if declared {
            ClickedImpressions::writer_from(
                &session,
                Box::new(imps.clone()),
                Box::new(clicks.clone()),
            )
            .unwrap()
        } else {
            let right = session
                .read_stream(clicks.clone())
                .with_watermark("click_ts", "10 minutes");
            session
                .read_stream(imps.clone())
                .with_watermark("imp_ts", "10 minutes")
                .join(
                    right,
                    "click_imp_id = imp_id AND click_ts >= imp_ts AND click_ts <= imp_ts + INTERVAL '15 minutes'",
                    JoinType::LeftSemi,
                )
                .write_stream()
                .output_mode(OutputMode::Append)
                .query_name(ClickedImpressions::NAME)
                .sink(MemorySink::new("clicked_impressions"))
                .late_rows_to(MemorySink::new("late_impressions_and_clicks"))
        };
        let plan = writer.plan();
        let q = writer.start().unwrap();
        let mut out = vec![];
        for (i, c) in &batches {
            imps.add_rows(i).unwrap();
            clicks.add_rows(c).unwrap();
            q.process_all_available().unwrap();
        }
        q.stop().unwrap();
        for (id, b) in session
            .memory_table("clicked_impressions")
            .unwrap()
            .batches()
        {
            out.push((id, ClickedImpressions::rows(&b).unwrap()));
        }
        (plan, out)
    };
    let (declared_plan, declared) = run(true);
    let (builder_plan, built) = run(false);
    assert_eq!(
        plan_differences(&declared_plan, &builder_plan),
        Vec::<String>::new()
    );
    assert_eq!(
        plan_differences(&ClickedImpressions::plan(), &builder_plan),
        Vec::<String>::new()
    );
    // The same rows. Batch by batch only as far as the running query sees
    // both streams' rows of a step together: it may start a batch between
    // the two `add_rows` calls, which moves later output one batch on
    // (seen once in CI), whichever way the query was written.
    let rows = |out: &[(i64, Vec<joins::ClickedImpressionsRow>)]| {
        let mut rows: Vec<_> = out.iter().flat_map(|(_, r)| r.clone()).collect();
        rows.sort_by_key(|r| r.imp_id);
        rows
    };
    assert_eq!(rows(&declared), rows(&built), "{declared:?} {built:?}");
    let mut ids: Vec<i64> = declared
        .iter()
        .flat_map(|(_, r)| r.iter().map(|r| r.imp_id))
        .collect();
    ids.sort();
    assert_eq!(ids, [1, 3, 4], "{declared:?}");
}
