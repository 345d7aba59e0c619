//! Runs every scenario recorded from Apache Spark 3.5.1 (`shared/conformance`,
//! or the directory in `WEIR_CONFORMANCE_DIR`) through weir's run-time
//! builder and compares each micro-batch: output rows, watermark, input rows,
//! event-time statistics and state-operator row counts. Rejected scenarios
//! must be rejected by `start()` with Spark's message.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use weir::arrow::record_batch::RecordBatch;
use weir::plan::{StreamPlan, WatermarkPolicy};
use weir::sink::MemorySink;
use weir::source::{BoxSource, MemoryStream};
use weir::{DataStream, Session, SessionConfig, StreamingQuery, WeirError};

use crate::common::{iso_ms, rows_json};

/// Scenario families this version does not implement yet (issue: state and
/// joins). They must fail with a clear "not implemented" error, not wrongly.
const NOT_YET: &[&str] = &[];

/// Where the recorded Spark scenarios are (`WEIR_CONFORMANCE_DIR`).
pub(crate) fn scenario_dir() -> PathBuf {
    std::env::var_os("WEIR_CONFORMANCE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/conformance"))
}

/// Every recorded scenario (the ones Spark rejects too), by name.
pub(crate) fn scenarios() -> Vec<(String, Value)> {
    let dir = scenario_dir();
    let mut out = Vec::new();
    let rd = std::fs::read_dir(&dir).unwrap_or_else(|e| {
        panic!(
            "conformance dir {}: {e} (set WEIR_CONFORMANCE_DIR)",
            dir.display()
        )
    });
    for e in rd.flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "json") {
            let v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            out.push((p.file_stem().unwrap().to_string_lossy().to_string(), v));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(!out.is_empty(), "no scenarios in {}", dir.display());
    out
}

fn normalize_msg(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// Spark's message, up to the part that names Spark's internal plan.
fn spark_core(msg: &str) -> String {
    let m = msg.split("(window specification").next().unwrap();
    normalize_msg(m)
}

/// A scenario plan's inputs: a memory stream per source, and each static
/// table's rows as batches.
pub(crate) type Inputs = (
    BTreeMap<String, MemoryStream>,
    BTreeMap<String, Vec<RecordBatch>>,
);

/// [`Inputs`] for `plan`.
pub(crate) fn memory_inputs(plan: &StreamPlan) -> Inputs {
    let streams = plan
        .sources
        .iter()
        .map(|(n, s)| (n.clone(), MemoryStream::new(&s.schema)))
        .collect();
    let statics = plan
        .statics
        .iter()
        .map(|(n, s)| {
            let st = MemoryStream::new(&s.schema);
            let rows: Vec<Value> = s
                .rows
                .iter()
                .map(|r| serde_json::to_value(r).unwrap())
                .collect();
            st.add_json(&rows).unwrap();
            let mut src: BoxSource = Box::new(st);
            (n.clone(), src.get_batch(None, &Value::from(0)).unwrap())
        })
        .collect();
    (streams, statics)
}

struct Run {
    session: Session,
    plan: StreamPlan,
    streams: BTreeMap<String, MemoryStream>,
    statics: BTreeMap<String, Vec<RecordBatch>>,
    checkpoint: PathBuf,
}

impl Run {
    /// A run on `setup`: a state store provider, optionally followed by
    /// `/partitions=N` and `/workers=N` (e.g. `memory/partitions=3/workers=4`).
    fn new(plan: StreamPlan, checkpoint: PathBuf, setup: &str) -> Run {
        let mut parts = setup.split('/');
        let provider = parts.next().unwrap();
        let mut conf = SessionConfig {
            no_data_batches: plan.conf.no_data_batches,
            watermark_policy: plan.conf.watermark_policy,
            fsync_checkpoint: false,
            // Batches run only when the harness asks (process_all_available),
            // never between its additions to two streams.
            polling_delay: Duration::from_secs(3600),
            ..SessionConfig::default()
        };
        conf.set("spark.sql.streaming.stateStore.providerClass", provider)
            .unwrap();
        // The RocksDB run also spreads state over several partitions.
        if provider == "rocksdb" {
            conf.set("spark.sql.shuffle.partitions", "4").unwrap();
        }
        for kv in parts {
            let (k, v) = kv.split_once('=').unwrap();
            let key = match k {
                "partitions" => "spark.sql.shuffle.partitions",
                "workers" => "weir.workerThreads",
                other => panic!("unknown setup key {other}"),
            };
            conf.set(key, v).unwrap();
        }
        let session = Session::with_config(conf);
        let (streams, statics) = memory_inputs(&plan);
        Run {
            session,
            plan,
            streams,
            statics,
            checkpoint,
        }
    }

    fn start(&self) -> Result<(StreamingQuery, weir::sink::MemoryTable), WeirError> {
        let sources: BTreeMap<String, BoxSource> = self
            .streams
            .iter()
            .map(|(n, s)| (n.clone(), Box::new(s.clone()) as BoxSource))
            .collect();
        let ds = DataStream::from_plan(
            &self.session,
            self.plan.clone(),
            sources,
            self.statics.clone(),
        )?;
        let sink = MemorySink::new("conformance");
        let table = sink.table();
        let q = ds
            .write_stream()
            .output_mode(self.plan.output_mode)
            .sink(sink)
            .checkpoint_location(self.checkpoint.to_str().unwrap())
            .start()?;
        Ok((q, table))
    }
}

fn sorted(mut v: Vec<Value>) -> Vec<String> {
    let mut s: Vec<String> = v.drain(..).map(|r| r.to_string()).collect();
    s.sort();
    s
}

fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            (x - y).abs() <= 1e-9 * x.abs().max(1.0)
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_value(v, w)))
        }
        _ => a == b,
    }
}

fn same_rows(got: &[Value], want: &[Value]) -> bool {
    if got.len() != want.len() {
        return false;
    }
    let mut unmatched: Vec<&Value> = want.iter().collect();
    for g in got {
        match unmatched.iter().position(|w| same_value(g, w)) {
            Some(i) => {
                unmatched.remove(i);
            }
            None => return false,
        }
    }
    true
}

/// Compares one batch; returns the differences.
/// `input_factor`: how many sources each input row is fed to (a query
/// declared with two sources reading the same rows counts them twice).
fn compare_batch(
    want: &Value,
    batch_id: i64,
    rows: &[Value],
    progress: Option<&weir::StreamingQueryProgress>,
    input_factor: i64,
) -> Vec<String> {
    let mut diffs = Vec::new();
    let want_id = want["batch_id"].as_i64().unwrap();
    if want_id != batch_id {
        diffs.push(format!("batch id {batch_id}, Spark ran {want_id}"));
    }
    let want_rows = want["output"].as_array().cloned().unwrap_or_default();
    if !same_rows(rows, &want_rows) {
        diffs.push(format!(
            "batch {want_id} output\n      weir:  {:?}\n      spark: {:?}",
            sorted(rows.to_vec()),
            sorted(want_rows)
        ));
    }
    let Some(p) = progress else {
        diffs.push(format!("batch {want_id}: no progress reported"));
        return diffs;
    };
    let got_wm = p.event_time.get("watermark").map(|s| iso_ms(s));
    let want_wm = want["watermark"].as_str().map(iso_ms);
    if got_wm != want_wm {
        diffs.push(format!(
            "batch {want_id} watermark {:?}, Spark {:?}",
            p.event_time.get("watermark"),
            want["watermark"]
        ));
    }
    if p.num_input_rows != input_factor * want["num_input_rows"].as_i64().unwrap_or(0) {
        diffs.push(format!(
            "batch {want_id} numInputRows {}, Spark {}",
            p.num_input_rows, want["num_input_rows"]
        ));
    }
    for k in ["min", "max", "avg"] {
        let g = p.event_time.get(k).map(|s| iso_ms(s));
        let w = want["event_time_stats"]
            .get(k)
            .and_then(|v| v.as_str())
            .map(iso_ms);
        if g != w {
            diffs.push(format!("batch {want_id} eventTime.{k} {g:?}, Spark {w:?}"));
        }
    }
    let want_ops = want["state_operators"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if want_ops.len() != p.state_operators.len() {
        diffs.push(format!(
            "batch {want_id}: {} state operators, Spark {}",
            p.state_operators.len(),
            want_ops.len()
        ));
    } else {
        for (g, w) in p.state_operators.iter().zip(&want_ops) {
            let got = [
                g.num_rows_total,
                g.num_rows_updated,
                g.num_rows_removed,
                g.num_rows_dropped_by_watermark,
            ];
            let exp: Vec<i64> = [
                "numRowsTotal",
                "numRowsUpdated",
                "numRowsRemoved",
                "numRowsDroppedByWatermark",
            ]
            .iter()
            .map(|k| w[k].as_i64().unwrap_or(-1))
            .collect();
            if got.to_vec() != exp {
                diffs.push(format!("batch {want_id} state [total, updated, removed, dropped] {got:?}, Spark {exp:?}"));
            }
        }
    }
    diffs
}

/// Runs one scenario; Ok(()) when weir matches Spark batch for batch. Its
/// checkpoint is `checkpoint`, or a new local directory.
fn run_scenario(sc: &Value, provider: &str, checkpoint: Option<PathBuf>) -> Result<(), String> {
    let plan: StreamPlan =
        serde_json::from_value(sc["plan"].clone()).map_err(|e| format!("plan: {e}"))?;
    let chk = tempfile::tempdir().unwrap();
    let checkpoint = checkpoint.unwrap_or_else(|| chk.path().join("chk"));
    let run = Run::new(plan, checkpoint, provider);
    if let Some(msg) = sc.get("rejected").and_then(|m| m.as_str()) {
        return match run.start() {
            Ok((q, _)) => {
                q.stop().unwrap();
                Err(format!("started, but Spark rejects it: {msg}"))
            }
            Err(WeirError::Invalid(v)) => {
                let want = spark_core(msg);
                if v.iter()
                    .any(|v| normalize_msg(&v.message).starts_with(&want))
                {
                    Ok(())
                } else {
                    Err(format!(
                        "rejected with {:?}, Spark says {msg}",
                        v.iter().map(|v| &v.message).collect::<Vec<_>>()
                    ))
                }
            }
            Err(e) => Err(format!("failed with {e}, Spark rejects it with: {msg}")),
        };
    }
    run_batches(sc, &run, &|r: &Run| r.start(), 1)
}

type Starter<'a> = &'a dyn Fn(&Run) -> Result<(StreamingQuery, weir::sink::MemoryTable), WeirError>;

/// Feeds a scenario's input batches to every stream of `run` and compares
/// each micro-batch with Spark's; restarts go through `start` again.
fn run_batches(sc: &Value, run: &Run, start: Starter, input_factor: i64) -> Result<(), String> {
    let (mut q, mut table) = start(run).map_err(|e| format!("start: {e}"))?;
    // The query's first look for data happens before any input is added,
    // so no batch sees one stream's rows without another's.
    q.process_all_available()
        .map_err(|e| format!("start: {e}"))?;
    let batches = sc["batches"].as_array().unwrap();
    let mut diffs = Vec::new();
    let mut i = 0;
    let mut seen = -1i64;
    while i < batches.len() {
        let b = &batches[i];
        if b["kind"] == "restart" {
            q.stop().unwrap();
            let (q2, t2) = start(run).map_err(|e| format!("restart: {e}"))?;
            q2.process_all_available()
                .map_err(|e| format!("restart: {e}"))?;
            q = q2;
            table = t2;
            i += 1;
            continue;
        }
        // One input file, then every batch Spark ran for it.
        let input: Vec<Value> = b["input"].as_array().cloned().unwrap_or_default();
        for s in run.streams.values() {
            s.add_json(&input).map_err(|e| format!("input: {e}"))?;
        }
        q.process_all_available()
            .map_err(|e| format!("batch {}: {e}", b["batch_id"]))?;
        let mut want = vec![b];
        let mut j = i + 1;
        while j < batches.len() && batches[j]["kind"] == "no_data" {
            want.push(&batches[j]);
            j += 1;
        }
        let got: Vec<(i64, Vec<RecordBatch>)> = table
            .batches()
            .into_iter()
            .filter(|(id, _)| *id > seen)
            .collect();
        if got.len() != want.len() {
            diffs.push(format!(
                "after input {}: weir ran batches {:?}, Spark ran {:?}",
                b["input_index"],
                got.iter().map(|g| g.0).collect::<Vec<_>>(),
                want.iter()
                    .map(|w| w["batch_id"].as_i64().unwrap())
                    .collect::<Vec<_>>()
            ));
        }
        let progress = q.recent_progress();
        for ((id, rows), w) in got.iter().zip(&want) {
            let p = progress.iter().find(|p| p.batch_id == *id);
            diffs.extend(compare_batch(w, *id, &rows_json(rows), p, input_factor));
        }
        if let Some(last) = got.last() {
            seen = last.0;
        }
        i = j;
    }
    q.stop().unwrap();
    if let Some(e) = q.exception() {
        diffs.push(format!("query failed: {e}"));
    }
    if diffs.is_empty() {
        Ok(())
    } else {
        Err(diffs.join("\n    "))
    }
}

fn conformance(provider: &str) {
    conformance_with(provider, &|_| None)
}

/// The suite on `provider` with each scenario's checkpoint at
/// `checkpoint(scenario name)`: a location such as
/// `s3://bucket/prefix/<name>` (tests/it/s3.rs runs it so).
pub(crate) fn conformance_at(provider: &str, checkpoint: &dyn Fn(&str) -> String) {
    conformance_with(provider, &|name| Some(PathBuf::from(checkpoint(name))))
}

fn conformance_with(provider: &str, checkpoint: &dyn Fn(&str) -> Option<PathBuf>) {
    let mut failures = Vec::new();
    let mut by_family: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for (name, sc) in scenarios() {
        let family = name.split('_').next().unwrap_or("").to_string();
        let pending = NOT_YET.iter().any(|p| name.starts_with(p)) && sc.get("rejected").is_none();
        let result = run_scenario(&sc, provider, checkpoint(&name));
        let e = by_family.entry(family).or_default();
        e.1 += 1;
        match (&result, pending) {
            (Ok(()), false) => e.0 += 1,
            (Err(msg), true) if msg.contains("not implemented yet") => {}
            (Ok(()), true) => failures.push(format!("{name}: passes now; remove it from NOT_YET")),
            (Err(msg), true) => failures.push(format!(
                "{name}: expected a clear not-implemented error, got:\n    {msg}"
            )),
            (Err(msg), false) => failures.push(format!("{name}:\n    {msg}")),
        }
    }
    eprintln!("conformance on {provider} (passed/total by family): {by_family:?}");
    assert!(
        failures.is_empty(),
        "{} scenario(s) differ from Spark:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn conformance_with_spark_3_5_1() {
    conformance("memory");
}

/// The scenarios with the state split over 1, 2, 3 and 8 partitions, run
/// by 1 and 4 workers: the union of the partitions' output is Spark's, batch
/// for batch, whatever the split.
#[test]
fn conformance_across_state_partitions_and_workers() {
    for partitions in [1, 2, 3, 8] {
        for workers in [1, 4] {
            conformance(&format!("memory/partitions={partitions}/workers={workers}"));
        }
    }
    #[cfg(feature = "rocksdb")]
    for partitions in [1, 3] {
        conformance(&format!("rocksdb/partitions={partitions}/workers=2"));
    }
}

/// The same scenarios on the RocksDB state store.
#[cfg(feature = "rocksdb")]
#[test]
fn conformance_with_spark_3_5_1_on_rocksdb() {
    conformance("rocksdb");
}

#[test]
fn watermark_policy_names_match_spark() {
    let p: StreamPlan = serde_json::from_value(serde_json::json!({
        "sources": {"s": {"schema": []}}, "nodes": [], "result": "r", "output_mode": "append",
        "conf": {"watermark_policy": "max"}}))
    .unwrap();
    assert_eq!(p.conf.watermark_policy, WatermarkPolicy::Max);
    assert!(p.conf.no_data_batches);
}

/// One scenario by file name.
fn scenario(name: &str) -> Value {
    let p = scenario_dir().join(format!("{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

weir::stream_query! {
    /// Spark's ad-click join (`stream_stream_*_join_wm_range`), declared:
    /// impressions and clicks from one stream of events, each side with its
    /// watermark, clicks up to 15 minutes after the impression.
    query AdClicks {
        source: memory,
        schema: AdEvent { side: String, ad_id: i32, ts: Timestamp },
        filter: side == "imp",
        select: { imp_ad_id: ad_id, imp_ts: ts },
        watermark: imp_ts delay "10 minutes",
        join: {
            how: left_outer,
            stream: {
                source: memory,
                schema: ClickEvent { side: String, ad_id: i32, ts: Timestamp },
                filter: side == "click",
                select: { click_ad_id: ad_id, click_ts: ts },
                watermark: click_ts delay "20 minutes",
            },
            on: click_ad_id == imp_ad_id && click_ts >= imp_ts && click_ts <= imp_ts + interval("15 minutes"),
        },
        sink: memory(name = "ad_clicks"),
    }
}

weir::stream_query! {
    /// The same join, inner and full outer (`how:` is the only difference).
    query AdClicksFull {
        source: memory,
        schema: FullAdEvent { side: String, ad_id: i32, ts: Timestamp },
        filter: side == "imp",
        select: { imp_ad_id: ad_id, imp_ts: ts },
        watermark: imp_ts delay "10 minutes",
        join: {
            how: full_outer,
            stream: {
                source: memory,
                schema: FullClickEvent { side: String, ad_id: i32, ts: Timestamp },
                filter: side == "click",
                select: { click_ad_id: ad_id, click_ts: ts },
                watermark: click_ts delay "20 minutes",
            },
            on: click_ad_id == imp_ad_id && click_ts >= imp_ts && click_ts <= imp_ts + interval("15 minutes"),
        },
        sink: memory(name = "ad_clicks_full"),
    }
}

weir::stream_query! {
    /// Spark's `stream_static_left_outer_join`, declared: events enriched
    /// with a dimension table, `USING (key)`.
    query EnrichedEvents {
        source: memory,
        schema: KeyedEvent { ts: Timestamp, key: String, value: i64 },
        join: {
            how: left_outer,
            table: { source: memory, schema: Dim { key: String, name: String, tier: i32 } },
            using: [key],
        },
        sink: memory(name = "enriched_events"),
    }
}

/// A run of a declared query on the scenario's input: each declared memory
/// source gets every input row (the scenario's one stream, read twice).
fn declared_run(sc: &Value, plan: StreamPlan, provider: &str, chk: &std::path::Path) -> Run {
    let spark: StreamPlan = serde_json::from_value(sc["plan"].clone()).unwrap();
    let mut plan = plan;
    plan.conf = spark.conf.clone();
    let mut run = Run::new(plan, chk.join("chk"), provider);
    // The static table's rows come from the scenario.
    let spark_run = Run::new(spark, chk.join("unused"), provider);
    run.statics = spark_run.statics;
    run
}

/// The declared stream-stream joins give Spark's output batch for batch.
#[test]
fn declared_stream_stream_joins_match_spark() {
    for provider in ["memory", "rocksdb"] {
        if provider == "rocksdb" && !cfg!(feature = "rocksdb") {
            continue;
        }
        for (name, plan, sink) in [
            (
                "stream_stream_left_outer_join_wm_range",
                AdClicks::plan(),
                "ad_clicks",
            ),
            (
                "stream_stream_full_outer_join_wm_range",
                AdClicksFull::plan(),
                "ad_clicks_full",
            ),
        ] {
            let sc = scenario(name);
            let chk = tempfile::tempdir().unwrap();
            let run = declared_run(&sc, plan, provider, chk.path());
            assert_eq!(run.streams.len(), 2, "{:?}", run.streams.keys());
            let start = |r: &Run| {
                // As the builder names them: the impressions are `stream`,
                // the clicks (the joined stream) `stream_1`.
                let mut streams = r.streams.iter();
                let (l, left) = streams.next().unwrap();
                let (c, right) = streams.next().unwrap();
                assert_eq!((l.as_str(), c.as_str()), ("stream", "stream_1"));
                let (left, right): (BoxSource, BoxSource) =
                    (Box::new(left.clone()), Box::new(right.clone()));
                let w = if sink == "ad_clicks" {
                    AdClicks::writer_from(&r.session, left, right)?
                } else {
                    AdClicksFull::writer_from(&r.session, left, right)?
                };
                let q = w
                    .checkpoint_location(r.checkpoint.to_str().unwrap())
                    .start()?;
                let table = r
                    .session
                    .memory_table(sink)
                    .expect("the declared memory sink");
                Ok((q, table))
            };
            if let Err(diffs) = run_batches(&sc, &run, &start, 2) {
                panic!("{name} declared with stream_query! on {provider}:\n    {diffs}");
            }
        }
    }
}

/// The declared stream-static join gives Spark's output batch for batch.
#[test]
fn declared_stream_static_join_matches_spark() {
    let sc = scenario("stream_static_left_outer_join");
    let chk = tempfile::tempdir().unwrap();
    let run = declared_run(&sc, EnrichedEvents::plan(), "memory", chk.path());
    let start = |r: &Run| {
        let source: BoxSource = Box::new(r.streams.values().next().unwrap().clone());
        let batches = r.statics.values().next().unwrap().clone();
        let table = weir::StaticTable::from_batches(batches[0].schema(), batches);
        let q = EnrichedEvents::writer_from(&r.session, source, table)?
            .checkpoint_location(r.checkpoint.to_str().unwrap())
            .start()?;
        Ok((q, r.session.memory_table("enriched_events").unwrap()))
    };
    if let Err(diffs) = run_batches(&sc, &run, &start, 1) {
        panic!("stream_static_left_outer_join declared with stream_query!:\n    {diffs}");
    }
    let fields: Vec<String> = <EnrichedEventsRow as weir::Row>::fields()
        .into_iter()
        .map(|f| f.name)
        .collect();
    assert_eq!(fields, ["key", "ts", "value", "name", "tier"]);
}
