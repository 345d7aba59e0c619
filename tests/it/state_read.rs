//! Reading a query's state (`weir::state::read`, Spark's state data source):
//! for every conformance scenario and batch the rows read back are the
//! batch's `numRowsTotal`, values decode to what the query emitted, join
//! sides and session windows read, a checkpoint on S3 reads like a local
//! one, and the errors say what to do.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use weir::arrow::array::{AsArray, RecordBatch};
use weir::arrow::datatypes::{Field, Schema};
use weir::plan::{OutputMode, StreamPlan};
use weir::sink::MemorySink;
use weir::source::{BoxSource, MemoryStream};
use weir::state::read::{StateReader, StateSnapshot};
use weir::{DataStream, Session, SessionConfig, StreamingQuery};

use crate::common::rows_json;

/// The scenarios Spark ran (not the ones it rejects), by name.
fn scenarios() -> Vec<(String, Value)> {
    let out: Vec<(String, Value)> = crate::conformance::scenarios()
        .into_iter()
        .filter(|(_, v)| v.get("rejected").is_none())
        .collect();
    assert!(!out.is_empty());
    out
}

fn scenario(name: &str) -> Value {
    scenarios()
        .into_iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no scenario {name}"))
        .1
}

/// A session for the scenario runs: `partitions` state partitions, batches
/// only when the test asks.
fn conf(partitions: usize, plan: &StreamPlan) -> SessionConfig {
    let mut conf = SessionConfig {
        no_data_batches: plan.conf.no_data_batches,
        watermark_policy: plan.conf.watermark_policy,
        fsync_checkpoint: false,
        polling_delay: Duration::from_secs(3600),
        ..SessionConfig::default()
    };
    conf.set("spark.sql.shuffle.partitions", &partitions.to_string())
        .unwrap();
    conf
}

/// One scenario's query, started (again) on checkpoint `chk`.
struct Scenario {
    session: Session,
    plan: StreamPlan,
    streams: BTreeMap<String, MemoryStream>,
    statics: BTreeMap<String, Vec<RecordBatch>>,
    chk: String,
}

impl Scenario {
    fn new(sc: &Value, conf: SessionConfig, chk: &str) -> Scenario {
        let plan: StreamPlan = serde_json::from_value(sc["plan"].clone()).unwrap();
        let (streams, statics) = crate::conformance::memory_inputs(&plan);
        Scenario {
            session: Session::with_config(conf),
            plan,
            streams,
            statics,
            chk: chk.to_string(),
        }
    }

    fn start(&self) -> (StreamingQuery, weir::sink::MemoryTable) {
        let sources = self
            .streams
            .iter()
            .map(|(n, s)| (n.clone(), Box::new(s.clone()) as BoxSource))
            .collect();
        let ds = DataStream::from_plan(
            &self.session,
            self.plan.clone(),
            sources,
            self.statics.clone(),
        )
        .unwrap();
        let sink = MemorySink::new("state_read");
        let table = sink.table();
        let q = ds
            .write_stream()
            .output_mode(self.plan.output_mode)
            .sink(sink)
            .checkpoint_location(&self.chk)
            .start()
            .unwrap();
        q.process_all_available().unwrap();
        (q, table)
    }

    /// Runs every input (and restart) of the scenario; after each, `check`
    /// sees the query and the batches that input ran (id, rows, progress).
    fn run(&self, sc: &Value, check: &mut dyn FnMut(&StreamingQuery, &[Ran])) {
        let (mut q, mut table) = self.start();
        let mut seen = -1;
        for b in sc["batches"].as_array().unwrap() {
            match b["kind"].as_str() {
                Some("restart") => {
                    q.stop().unwrap();
                    (q, table) = self.start();
                    continue;
                }
                Some("no_data") => continue,
                _ => {}
            }
            let input: Vec<Value> = b["input"].as_array().cloned().unwrap_or_default();
            for s in self.streams.values() {
                s.add_json(&input).unwrap();
            }
            q.process_all_available().unwrap();
            let progress = q.recent_progress();
            let ran: Vec<Ran> = table
                .batches()
                .into_iter()
                .filter(|(id, _)| *id > seen)
                .map(|(id, rows)| Ran {
                    id,
                    rows,
                    totals: progress
                        .iter()
                        .find(|p| p.batch_id == id)
                        .expect("the batch's progress")
                        .state_operators
                        .iter()
                        // Progress lists the downstream operator first.
                        .rev()
                        .map(|o| o.num_rows_total)
                        .collect(),
                })
                .collect();
            if let Some(last) = ran.last() {
                seen = last.id;
            }
            check(&q, &ran);
        }
        q.stop().unwrap();
        assert!(q.exception().is_none(), "{:?}", q.exception());
    }
}

/// One batch a scenario ran: its id, output and each state operator's
/// `numRowsTotal` (by operator id).
struct Ran {
    id: i64,
    rows: Vec<RecordBatch>,
    totals: Vec<i64>,
}

/// A store's rows with the key's and value's fields as columns, and
/// `partition_id`.
fn flattened(snapshot: &StateSnapshot, store: &str) -> Vec<Value> {
    let s = snapshot.store(store).expect("the store");
    let mut out = Vec::new();
    for b in &s.batches {
        let mut fields: Vec<Field> = Vec::new();
        let mut cols = Vec::new();
        for name in ["key", "value"] {
            let st = b.column_by_name(name).unwrap().as_struct();
            for (f, c) in st.fields().iter().zip(st.columns()) {
                fields.push(f.as_ref().clone());
                cols.push(c.clone());
            }
        }
        fields.push(Field::new(
            "partition_id",
            weir::arrow::datatypes::DataType::Int32,
            false,
        ));
        cols.push(b.column_by_name("partition_id").unwrap().clone());
        let flat = RecordBatch::try_new(std::sync::Arc::new(Schema::new(fields)), cols).unwrap();
        out.extend(rows_json(&[flat]));
    }
    out
}

/// Every scenario on 3 state partitions: at every batch, each stateful
/// operator's state read back has `numRowsTotal` rows (a join's both sides
/// together), spread over the partitions; reading without a batch id reads
/// the latest committed; an aggregation's emitted rows in update and
/// complete mode are its state's values.
#[test]
fn every_scenarios_state_at_every_batch_has_num_rows_total_rows() {
    every_scenarios_state_on("memory");
}

/// The same on the RocksDB state store (its versions are the same files).
#[cfg(feature = "rocksdb")]
#[test]
fn every_scenarios_state_on_rocksdb_has_num_rows_total_rows() {
    every_scenarios_state_on("rocksdb");
}

fn every_scenarios_state_on(provider: &str) {
    let mut checked = BTreeMap::new();
    let mut values_checked = 0;
    for (name, sc) in scenarios() {
        let dir = tempfile::tempdir().unwrap();
        let chk = dir.path().join("chk").display().to_string();
        let plan: StreamPlan = serde_json::from_value(sc["plan"].clone()).unwrap();
        let mut c = conf(3, &plan);
        c.set("spark.sql.streaming.stateStore.providerClass", provider)
            .unwrap();
        let run = Scenario::new(&sc, c, &chk);
        let mut reads = 0;
        run.run(&sc, &mut |_q, ran| {
            for r in ran {
                for (op, total) in r.totals.iter().enumerate() {
                    let s = weir::state::read::read(&chk, op, Some(r.id))
                        .unwrap_or_else(|e| panic!("{name} batch {} operator {op}: {e}", r.id));
                    assert_eq!(
                        s.num_rows() as i64,
                        *total,
                        "{name}: batch {} operator {op} ({})",
                        r.id,
                        s.operator.name
                    );
                    assert_eq!(s.batch_id, r.id);
                    for st in &s.stores {
                        for b in &st.batches {
                            let p = b.column_by_name("partition_id").unwrap();
                            let p = p.as_primitive::<weir::arrow::datatypes::Int32Type>();
                            assert!(p.iter().all(|p| p.is_some_and(|p| (0..3).contains(&p))));
                        }
                    }
                    reads += 1;
                    // An aggregation's emitted rows are its state's values
                    // (update: the groups it changed; complete: all).
                    let last_op = r.totals.len() == 1;
                    if last_op
                        && s.operator.name == "stateStoreSave"
                        && plan.output_mode != OutputMode::Append
                    {
                        let state = flattened(&s, "default");
                        for row in rows_json(&r.rows) {
                            let found = state.iter().any(|st| {
                                row.as_object()
                                    .unwrap()
                                    .iter()
                                    .all(|(k, v)| st.get(k) == Some(v))
                            });
                            assert!(found, "{name} batch {}: {row} is not in {state:?}", r.id);
                            values_checked += 1;
                        }
                    }
                }
            }
        });
        if reads > 0 {
            // The latest committed batch is the default.
            let meta = weir::state::read::read_metadata(&chk).unwrap();
            let latest = meta.latest_batch_id.unwrap();
            for op in &meta.operators {
                let s = weir::state::read::read(&chk, op.id, None).unwrap();
                assert_eq!(s.batch_id, latest);
                assert_eq!(op.max_batch_id, Some(latest));
                assert_eq!(op.min_batch_id, Some(0), "{name}: all batches kept");
            }
            assert_eq!(meta.partitions, 3);
        }
        if reads == 0 {
            // A stateless query: no operator to read, and the error says so.
            assert!(weir::state::read::read_metadata(&chk)
                .unwrap()
                .operators
                .is_empty());
            let err = weir::state::read::read(&chk, 0, None)
                .unwrap_err()
                .to_string();
            assert!(err.contains("keeps no state"), "{name}: {err}");
        }
        checked.insert(name, reads);
    }
    eprintln!("state reads per scenario on {provider}: {checked:?}");
    assert!(values_checked > 10, "{values_checked} emitted rows checked");
    for must in [
        "key_count_complete",
        "dedup_with_watermark",
        "stream_stream_inner_join_wm_range",
        "stream_stream_left_outer_join_wm_range",
        "restart_tumbling_append_wm",
    ] {
        assert!(checked[must] > 0, "{must} read no state");
    }
}

/// The metadata names each operator, its stores and their key and value
/// schemas, and the state reads as Spark's columns: a windowed count's key
/// is the window, its value the count.
#[test]
fn metadata_and_columns_of_an_aggregation_and_a_dedup() {
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk").display().to_string();
    let sc = scenario("tumbling_count_update_wm");
    let plan: StreamPlan = serde_json::from_value(sc["plan"].clone()).unwrap();
    Scenario::new(&sc, conf(2, &plan), &chk).run(&sc, &mut |_, _| {});
    let meta = weir::state::read::read_metadata(&chk).unwrap();
    assert_eq!(meta.operators.len(), 1);
    let op = &meta.operators[0];
    assert_eq!(op.name, "stateStoreSave");
    assert_eq!(op.stores.len(), 1);
    assert_eq!(op.stores[0].name, "default");
    let key: Vec<&str> = op.stores[0]
        .key_schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    let value: Vec<&str> = op.stores[0]
        .value_schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    assert_eq!(key, ["window", "key"], "{op:?}");
    assert_eq!(value, ["count"], "{op:?}");
    let s = weir::state::read::read(&chk, 0, None).unwrap();
    let schema = s.store("default").unwrap().schema.clone();
    let cols: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(cols, ["key", "value", "partition_id"]);

    let sc = scenario("dedup_within_watermark");
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk").display().to_string();
    let plan: StreamPlan = serde_json::from_value(sc["plan"].clone()).unwrap();
    Scenario::new(&sc, conf(2, &plan), &chk).run(&sc, &mut |_, _| {});
    let meta = weir::state::read::read_metadata(&chk).unwrap();
    assert_eq!(meta.operators[0].name, "dedupeWithinWatermark");
    let mut rows = Vec::new();
    for b in 0..=meta.latest_batch_id.unwrap() {
        rows.extend(flattened(
            &weir::state::read::read(&chk, 0, Some(b)).unwrap(),
            "default",
        ));
    }
    assert!(!rows.is_empty());
    for row in rows {
        // Kept until the watermark passes the first event time plus the
        // delay; the key is the dedup column.
        assert!(row["expires_at"].is_string(), "{row}");
        assert!(row["id"].is_string(), "{row}");
    }
}

/// SQL over the state: the counts of a complete-mode aggregation, queried
/// with DataFusion, are the last batch's output.
#[test]
fn state_can_be_queried_with_sql() {
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk").display().to_string();
    let sc = scenario("key_count_complete");
    let plan: StreamPlan = serde_json::from_value(sc["plan"].clone()).unwrap();
    let mut last = Vec::new();
    Scenario::new(&sc, conf(3, &plan), &chk).run(&sc, &mut |_, ran| {
        if let Some(r) = ran.last() {
            last = rows_json(&r.rows);
        }
    });
    let s = weir::state::read::read(&chk, 0, None).unwrap();
    let out = s
        .sql("SELECT key.key AS key, value.count AS count FROM state ORDER BY 1")
        .unwrap();
    last.sort_by_key(|r| r["key"].as_str().unwrap().to_string());
    let want: Vec<String> = last.iter().map(|r| r.to_string()).collect();
    let got: Vec<String> = rows_json(&out).iter().map(|r| r.to_string()).collect();
    assert_eq!(got, want);
    assert!(!got.is_empty());
    // The table provider, registered by the caller.
    let t = weir::state::read::table(&chk, 0, None).unwrap();
    assert_eq!(t.schema().fields().len(), 3);
}

/// A stream-stream join's sides read one at a time (Spark's `joinSide`):
/// keys are the join key, values the side's row and whether it matched;
/// together they are `numRowsTotal`. Reading a join whole as one table is
/// refused with what to choose.
#[test]
fn both_sides_of_a_join_read() {
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk").display().to_string();
    let sc = scenario("stream_stream_left_outer_join_wm_range");
    let plan: StreamPlan = serde_json::from_value(sc["plan"].clone()).unwrap();
    let mut last_total = 0;
    Scenario::new(&sc, conf(2, &plan), &chk).run(&sc, &mut |_, ran| {
        if let Some(r) = ran.last() {
            last_total = r.totals[0];
        }
    });
    let meta = weir::state::read::read_metadata(&chk).unwrap();
    let op = &meta.operators[0];
    assert_eq!(op.name, "symmetricHashJoin");
    let names: Vec<&str> = op.stores.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["left", "right"]);
    let mut n = 0;
    for side in ["left", "right"] {
        let s = StateReader::new(&chk).store_name(side).read().unwrap();
        assert_eq!(s.stores.len(), 1);
        n += s.num_rows();
        let store = op.stores.iter().find(|s| s.name == side).unwrap();
        let value: Vec<&str> = store
            .value_schema
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        assert_eq!(value.last(), Some(&"matched"), "{value:?}");
        assert_eq!(store.key_schema.fields().len(), 1, "{store:?}");
        for row in flattened(&s, side) {
            assert!(row["matched"].is_boolean(), "{row}");
        }
        // One side is one table.
        assert!(s.into_table().is_ok());
    }
    assert_eq!(n as i64, last_total);
    assert!(last_total > 0, "the scenario ends with rows in state");
    let whole = weir::state::read::read(&chk, 0, None).unwrap();
    let err = whole.into_table().unwrap_err().to_string();
    assert!(
        err.contains("store_name") && err.contains("\"left\""),
        "{err}"
    );
    let err = StateReader::new(&chk)
        .store_name("default")
        .read()
        .unwrap_err()
        .to_string();
    assert!(err.contains("no store named \"default\""), "{err}");
}

/// Session windows: the key is the grouping key without the session, the
/// value the session window and its aggregates; open sessions are in state
/// until the watermark closes them.
#[test]
fn session_windows_read() {
    use weir::functions::{col, count_star, session_window, sum};
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk");
    let fields = vec![
        weir::plan::Field::new("ts", weir::plan::DataType::Timestamp),
        weir::plan::Field::new("user", weir::plan::DataType::String),
        weir::plan::Field::new("n", weir::plan::DataType::Int64),
    ];
    let stream = MemoryStream::new(&fields);
    let mut c = SessionConfig {
        fsync_checkpoint: false,
        ..SessionConfig::default()
    };
    c.set("spark.sql.shuffle.partitions", "3").unwrap();
    let q = Session::with_config(c)
        .read_stream(stream.clone())
        .with_watermark("ts", "1 minute")
        .group_by(vec![session_window("ts", "5 minutes"), col("user")])
        .agg(vec![count_star("events"), sum("n", "total")])
        .write_stream()
        .output_mode(OutputMode::Append)
        .sink(MemorySink::new("sessions_state"))
        .checkpoint_location(chk.to_str().unwrap())
        .start()
        .unwrap();
    let ev = |ts: &str, user: &str, n: i64| json!({"ts": ts, "user": user, "n": n});
    stream
        .add_json(&[
            ev("2024-01-01T12:00:00Z", "a", 1),
            ev("2024-01-01T12:03:00Z", "a", 2),
            ev("2024-01-01T12:01:00Z", "b", 5),
            ev("2024-01-01T12:20:00Z", "c", 7),
        ])
        .unwrap();
    q.process_all_available().unwrap();
    let chk = chk.display().to_string();
    let sessions = |batch: i64| {
        let s = weir::state::read::read(&chk, 0, Some(batch)).unwrap();
        assert_eq!(s.operator.name, "sessionWindowStateStoreSaveExec");
        let total = q
            .recent_progress()
            .iter()
            .find(|p| p.batch_id == batch)
            .unwrap()
            .state_operators[0]
            .num_rows_total;
        assert_eq!(s.num_rows() as i64, total);
        let mut rows: Vec<(String, Value, i64, i64)> = flattened(&s, "default")
            .into_iter()
            .map(|r| {
                (
                    r["user"].as_str().unwrap().to_string(),
                    r["session_window"].clone(),
                    r["events"].as_i64().unwrap(),
                    r["total"].as_i64().unwrap(),
                )
            })
            .collect();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        rows
    };
    // After batch 0 every session is open; the no-data batch 1 (the
    // watermark at 12:19) closes and evicts a's and b's.
    let c = (
        "c".to_string(),
        json!({"start": "2024-01-01T12:20:00Z", "end": "2024-01-01T12:25:00Z"}),
        1,
        7,
    );
    assert_eq!(sessions(1), vec![c.clone()]);
    assert_eq!(
        sessions(0),
        vec![
            (
                "a".to_string(),
                json!({"start": "2024-01-01T12:00:00Z", "end": "2024-01-01T12:08:00Z"}),
                2,
                3
            ),
            (
                "b".to_string(),
                json!({"start": "2024-01-01T12:01:00Z", "end": "2024-01-01T12:06:00Z"}),
                1,
                5
            ),
            c,
        ]
    );
    let meta = weir::state::read::read_metadata(&chk).unwrap();
    let key: Vec<&str> = meta.operators[0].stores[0]
        .key_schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    assert_eq!(key, ["user"]);
    q.stop().unwrap();
}

/// The errors: not a checkpoint, an unknown operator, a batch not committed
/// yet, a batch no longer retained.
#[test]
fn errors_say_what_is_wrong_and_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let err = weir::state::read::read(dir.path().to_str().unwrap(), 0, None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a query checkpoint"), "{err}");
    let err = weir::state::read::read_metadata("/nonexistent/weir/chk")
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a query checkpoint"), "{err}");

    // A windowed count over many batches, keeping the state of 2.
    let chk = dir.path().join("chk").display().to_string();
    let sc = scenario("tumbling_count_update_wm");
    let plan: StreamPlan = serde_json::from_value(sc["plan"].clone()).unwrap();
    let mut c = conf(2, &plan);
    c.set("spark.sql.streaming.minBatchesToRetain", "2")
        .unwrap();
    let run = Scenario::new(&sc, c, &chk);
    let (q, _) = run.start();
    let stream = run.streams.values().next().unwrap();
    for i in 0..14 {
        stream
            .add_json(&[json!({"ts": format!("2024-01-01T12:{i:02}:00Z"), "key": "k", "value": i})])
            .unwrap();
        q.process_all_available().unwrap();
    }
    let latest = q.last_progress().unwrap().batch_id;
    q.stop().unwrap();
    let err = weir::state::read::read(&chk, 3, None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("operator 3 does not exist") && err.contains("0 (stateStoreSave)"),
        "{err}"
    );
    let err = weir::state::read::read(&chk, 0, Some(latest + 1))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!(
            "batch {} has not committed: the latest committed batch is {latest}",
            latest + 1
        )),
        "{err}"
    );
    let meta = weir::state::read::read_metadata(&chk).unwrap();
    let min = meta.operators[0].min_batch_id.unwrap();
    assert!(min > 0, "old state was purged: {meta:?}");
    let err = weir::state::read::read(&chk, 0, Some(min - 1))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!(
            "the state of batch {} is no longer retained: the oldest batch whose state is kept is {min}",
            min - 1
        )),
        "{err}"
    );
    for b in min..=latest {
        weir::state::read::read(&chk, 0, Some(b)).unwrap();
    }
}

// ---- a checkpoint on S3 ----

/// Every row of every store of every operator at every batch, sorted.
fn all_state(chk: &str, s3: Option<weir::storage::S3Settings>) -> Vec<String> {
    let mut r = StateReader::new(chk);
    if let Some(s) = &s3 {
        r = r.s3(s.clone());
    }
    let meta = r.metadata().unwrap();
    let mut out = Vec::new();
    for op in &meta.operators {
        for b in op.min_batch_id.unwrap()..=op.max_batch_id.unwrap() {
            let s = r.clone().operator(op.id).batch_id(b).read().unwrap();
            for st in &s.stores {
                for row in flattened(&s, &st.name) {
                    out.push(format!("{} {b} {} {row}", op.id, st.name));
                }
            }
        }
    }
    out.sort();
    out
}

/// A join and an aggregation checkpointed on S3 read the same state, batch
/// for batch, as the same queries checkpointed locally.
#[test]
fn a_checkpoint_on_s3_reads_like_a_local_one() {
    let bucket = crate::s3::new_bucket();
    let s3 = crate::s3::settings();
    for name in [
        "stream_stream_inner_join_wm_range",
        "tumbling_count_append_wm",
    ] {
        let sc = scenario(name);
        let plan: StreamPlan = serde_json::from_value(sc["plan"].clone()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let local = dir.path().join("chk").display().to_string();
        Scenario::new(&sc, conf(2, &plan), &local).run(&sc, &mut |_, _| {});
        let remote = format!("s3://{bucket}/{name}");
        let mut c = conf(2, &plan);
        c.s3 = s3.clone();
        let mut totals = Vec::new();
        Scenario::new(&sc, c, &remote).run(&sc, &mut |_, ran| {
            for r in ran {
                totals.push((r.id, r.totals.clone()));
            }
        });
        for (b, t) in &totals {
            for (op, total) in t.iter().enumerate() {
                let s = StateReader::new(&remote)
                    .s3(s3.clone())
                    .operator(op)
                    .batch_id(*b)
                    .read()
                    .unwrap();
                assert_eq!(s.num_rows() as i64, *total, "{name} batch {b}");
            }
        }
        let want = all_state(&local, None);
        assert!(!want.is_empty(), "{name}");
        assert_eq!(all_state(&remote, Some(s3.clone())), want, "{name}");
    }
}

/// Reading never writes: a checkpoint directory is the same before and
/// after (a running query may be using it).
#[test]
fn reading_writes_nothing() {
    fn files(p: &Path) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(p).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                out.extend(files(&e.path()));
            } else {
                out.push((e.path(), std::fs::read(e.path()).unwrap()));
            }
        }
        out.sort();
        out
    }
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk");
    let sc = scenario("dedup_with_watermark");
    let plan: StreamPlan = serde_json::from_value(sc["plan"].clone()).unwrap();
    Scenario::new(&sc, conf(2, &plan), chk.to_str().unwrap()).run(&sc, &mut |_, _| {});
    let before = files(&chk);
    let all = all_state(chk.to_str().unwrap(), None);
    assert!(!all.is_empty());
    assert_eq!(files(&chk), before);
}
