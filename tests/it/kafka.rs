//! The Kafka source and sink against a real Apache Kafka broker.
//!
//! The broker's address comes from `KAFKA_BOOTSTRAP`; `bash scripts/test.sh`
//! (and CI) starts one with `scripts/kafka.sh` and sets it. Without it these
//! tests fail, saying how to start one. Every test uses its own topics.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use weir::arrow::array::{Array, AsArray};
use weir::arrow::datatypes::{Int32Type, Int64Type};
use weir::arrow::record_batch::RecordBatch;
use weir::functions::{col, count_star, window};
use weir::plan::{DataType, Field, OutputMode};
use weir::sink::KafkaSink;
use weir::source::kafka::rdkafka;
use weir::source::{DecodeExt, KafkaAdmin, KafkaSource, StartingOffsets};
use weir::{Session, StreamingQuery, Trigger};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

/// Event times in payloads: 2024-01-01T12:00:00Z in ms.
const T0: i64 = 1_704_110_400_000;

/// A record timestamp base: an hour ago, to the second. (Record timestamps
/// must be recent: the broker's time-based retention deletes old ones.)
fn recent_ms() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    (now - 3_600_000) / 1000 * 1000
}

/// The broker under test. Fails (never skips) when none is configured.
pub(crate) fn bootstrap() -> String {
    match std::env::var("KAFKA_BOOTSTRAP") {
        Ok(b) if !b.trim().is_empty() => b,
        _ => panic!(
            "KAFKA_BOOTSTRAP is not set: the Kafka tests need a real broker. Start one with \
             `bash scripts/kafka.sh start` (it prints the address, 127.0.0.1:39092 by default) and \
             run `KAFKA_BOOTSTRAP=127.0.0.1:39092 cargo test --features weir/kafka`, or run \
             `bash scripts/test.sh`, which does both"
        ),
    }
}

fn unique(name: &str) -> String {
    format!("weir-it-{name}-{}", &uuid_like()[..12])
}

fn uuid_like() -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{:x}{:04x}{:x}", t, n, std::process::id())
        .chars()
        .rev()
        .collect()
}

pub(crate) fn admin() -> KafkaAdmin {
    KafkaAdmin::new(&bootstrap()).expect("admin client")
}

/// A new topic of `partitions` partitions, its name unique to this run.
pub(crate) fn new_topic(name: &str, partitions: i32) -> String {
    let t = unique(name);
    admin().create_topic(&t, partitions).unwrap();
    t
}

fn producer() -> BaseProducer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("linger.ms", "0")
        .create()
        .expect("producer")
}

/// One record to produce.
struct Rec<'a> {
    partition: i32,
    key: Option<String>,
    value: Option<String>,
    ts: Option<i64>,
    headers: Vec<(&'a str, Option<&'a str>)>,
}

fn rec<'a>(partition: i32, value: impl Into<String>) -> Rec<'a> {
    Rec {
        partition,
        key: None,
        value: Some(value.into()),
        ts: None,
        headers: vec![],
    }
}

/// Produces the records and waits until the broker has them all.
fn produce(topic: &str, recs: &[Rec<'_>]) {
    let p = producer();
    for r in recs {
        let mut br: BaseRecord<'_, str, str> = BaseRecord::to(topic).partition(r.partition);
        if let Some(k) = &r.key {
            br = br.key(k.as_str());
        }
        if let Some(v) = &r.value {
            br = br.payload(v.as_str());
        }
        if let Some(ts) = r.ts {
            br = br.timestamp(ts);
        }
        if !r.headers.is_empty() {
            let mut h = OwnedHeaders::new();
            for (k, v) in &r.headers {
                h = h.insert(Header { key: k, value: *v });
            }
            br = br.headers(h);
        }
        p.send(br).map_err(|(e, _)| e).expect("enqueue");
        p.poll(Duration::ZERO);
    }
    p.flush(Duration::from_secs(30)).expect("flush");
}

fn produce_n(topic: &str, partition: i32, n: usize, value: impl Fn(usize) -> String) {
    let recs: Vec<Rec<'_>> = (0..n).map(|i| rec(partition, value(i))).collect();
    produce(topic, &recs);
}

/// A row of the Kafka source.
#[derive(Debug, Clone, PartialEq)]
struct KRow {
    topic: String,
    partition: i32,
    offset: i64,
    key: Option<String>,
    value: Option<String>,
}

fn kafka_rows(batches: &[RecordBatch]) -> Vec<KRow> {
    let mut out = Vec::new();
    for b in batches {
        let s = b.schema();
        let c = |n: &str| b.column(s.index_of(n).unwrap()).clone();
        let (topic, part, off, key, value) = (
            c("topic"),
            c("partition"),
            c("offset"),
            c("key"),
            c("value"),
        );
        for i in 0..b.num_rows() {
            let bin = |a: &dyn Array| {
                let a = a.as_binary::<i32>();
                a.is_valid(i)
                    .then(|| String::from_utf8_lossy(a.value(i)).into_owned())
            };
            out.push(KRow {
                topic: topic.as_string::<i32>().value(i).to_string(),
                partition: part.as_primitive::<Int32Type>().value(i),
                offset: off.as_primitive::<Int64Type>().value(i),
                key: bin(key.as_ref()),
                value: bin(value.as_ref()),
            });
        }
    }
    out
}

type Batches = Arc<Mutex<Vec<(i64, Vec<RecordBatch>)>>>;
/// (batch id, sorted rows as JSON) per batch.
type Collected = Arc<Mutex<Vec<(i64, Vec<String>)>>>;

/// Starts `source` into a collecting foreach_batch sink; a re-run batch
/// replaces what it wrote before.
fn collect(
    source: impl Into<weir::source::BoxSource>,
    chk: &Path,
    trigger: Trigger,
    out: &Batches,
) -> weir::Result<StreamingQuery> {
    let out = out.clone();
    Session::new()
        .read_stream(source)
        .write_stream()
        .trigger(trigger)
        .checkpoint_location(chk.to_str().unwrap())
        .foreach_batch(move |id, batches| {
            let mut o = out.lock().unwrap();
            o.retain(|(b, _)| *b != id);
            o.push((id, batches.to_vec()));
            Ok(())
        })
        .start()
}

fn all_rows(out: &Batches) -> Vec<KRow> {
    let o = out.lock().unwrap();
    o.iter().flat_map(|(_, b)| kafka_rows(b)).collect()
}

fn run_to_end(q: &StreamingQuery) {
    q.await_termination(Some(Duration::from_secs(120)))
        .expect("query ran")
        .then_some(())
        .expect("query ended in time");
}

fn source(topic: &str) -> KafkaSource {
    KafkaSource::new(&bootstrap()).subscribe(topic)
}

#[test]
fn reads_every_partition_with_sparks_row_schema() {
    let t = new_topic("multi", 3);
    let base = recent_ms();
    let recs: Vec<Rec<'_>> = (0..30)
        .map(|i| Rec {
            partition: i % 3,
            key: Some(format!("k{i}")),
            value: Some(format!("v{i}")),
            ts: Some(base + i as i64),
            headers: if i == 0 {
                vec![("h1", Some("x")), ("h2", None)]
            } else {
                vec![]
            },
        })
        .collect();
    produce(&t, &recs);
    let dir = tempfile::tempdir().unwrap();
    let out: Batches = Arc::default();
    let q = collect(
        source(&t)
            .starting_offsets(StartingOffsets::Earliest)
            .include_headers(true),
        &dir.path().join("chk"),
        Trigger::AvailableNow,
        &out,
    )
    .unwrap();
    run_to_end(&q);
    let rows = all_rows(&out);
    assert_eq!(rows.len(), 30);
    for p in 0..3 {
        let offs: Vec<i64> = rows
            .iter()
            .filter(|r| r.partition == p)
            .map(|r| r.offset)
            .collect();
        assert_eq!(offs, (0..10).collect::<Vec<_>>(), "partition {p} in order");
    }
    let r0 = rows
        .iter()
        .find(|r| r.key.as_deref() == Some("k0"))
        .unwrap();
    assert_eq!(
        (r0.partition, r0.offset, r0.value.as_deref()),
        (0, 0, Some("v0"))
    );
    assert!(rows.iter().all(|r| r.topic == t));
    // Spark's schema, headers included; timestamps are the records' CreateTime.
    let batches = out.lock().unwrap();
    let b = &batches[0].1[0];
    let names: Vec<String> = b
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let table: Vec<&str> = weir::plan::connectors::KAFKA_SCHEMA
        .iter()
        .map(|f| f.name)
        .chain([weir::plan::connectors::KAFKA_HEADERS])
        .collect();
    assert_eq!(names, table);
    let ts = b
        .column(5)
        .as_primitive::<weir::arrow::datatypes::TimestampMicrosecondType>();
    assert_eq!(ts.value(0), base * 1000);
    assert_eq!(b.column(6).as_primitive::<Int32Type>().value(0), 0);
    let headers = b.column(7).as_list::<i32>().value(0);
    let hs = headers.as_struct();
    assert_eq!(hs.len(), 2);
    assert_eq!(hs.column(0).as_string::<i32>().value(0), "h1");
    assert_eq!(hs.column(1).as_binary::<i32>().value(0), b"x");
    assert!(hs.column(1).is_null(1));
    // The offsets log and progress hold Spark's per-partition JSON.
    let p = q.recent_progress();
    let last = p.last().unwrap();
    assert_eq!(
        last.sources[0].description,
        format!("KafkaV2[Subscribe[{t}]]")
    );
    let end = last.sources[0].end_offset.clone().unwrap();
    assert_eq!(
        end,
        serde_json::json!({ t.clone(): {"0": 10, "1": 10, "2": 10} })
    );
    assert_eq!(last.sources[0].metrics["maxOffsetsBehindLatest"], "0");
    let logged = std::fs::read_to_string(dir.path().join("chk/offsets/0")).unwrap();
    assert!(logged.contains(&format!("\"{t}\"")), "{logged}");
}

#[test]
fn starting_offsets_earliest_latest_json_and_timestamp() {
    let t = new_topic("start", 2);
    let base = recent_ms();
    let recs: Vec<Rec<'_>> = (0..20)
        .map(|i| Rec {
            ts: Some(base + (i / 2) as i64 * 1000),
            ..rec(i % 2, format!("v{i}"))
        })
        .collect();
    produce(&t, &recs);
    let run = |s: KafkaSource| -> Vec<KRow> {
        let dir = tempfile::tempdir().unwrap();
        let out: Batches = Arc::default();
        let q = collect(s, &dir.path().join("chk"), Trigger::AvailableNow, &out).unwrap();
        run_to_end(&q);
        all_rows(&out)
    };
    assert_eq!(
        run(source(&t).starting_offsets(StartingOffsets::Earliest)).len(),
        20
    );
    // By Spark's option names: -2 earliest, an offset, per partition.
    let json = format!(r#"{{"{t}":{{"0":7,"1":-2}}}}"#);
    let rows = run(source(&t).option("startingOffsets", &json));
    assert_eq!(rows.iter().filter(|r| r.partition == 0).count(), 3);
    assert_eq!(rows.iter().filter(|r| r.partition == 1).count(), 10);
    assert_eq!(rows.iter().map(|r| r.offset).min(), Some(0));
    // Each partition from its first record at or after base + 5 s.
    let rows = run(source(&t).starting_timestamp(base + 5000));
    assert_eq!(rows.len(), 10);
    assert!(rows.iter().all(|r| r.offset >= 5));
    // Spark's rule: a JSON must name every partition.
    let dir = tempfile::tempdir().unwrap();
    let bad = format!(r#"{{"{t}":{{"0":1}}}}"#);
    let e = collect(
        source(&t).option("startingOffsets", &bad),
        &dir.path().join("chk"),
        Trigger::AvailableNow,
        &Arc::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("must name every partition") && e.contains(&format!("{t}-1")),
        "{e}"
    );

    // latest: only what arrives after the query started, then resumes from
    // the checkpoint (not from "latest") after a restart.
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk");
    let out: Batches = Arc::default();
    let q = collect(source(&t), &chk, Trigger::Default, &out).unwrap();
    q.process_all_available().unwrap();
    assert!(all_rows(&out).is_empty());
    produce_n(&t, 1, 4, |i| format!("late{i}"));
    q.process_all_available().unwrap();
    q.stop().unwrap();
    produce_n(&t, 0, 2, |i| format!("while-down{i}"));
    let q = collect(source(&t), &chk, Trigger::Default, &out).unwrap();
    q.process_all_available().unwrap();
    q.stop().unwrap();
    let values: BTreeSet<String> = all_rows(&out).into_iter().filter_map(|r| r.value).collect();
    let want: BTreeSet<String> = [
        "late0",
        "late1",
        "late2",
        "late3",
        "while-down0",
        "while-down1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(values, want);
}

#[test]
fn max_offsets_per_trigger_splits_across_partitions_by_lag() {
    let t = new_topic("rate", 3);
    produce_n(&t, 0, 100, |i| format!("a{i}"));
    produce_n(&t, 1, 50, |i| format!("b{i}"));
    produce_n(&t, 2, 10, |i| format!("c{i}"));
    let dir = tempfile::tempdir().unwrap();
    let out: Batches = Arc::default();
    let q = collect(
        source(&t)
            .starting_offsets(StartingOffsets::Earliest)
            .option("maxOffsetsPerTrigger", "32"),
        &dir.path().join("chk"),
        Trigger::AvailableNow,
        &out,
    )
    .unwrap();
    run_to_end(&q);
    let progress = q.recent_progress();
    // Spark's split of 32 over lags 100, 50, 10 (total 160): 20, 10, 2.
    assert_eq!(
        progress[0].sources[0].end_offset.clone().unwrap(),
        serde_json::json!({ t.clone(): {"0": 20, "1": 10, "2": 2} })
    );
    assert_eq!(progress[0].num_input_rows, 32);
    assert_eq!(
        progress[0].sources[0].metrics["maxOffsetsBehindLatest"],
        "80"
    );
    for p in &progress {
        assert!(
            p.num_input_rows <= 32 + 3,
            "batch {} read {}",
            p.batch_id,
            p.num_input_rows
        );
    }
    let rows = all_rows(&out);
    assert_eq!(rows.len(), 160);
    let distinct: BTreeSet<(i32, i64)> = rows.iter().map(|r| (r.partition, r.offset)).collect();
    assert_eq!(distinct.len(), 160, "no record read twice");
    assert!(progress.len() >= 5, "{} batches", progress.len());
}

fn click(page: usize, ts_ms: i64) -> String {
    format!(
        r#"{{"page":"/p{page}","event_ts":"{}"}}"#,
        chrono::DateTime::from_timestamp_millis(ts_ms)
            .unwrap()
            .format("%Y-%m-%dT%H:%M:%S%.3fZ")
    )
}

fn click_fields() -> Vec<Field> {
    vec![
        Field::new("page", DataType::String),
        Field::new("event_ts", DataType::Timestamp),
    ]
}

/// Views per page (update mode) over the clicks topic, into `out` as
/// (batch id, page -> views).
fn page_counts(topic: &str, chk: &Path, out: &Collected) -> StreamingQuery {
    let out = out.clone();
    Session::new()
        .read_stream(
            source(topic)
                .starting_offsets(StartingOffsets::Earliest)
                .max_offsets_per_trigger(25)
                .from_json("value", click_fields()),
        )
        .group_by(vec![col("page")])
        .agg(vec![count_star("views")])
        .write_stream()
        .output_mode(OutputMode::Update)
        .checkpoint_location(chk.to_str().unwrap())
        .foreach_batch(move |id, batches| {
            let mut rows: Vec<String> = crate::common::rows_json(batches)
                .iter()
                .map(|r| r.to_string())
                .collect();
            rows.sort();
            let mut o = out.lock().unwrap();
            o.retain(|(b, _)| *b != id);
            o.push((id, rows));
            Ok(())
        })
        .start()
        .unwrap()
}

/// The latest views per page from update-mode output.
fn final_counts(out: &Collected) -> BTreeMap<String, i64> {
    let mut o = out.lock().unwrap().clone();
    o.sort_by_key(|(b, _)| *b);
    let mut m = BTreeMap::new();
    for (_, rows) in o {
        for r in rows {
            let v: serde_json::Value = serde_json::from_str(&r).unwrap();
            m.insert(
                v["page"].as_str().unwrap().to_string(),
                v["views"].as_i64().unwrap(),
            );
        }
    }
    m
}

#[test]
fn a_restart_resumes_exactly_and_counts_every_event_once() {
    let t = new_topic("resume", 2);
    let produce_clicks = |from: usize, to: usize| {
        let recs: Vec<Rec<'_>> = (from..to)
            .map(|i| rec((i % 2) as i32, click(i % 7, T0 + i as i64 * 1000)))
            .collect();
        produce(&t, &recs);
    };
    produce_clicks(0, 100);
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk");
    let out = Arc::default();
    let q = page_counts(&t, &chk, &out);
    q.process_all_available().unwrap();
    q.stop().unwrap();
    // More data while the query is down.
    produce_clicks(100, 160);
    let q = page_counts(&t, &chk, &out);
    q.process_all_available().unwrap();
    q.stop().unwrap();
    // A crash after the sink wrote the last batch but before commits/N: the
    // batch re-runs with its logged offsets and the same id.
    let last = q.last_progress().unwrap().batch_id;
    let logged = std::fs::read_to_string(chk.join("offsets").join(last.to_string())).unwrap();
    std::fs::remove_file(chk.join("commits").join(last.to_string())).unwrap();
    let before = out.lock().unwrap().clone();
    produce_clicks(160, 200);
    let q = page_counts(&t, &chk, &out);
    q.process_all_available().unwrap();
    q.stop().unwrap();
    let replayed = out
        .lock()
        .unwrap()
        .iter()
        .find(|(b, _)| *b == last)
        .cloned();
    assert_eq!(
        replayed,
        before.iter().find(|(b, _)| *b == last).cloned(),
        "the re-run batch saw exactly the same rows"
    );
    assert_eq!(
        std::fs::read_to_string(chk.join("offsets").join(last.to_string())).unwrap(),
        logged
    );
    let counts = final_counts(&out);
    let mut want = BTreeMap::new();
    for i in 0..200 {
        *want.entry(format!("/p{}", i % 7)).or_insert(0i64) += 1;
    }
    assert_eq!(counts, want, "every event counted exactly once");
}

/// Reads [0, 40) of a one-partition topic of 100 records, then deletes
/// records before offset 60 and restarts with `failOnDataLoss`.
fn data_loss_setup(
    fail: bool,
) -> (
    String,
    weir::Result<StreamingQuery>,
    Batches,
    tempfile::TempDir,
) {
    let t = new_topic("loss", 1);
    produce_n(&t, 0, 100, |i| format!("v{i}"));
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk");
    let out: Batches = Arc::default();
    let s = || {
        source(&t)
            .starting_offsets(StartingOffsets::Earliest)
            .max_offsets_per_trigger(40)
            .fail_on_data_loss(fail)
    };
    let q = collect(s(), &chk, Trigger::Once, &out).unwrap();
    run_to_end(&q);
    assert_eq!(all_rows(&out).len(), 40);
    admin().delete_records_before(&t, 0, 60).unwrap();
    assert_eq!(admin().watermarks(&t, 0).unwrap(), (60, 100));
    let q = collect(s(), &chk, Trigger::AvailableNow, &out);
    (t, q, out, dir)
}

#[test]
fn fail_on_data_loss_true_fails_naming_topic_partition_and_range() {
    let (t, q, out, _dir) = data_loss_setup(true);
    let q = q.unwrap();
    let e = q
        .await_termination(Some(Duration::from_secs(60)))
        .unwrap_err()
        .to_string();
    assert!(e.contains(&format!("topic `{t}` partition 0")), "{e}");
    assert!(e.contains("offsets [40, 60) (20 records)"), "{e}");
    assert!(e.contains("failOnDataLoss"), "says how to go on: {e}");
    assert_eq!(all_rows(&out).len(), 40, "nothing read past the loss");
}

#[test]
fn fail_on_data_loss_false_skips_warns_and_counts() {
    let (_t, q, out, _dir) = data_loss_setup(false);
    let q = q.unwrap();
    run_to_end(&q);
    let rows = all_rows(&out);
    let offsets: Vec<i64> = rows.iter().map(|r| r.offset).collect();
    let want: Vec<i64> = (0..40).chain(60..100).collect();
    assert_eq!(offsets, want);
    assert_eq!(lost_offsets(&q), 20);
}

/// Offsets the query's source counted as lost, over its recent batches.
fn lost_offsets(q: &StreamingQuery) -> i64 {
    q.recent_progress()
        .iter()
        .map(|p| p.sources[0].metrics["lostOffsets"].parse::<i64>().unwrap())
        .sum()
}

/// A batch planned over [40, 80) and logged, killed before it wrote anything
/// (its read may have begun: it runs beside the log's write), then
/// run again after the records before 60 were deleted: its fixed range
/// meets the loss as a new plan does (`failOnDataLoss`), found by the
/// batch's check of the partition's earliest offset before it reads.
/// Records deleted between that check and the fetch are found by the
/// reader itself (its unit test in `source/kafka/reader.rs`).
#[test]
fn records_deleted_under_a_logged_batch_are_data_loss_when_it_runs_again() {
    const TEST: &str =
        "kafka::records_deleted_under_a_logged_batch_are_data_loss_when_it_runs_again";
    let s = |t: &str, fail: bool| {
        source(t)
            .starting_offsets(StartingOffsets::Earliest)
            .max_offsets_per_trigger(40)
            .fail_on_data_loss(fail)
    };
    if let Ok(chk) = std::env::var("WEIR_KAFKA_LOSS_CHILD") {
        let t = std::env::var("WEIR_KAFKA_LOSS_TOPIC").unwrap();
        let out: Batches = Arc::default();
        let q = collect(s(&t, true), Path::new(&chk), Trigger::AvailableNow, &out).unwrap();
        run_to_end(&q);
        return; // not reached when the failpoint fires
    }
    for fail in [false, true] {
        let t = new_topic("loss-read", 1);
        produce_n(&t, 0, 100, |i| format!("v{i}"));
        let dir = tempfile::tempdir().unwrap();
        let chk = dir.path().join("chk");
        crate::common::run_child_killed_at_failpoint(
            TEST,
            &[
                ("WEIR_KAFKA_LOSS_CHILD", chk.display().to_string()),
                ("WEIR_KAFKA_LOSS_TOPIC", t.clone()),
                ("WEIR_FAILPOINT", "after_offsets:1".into()),
            ],
        );
        assert!(chk.join("offsets/1").exists() && !chk.join("commits/1").exists());
        admin().delete_records_before(&t, 0, 60).unwrap();
        let out: Batches = Arc::default();
        let q = collect(s(&t, fail), &chk, Trigger::AvailableNow, &out).unwrap();
        let ended = q.await_termination(Some(Duration::from_secs(60)));
        if fail {
            let e = ended.unwrap_err().to_string();
            assert!(e.contains(&format!("topic `{t}` partition 0")), "{e}");
            assert!(e.contains("offsets [40, 60) (20 records)"), "{e}");
            assert!(e.contains("earliest offset is now 60"), "{e}");
            assert!(e.contains("failOnDataLoss"), "{e}");
            assert!(all_rows(&out).is_empty(), "nothing read past the loss");
        } else {
            assert!(ended.unwrap(), "the query ended");
            let offsets: Vec<i64> = all_rows(&out).iter().map(|r| r.offset).collect();
            assert_eq!(offsets, (60..100).collect::<Vec<i64>>());
            assert_eq!(lost_offsets(&q), 20);
        }
    }
}

#[test]
fn new_partitions_and_new_pattern_topics_are_picked_up() {
    let prefix = unique("pat");
    let a = format!("{prefix}-a");
    admin().create_topic(&a, 1).unwrap();
    produce_n(&a, 0, 5, |i| format!("a{i}"));
    let dir = tempfile::tempdir().unwrap();
    let out: Batches = Arc::default();
    let q = collect(
        KafkaSource::new(&bootstrap())
            .subscribe_pattern(&format!("{prefix}-.*"))
            .starting_offsets(StartingOffsets::Earliest),
        &dir.path().join("chk"),
        Trigger::Default,
        &out,
    )
    .unwrap();
    q.process_all_available().unwrap();
    assert_eq!(all_rows(&out).len(), 5);
    admin().add_partitions(&a, 3).unwrap();
    produce(&a, &[rec(1, "a-p1"), rec(2, "a-p2"), rec(2, "a-p2b")]);
    q.process_all_available().unwrap();
    let b = format!("{prefix}-b");
    admin().create_topic(&b, 2).unwrap();
    produce(&b, &[rec(0, "b0"), rec(1, "b1")]);
    q.process_all_available().unwrap();
    q.stop().unwrap();
    let rows = all_rows(&out);
    let got: BTreeSet<(String, i32, i64)> = rows
        .iter()
        .map(|r| (r.topic.clone(), r.partition, r.offset))
        .collect();
    assert_eq!(rows.len(), 10, "{rows:?}");
    for k in [
        (a.clone(), 1, 0),
        (a.clone(), 2, 1),
        (b.clone(), 0, 0),
        (b.clone(), 1, 0),
    ] {
        assert!(
            got.contains(&k),
            "{k:?} read from offset 0 of the new partition"
        );
    }
    let desc = &q.last_progress().unwrap().sources[0].description;
    assert!(desc.starts_with("KafkaV2[SubscribePattern["), "{desc}");
}

#[test]
fn malformed_json_becomes_a_row_of_nulls_and_is_counted() {
    let t = new_topic("json", 1);
    produce(
        &t,
        &[
            rec(0, click(1, T0)),
            rec(0, "{broken"),
            Rec {
                value: None,
                ..rec(0, "")
            },
            rec(0, r#"{"page":"/p2","event_ts":"not a time"}"#),
            rec(0, click(3, T0 + 1000)),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let out: Batches = Arc::default();
    let q = collect(
        source(&t)
            .starting_offsets(StartingOffsets::Earliest)
            .from_json("value", click_fields())
            .keep(&["offset"]),
        &dir.path().join("chk"),
        Trigger::AvailableNow,
        &out,
    )
    .unwrap();
    run_to_end(&q);
    let batches: Vec<RecordBatch> = out
        .lock()
        .unwrap()
        .iter()
        .flat_map(|(_, b)| b.clone())
        .collect();
    let rows = crate::common::rows_json(&batches);
    assert_eq!(rows.len(), 5);
    assert_eq!(rows[0]["page"], "/p1");
    assert_eq!(rows[0]["event_ts"], "2024-01-01T12:00:00Z");
    assert!(rows[0]["_corrupt_record"].is_null());
    assert!(rows[1]["page"].is_null() && rows[1]["event_ts"].is_null());
    assert_eq!(rows[1]["_corrupt_record"], "{broken");
    assert!(
        rows[2]["_corrupt_record"].is_null(),
        "a null value is not malformed"
    );
    assert!(
        rows[3]["page"].is_null(),
        "a field of the wrong type spoils the record"
    );
    assert_eq!(rows[3]["offset"], 3);
    assert_eq!(rows[4]["page"], "/p3");
    let malformed: i64 = q
        .recent_progress()
        .iter()
        .map(|p| {
            p.sources[0].metrics["malformedRecords"]
                .parse::<i64>()
                .unwrap()
        })
        .sum();
    assert_eq!(malformed, 2);
}

#[test]
fn source_commits_processed_offsets_to_its_consumer_group() {
    let t = new_topic("group", 2);
    produce_n(&t, 0, 7, |i| format!("a{i}"));
    produce_n(&t, 1, 3, |i| format!("b{i}"));
    let group = unique("group");
    let dir = tempfile::tempdir().unwrap();
    let q = collect(
        source(&t)
            .starting_offsets(StartingOffsets::Earliest)
            .group_id(&group),
        &dir.path().join("chk"),
        Trigger::AvailableNow,
        &Arc::default(),
    )
    .unwrap();
    run_to_end(&q);
    let committed = admin().committed_offsets(&group, &t).unwrap();
    assert_eq!(committed, BTreeMap::from([(0, 7), (1, 3)]));
}

/// A record read back from a topic.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Out {
    partition: i32,
    pub(crate) key: Option<String>,
    pub(crate) value: String,
    headers: Vec<(String, Option<String>)>,
}

/// Reads a whole topic with the given isolation level.
pub(crate) fn read_records(topic: &str, isolation: &str) -> Vec<Out> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", unique("reader"))
        .set("enable.auto.commit", "false")
        .set("isolation.level", isolation)
        .create()
        .unwrap();
    let n = admin().partitions(topic).unwrap() as i32;
    let mut tpl = TopicPartitionList::new();
    let mut ends = BTreeMap::new();
    for p in 0..n {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
        ends.insert(p, admin().watermarks(topic, p).unwrap().1);
    }
    c.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let pos = c.position().unwrap();
        let done = pos.elements().iter().all(|e| match e.offset() {
            Offset::Offset(o) => o >= ends[&e.partition()],
            _ => ends[&e.partition()] == 0,
        });
        if done || std::time::Instant::now() > deadline {
            break;
        }
        if let Some(m) = c.poll(Duration::from_millis(200)) {
            let m = m.unwrap();
            let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            out.push(Out {
                partition: m.partition(),
                key: m.key().map(text),
                value: text(m.payload().unwrap_or_default()),
                headers: m
                    .headers()
                    .map(|h| {
                        (0..h.count())
                            .map(|i| {
                                let x = h.get(i);
                                (x.key.to_string(), x.value.map(text))
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
            });
        }
    }
    out
}

/// Reads a whole topic as (key, value) pairs with the given isolation level.
/// Every record's (key, value) in `topic`, read with `isolation`.
pub(crate) fn read_topic(topic: &str, isolation: &str) -> Vec<(Option<String>, String)> {
    read_records(topic, isolation)
        .into_iter()
        .map(|o| (o.key, o.value))
        .collect()
}

/// Views per page and minute from the clicks topic to the Kafka sink.
fn page_views_to_kafka(input: &str, output: &str, chk: &Path, sink: KafkaSink) -> StreamingQuery {
    let _ = output;
    Session::new()
        .read_stream(
            source(input)
                .starting_offsets(StartingOffsets::Earliest)
                .from_json("value", click_fields()),
        )
        .with_watermark("event_ts", "2 minutes")
        .group_by(vec![window("event_ts", "1 minute"), col("page")])
        .agg(vec![count_star("views")])
        .write_stream()
        .output_mode(OutputMode::Update)
        .checkpoint_location(chk.to_str().unwrap())
        .sink(sink.json_values().key_columns(&["page"]))
        .start()
        .unwrap()
}

/// Produces clicks `from..to` (7 s apart from `T0`, pages `/p0`..`/p2`,
/// alternating over partitions 0 and 1).
pub(crate) fn produce_minute_clicks(topic: &str, from: usize, to: usize) {
    let recs: Vec<Rec<'_>> = (from..to)
        .map(|i| rec((i % 2) as i32, click(i % 3, T0 + i as i64 * 7_000)))
        .collect();
    produce(topic, &recs);
}

/// Runs three input rounds with a simulated crash (commits/N deleted after
/// the sink committed batch N) before the third; returns the output topic.
fn sink_with_crash(sink: impl Fn(&str) -> KafkaSink) -> (String, Vec<(Option<String>, String)>) {
    let input = new_topic("clicks", 2);
    let output = new_topic("views", 1);
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk");
    produce_minute_clicks(&input, 0, 20);
    let q = page_views_to_kafka(&input, &output, &chk, sink(&output));
    q.process_all_available().unwrap();
    produce_minute_clicks(&input, 20, 40);
    q.process_all_available().unwrap();
    q.stop().unwrap();
    let last = q
        .recent_progress()
        .iter()
        .filter(|p| p.sink.num_output_rows > 0)
        .map(|p| p.batch_id)
        .max()
        .unwrap();
    // Crash between the sink's commit and the commit log: drop commits/N for
    // every batch from the last that wrote rows on.
    let newest = q.last_progress().unwrap().batch_id;
    for b in last..=newest {
        std::fs::remove_file(chk.join("commits").join(b.to_string())).unwrap();
        if b > last {
            std::fs::remove_file(chk.join("offsets").join(b.to_string())).unwrap();
        }
    }
    let q = page_views_to_kafka(&input, &output, &chk, sink(&output));
    q.process_all_available().unwrap();
    produce_minute_clicks(&input, 40, 60);
    q.process_all_available().unwrap();
    q.stop().unwrap();
    let recs = read_topic(&output, "read_committed");
    (output, recs)
}

/// (window start, page) -> the views of each update, in order.
pub(crate) fn updates(recs: &[(Option<String>, String)]) -> BTreeMap<(String, String), Vec<i64>> {
    let mut m: BTreeMap<(String, String), Vec<i64>> = BTreeMap::new();
    for (key, value) in recs {
        let v: serde_json::Value = serde_json::from_str(value).unwrap();
        let start = v["window"]["start"].as_str().unwrap().to_string();
        m.entry((start, key.clone().unwrap()))
            .or_default()
            .push(v["views"].as_i64().unwrap());
    }
    m
}

#[test]
fn exactly_once_sink_does_not_duplicate_a_batch_replayed_after_a_crash() {
    let (_out, recs) = sink_with_crash(|topic| KafkaSink::new(&bootstrap()).topic(topic));
    assert!(!recs.is_empty());
    // Keys are the page; values the whole row as JSON.
    assert!(recs
        .iter()
        .all(|(k, _)| k.as_deref().is_some_and(|k| k.starts_with("/p"))));
    let ups = updates(&recs);
    for (k, views) in &ups {
        let mut sorted = views.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(
            &sorted, views,
            "{k:?}: each update seen once, counts rising"
        );
    }
    // The final count of each (minute, page) is the true count.
    let mut truth: BTreeMap<(String, String), i64> = BTreeMap::new();
    for i in 0..60 {
        let ts = T0 + i as i64 * 7_000;
        let start = chrono::DateTime::from_timestamp_millis(ts - ts.rem_euclid(60_000)).unwrap();
        let key = (
            start.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
            format!("/p{}", i % 3),
        );
        *truth.entry(key).or_default() += 1;
    }
    let finals: BTreeMap<(i64, String), i64> = ups
        .iter()
        .map(|((w, p), v)| ((normalize_ts(w), p.clone()), *v.last().unwrap()))
        .collect();
    let truth: BTreeMap<(i64, String), i64> = truth
        .into_iter()
        .map(|((w, p), v)| ((normalize_ts(&w), p), v))
        .collect();
    assert_eq!(finals, truth);
}

fn normalize_ts(s: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(s)
        .or_else(|_| chrono::DateTime::parse_from_rfc3339(&format!("{s}Z")))
        .unwrap_or_else(|e| panic!("{s}: {e}"))
        .timestamp_millis()
}

#[test]
fn at_least_once_sink_writes_a_replayed_batch_again() {
    let (_out, recs) =
        sink_with_crash(|topic| KafkaSink::new(&bootstrap()).topic(topic).at_least_once());
    let ups = updates(&recs);
    let duplicated = ups.values().any(|v| {
        let mut s = v.clone();
        s.dedup();
        s.len() < v.len()
    });
    assert!(
        duplicated,
        "the replayed batch shows twice without transactions: {ups:?}"
    );
}

#[test]
fn sink_marker_is_committed_in_the_transaction_and_fences_replays() {
    let input = new_topic("marker-in", 1);
    let output = new_topic("marker-out", 1);
    produce_minute_clicks(&input, 0, 10);
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk");
    let q = page_views_to_kafka(
        &input,
        &output,
        &chk,
        KafkaSink::new(&bootstrap()).topic(&output),
    );
    q.process_all_available().unwrap();
    q.stop().unwrap();
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(chk.join("metadata")).unwrap()).unwrap();
    let group = format!("weir-{}", meta["id"].as_str().unwrap());
    let marker = admin().committed_offsets(&group, &output).unwrap();
    let wrote = q
        .recent_progress()
        .iter()
        .filter(|p| p.sink.num_output_rows > 0)
        .map(|p| p.batch_id)
        .max()
        .unwrap();
    assert_eq!(marker, BTreeMap::from([(0, wrote + 1)]));
}

#[test]
fn a_deleted_topic_is_data_loss_both_ways() {
    for fail in [true, false] {
        let t = new_topic("deleted", 1);
        produce_n(&t, 0, 10, |i| format!("v{i}"));
        let dir = tempfile::tempdir().unwrap();
        let chk = dir.path().join("chk");
        let out: Batches = Arc::default();
        let s = || {
            source(&t)
                .starting_offsets(StartingOffsets::Earliest)
                .max_offsets_per_trigger(4)
                .fail_on_data_loss(fail)
        };
        run_to_end(&collect(s(), &chk, Trigger::Once, &out).unwrap());
        assert_eq!(all_rows(&out).len(), 4);
        admin().delete_topic(&t).unwrap();
        std::thread::sleep(Duration::from_millis(500));
        let q = collect(s(), &chk, Trigger::AvailableNow, &out).unwrap();
        let ended = q.await_termination(Some(Duration::from_secs(60)));
        if fail {
            let e = ended.unwrap_err().to_string();
            assert!(e.contains(&format!("topic `{t}` partition 0")), "{e}");
            assert!(e.contains("gone"), "{e}");
        } else {
            assert!(ended.unwrap(), "query ended");
            assert_eq!(all_rows(&out).len(), 4, "nothing more to read");
        }
    }
}

#[test]
fn sink_writes_key_value_partition_and_headers_columns() {
    // Kafka -> Kafka as it is: the source's key, value, partition and headers
    // columns are the sink's; the `topic` option wins over the `topic` column.
    let a = new_topic("copy-from", 2);
    let b = new_topic("copy-to", 2);
    produce(
        &a,
        &[
            Rec {
                key: Some("k1".into()),
                headers: vec![("trace", Some("t1")), ("empty", None)],
                ..rec(1, "v1")
            },
            Rec {
                key: None,
                ..rec(0, "v0")
            },
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let q = Session::new()
        .read_stream(
            source(&a)
                .starting_offsets(StartingOffsets::Earliest)
                .include_headers(true),
        )
        .write_stream()
        .trigger(Trigger::AvailableNow)
        .checkpoint_location(dir.path().join("chk").to_str().unwrap())
        .sink(KafkaSink::new(&bootstrap()).topic(&b))
        .start()
        .unwrap();
    run_to_end(&q);
    let mut got = read_records(&b, "read_committed");
    got.sort_by_key(|o| o.partition);
    assert_eq!(
        got,
        vec![
            Out {
                partition: 0,
                key: None,
                value: "v0".into(),
                headers: vec![],
            },
            Out {
                partition: 1,
                key: Some("k1".into()),
                value: "v1".into(),
                headers: vec![("trace".into(), Some("t1".into())), ("empty".into(), None)],
            },
        ]
    );
}

/// A minute of event time (ms) no earlier run used: the declared queries
/// read fixed topics, and their payloads' event times tell this run's
/// records from those of earlier runs.
fn minute_of_this_run() -> i64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    T0 + (nanos % 1_000_000) as i64 * 60_000
}

weir::stream_query! {
    /// The seed's page views declared end to end: JSON clicks from Kafka,
    /// views per page and minute back to Kafka as JSON keyed by page,
    /// exactly once.
    query DslPageViews {
        source: kafka(
            bootstrap_servers = env("KAFKA_BOOTSTRAP"),
            subscribe = "weir-it-dsl-clicks",
            starting_offsets = latest,
            format = json,
        ),
        schema: DslClick { page: String, event_ts: Timestamp },
        watermark: event_ts delay "2 minutes",
        group_by: [window(event_ts, "1 minute"), page],
        aggregate: { views: count() },
        output_mode: update,
        sink: kafka(
            bootstrap_servers = env("KAFKA_BOOTSTRAP"),
            topic = "weir-it-dsl-page-views",
            format = json,
            key = [page],
        ),
        checkpoint: "target/weir-it-dsl-page-views",
    }
}

/// `stream_query!` with `source: kafka(...)` and `sink: kafka(...)` runs
/// against the real broker (`env("KAFKA_BOOTSTRAP")`). The topics have fixed names (they
/// are literals in the declaration), so the test reads only this run's
/// records: it starts from `latest` and uses a minute of event time of its
/// own.
#[test]
fn a_declared_kafka_to_kafka_query_counts_each_click_once() {
    bootstrap();
    let (input, output) = ("weir-it-dsl-clicks", "weir-it-dsl-page-views");
    admin().create_topic(input, 2).unwrap();
    admin().create_topic(output, 1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let session = Session::new();
    let q = DslPageViews::writer(&session)
        .unwrap()
        .checkpoint_location(dir.path().to_str().unwrap())
        .start()
        .unwrap();
    // The first batch fixes the starting offsets (`latest`).
    q.process_all_available().unwrap();
    let minute = minute_of_this_run();
    let at = |s: i64| minute + s * 1000;
    produce(
        input,
        &[
            rec(0, click(1, at(1))),
            rec(1, click(1, at(2))),
            rec(0, click(2, at(3))),
            rec(1, click(1, at(4))),
            rec(0, click(2, at(5))),
        ],
    );
    q.process_all_available().unwrap();
    q.stop().unwrap();
    assert!(q.exception().is_none(), "{:?}", q.exception());
    // This run's minute only (earlier runs wrote other minutes).
    let window_start = |v: &str| -> i64 {
        let v: serde_json::Value = serde_json::from_str(v).unwrap();
        chrono::DateTime::parse_from_rfc3339(v["window"]["start"].as_str().unwrap())
            .unwrap()
            .timestamp_millis()
    };
    let mine: Vec<(Option<String>, String)> = read_topic(output, "read_committed")
        .into_iter()
        .filter(|(_, v)| window_start(v) == minute)
        .collect();
    // Update mode: one record per page and batch that changed it (the
    // running query may have read the two partitions in different batches);
    // the last one is the count, each click counted once.
    let updates = updates(&mine);
    for v in updates.values() {
        assert!(v.windows(2).all(|w| w[0] < w[1]), "{mine:?}");
    }
    let last: BTreeMap<String, i64> = updates
        .into_iter()
        .map(|((_, page), v)| (page, *v.last().unwrap()))
        .collect();
    let want: BTreeMap<String, i64> = [("/p1".to_string(), 3), ("/p2".to_string(), 2)]
        .into_iter()
        .collect();
    assert_eq!(last, want, "{mine:?}");
}

weir::stream_query! {
    /// A declared source whose broker comes from an unset variable.
    query UnsetBroker {
        source: kafka(bootstrap_servers = env("WEIR_IT_UNSET_BROKER"), subscribe = "t"),
        sink: console,
    }
}

/// `env("VAR")` is read when the query is built; an unset one is a clear error.
#[test]
fn a_declared_setting_from_an_unset_variable_is_a_clear_error() {
    assert!(std::env::var_os("WEIR_IT_UNSET_BROKER").is_none());
    match UnsetBroker::writer(&Session::new()) {
        Ok(_) => panic!("built without its broker address"),
        Err(e) => assert_eq!(
            e.to_string(),
            "the environment variable `WEIR_IT_UNSET_BROKER` (for the kafka source's bootstrap_servers) is not set"
        ),
    }
}

weir::stream_query! {
    /// Spark's `assign` and per-partition `startingOffsets`, declared: only
    /// partition 1 of the topic, from its earliest offset.
    query AssignedClicks {
        source: kafka(
            bootstrap_servers = env("KAFKA_BOOTSTRAP"),
            assign = "{\"weir-it-dsl-assign\":[1]}",
            starting_offsets = "{\"weir-it-dsl-assign\":{\"1\":-2}}",
            format = json,
        ),
        schema: AssignedClick { page: String, event_ts: Timestamp },
        trigger: available_now,
        sink: memory(name = "assigned_clicks"),
    }
}

/// A declared `assign` reads only its partitions; the JSON starting offsets
/// (-2: earliest) are honoured.
#[test]
fn a_declared_assign_reads_only_its_partitions() {
    bootstrap();
    let topic = "weir-it-dsl-assign";
    admin().create_topic(topic, 2).unwrap();
    let at = minute_of_this_run();
    produce(
        topic,
        &[
            rec(0, click(1, at)),
            rec(1, click(2, at)),
            rec(1, click(3, at)),
        ],
    );
    let session = Session::new();
    let dir = tempfile::tempdir().unwrap();
    let q = AssignedClicks::writer(&session)
        .unwrap()
        .checkpoint_location(dir.path().to_str().unwrap())
        .start()
        .unwrap();
    assert!(q.await_termination(Some(Duration::from_secs(60))).unwrap());
    assert!(q.exception().is_none(), "{:?}", q.exception());
    let table = session.memory_table("assigned_clicks").unwrap();
    let mut pages: Vec<String> = AssignedClicks::rows(&table.rows())
        .unwrap()
        .into_iter()
        .filter(|r| r.event_ts.millis() == at)
        .map(|r| r.page)
        .collect();
    pages.sort();
    assert_eq!(pages, ["/p2", "/p3"]);
}

weir::stream_query! {
    /// Assigned partitions 0 and 1, starting offsets for partition 0 only.
    query PartlyStarted {
        source: kafka(
            bootstrap_servers = env("KAFKA_BOOTSTRAP"),
            assign = "{\"weir-it-dsl-assign\":[0,1]}",
            starting_offsets = "{\"weir-it-dsl-assign\":{\"0\":-2}}",
        ),
        trigger: available_now,
        sink: memory(name = "partly_started"),
    }
}

/// Specific starting offsets must name every assigned partition (Spark's
/// assertion), or the query says which are missing.
#[test]
fn starting_offsets_must_name_every_assigned_partition() {
    bootstrap();
    admin().create_topic("weir-it-dsl-assign", 2).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let started = PartlyStarted::writer(&Session::new())
        .unwrap()
        .checkpoint_location(dir.path().to_str().unwrap())
        .start();
    let err = match started {
        Err(e) => e.to_string(),
        Ok(q) => {
            let _ = q.await_termination(Some(Duration::from_secs(30)));
            q.exception().map(|e| e.to_string()).unwrap_or_default()
        }
    };
    assert!(
        err.contains("startingOffsets must name every partition")
            && err.contains("weir-it-dsl-assign-1"),
        "{err}"
    );
}

#[test]
fn a_new_checkpoint_reusing_a_transactional_id_writes_its_own_batches() {
    let input = new_topic("reuse-in", 1);
    let output = new_topic("reuse-out", 1);
    produce_minute_clicks(&input, 0, 10);
    let txn = unique("txn");
    let run = |chk: &Path| -> weir::Result<i64> {
        let sink = KafkaSink::new(&bootstrap())
            .topic(&output)
            .transactional_id(&txn);
        let q = Session::new()
            .read_stream(
                source(&input)
                    .starting_offsets(StartingOffsets::Earliest)
                    .from_json("value", click_fields()),
            )
            .group_by(vec![col("page")])
            .agg(vec![count_star("views")])
            .write_stream()
            .output_mode(OutputMode::Update)
            .checkpoint_location(chk.to_str().unwrap())
            .sink(sink.json_values().key_columns(&["page"]))
            .start()?;
        q.process_all_available()?;
        q.stop()?;
        Ok(q.recent_progress()
            .iter()
            .map(|p| p.sink.num_output_rows)
            .sum())
    };
    let dir = tempfile::tempdir().unwrap();
    let first = run(&dir.path().join("chk1")).unwrap();
    assert!(first > 0);
    assert_eq!(read_topic(&output, "read_committed").len() as i64, first);
    // A new checkpoint (a new query) with the same transactionalId and
    // output topic: its batch 0 is its own, not the old query's.
    let second = run(&dir.path().join("chk2")).unwrap();
    assert!(second > 0);
    assert_eq!(
        read_topic(&output, "read_committed").len() as i64,
        first + second,
        "the new query's batches are written, not skipped as the old query's"
    );

    // A marker in a query's own group that names another query is refused.
    let chk = dir.path().join("chk1");
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(chk.join("metadata")).unwrap()).unwrap();
    let group = format!("weir-{}", meta["id"].as_str().unwrap());
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", &group)
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&output, 0, Offset::Offset(100))
        .unwrap();
    tpl.find_partition(&output, 0)
        .unwrap()
        .set_metadata("weir query someone-else batch 99");
    c.commit(&tpl, rdkafka::consumer::CommitMode::Sync).unwrap();
    let e = run(&chk).unwrap_err().to_string();
    assert!(
        e.contains("names query someone-else") && e.contains(&group),
        "{e}"
    );
}

/// Headers with raw keys (rdkafka's `insert` only takes `&str` keys; other
/// clients write any bytes).
fn raw_key_headers(items: &[(&[u8], &[u8])]) -> OwnedHeaders {
    use rdkafka::bindings as rdsys;
    let h = OwnedHeaders::new();
    // rdkafka's BorrowedHeaders is a zero-sized view at the native list.
    let native = h.as_borrowed() as *const rdkafka::message::BorrowedHeaders
        as *mut rdsys::rd_kafka_headers_t;
    for (k, v) in items {
        // SAFETY: `native` is the live list `h` owns; librdkafka copies both.
        let err = unsafe {
            rdsys::rd_kafka_header_add(
                native,
                k.as_ptr().cast(),
                k.len() as isize,
                v.as_ptr().cast(),
                v.len() as isize,
            )
        };
        assert_eq!(err, rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR);
    }
    h
}

#[test]
fn bad_header_keys_and_timestamps_are_kept_and_counted_not_a_stuck_query() {
    // A topic that accepts any create time (Kafka 4 rejects ones over an
    // hour ahead by default).
    let t = unique("poison");
    admin()
        .create_topic_with_config(
            &t,
            1,
            &[("message.timestamp.after.max.ms", "9223372036854775807")],
        )
        .unwrap();
    let p = producer();
    let base = recent_ms();
    let overflow = i64::MAX / 1000 + 1; // ms * 1000 overflows i64
    let records: [(&str, Option<i64>, OwnedHeaders); 4] = [
        ("before", Some(base), raw_key_headers(&[(b"ok", b"1")])),
        (
            "bad-key",
            Some(base),
            raw_key_headers(&[(b"k\xff\xfe", b"2"), (b"ok", b"3")]),
        ),
        ("bad-ts", Some(overflow), OwnedHeaders::new()),
        ("after", Some(base + 1), OwnedHeaders::new()),
    ];
    for (v, ts, h) in records {
        let mut r: BaseRecord<'_, str, str> = BaseRecord::to(&t).payload(v).headers(h);
        if let Some(ts) = ts {
            r = r.timestamp(ts);
        }
        p.send(r).map_err(|(e, _)| e).unwrap();
    }
    p.flush(Duration::from_secs(30)).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let out: Batches = Arc::default();
    let q = collect(
        source(&t)
            .starting_offsets(StartingOffsets::Earliest)
            .include_headers(true),
        &dir.path().join("chk"),
        Trigger::AvailableNow,
        &out,
    )
    .unwrap();
    run_to_end(&q);
    let rows = all_rows(&out);
    let values: Vec<&str> = rows.iter().filter_map(|r| r.value.as_deref()).collect();
    assert_eq!(values, ["before", "bad-key", "bad-ts", "after"], "all kept");
    let batches = out.lock().unwrap();
    let b = &batches[0].1[0];
    let ts = b
        .column(5)
        .as_primitive::<weir::arrow::datatypes::TimestampMicrosecondType>();
    assert_eq!(ts.value(0), base * 1000);
    assert!(ts.is_null(2), "an overflowing timestamp is null");
    assert_eq!(b.column(6).as_primitive::<Int32Type>().value(2), 0);
    assert_eq!(ts.value(3), (base + 1) * 1000);
    let headers = b.column(7).as_list::<i32>().value(1);
    let hs = headers.as_struct();
    assert_eq!(
        hs.column(0).as_string::<i32>().value(0),
        "k\u{fffd}\u{fffd}"
    );
    assert_eq!(hs.column(1).as_binary::<i32>().value(0), b"2");
    assert_eq!(hs.column(0).as_string::<i32>().value(1), "ok");
    let sum = |name: &str| -> i64 {
        q.recent_progress()
            .iter()
            .map(|p| p.sources[0].metrics[name].parse::<i64>().unwrap())
            .sum()
    };
    assert_eq!(sum("invalidHeaderKeys"), 1);
    assert_eq!(sum("invalidTimestamps"), 1);
}

#[test]
fn a_large_backlog_is_read_in_batches_of_the_default_cap_each_record_once() {
    use weir::source::kafka::DEFAULT_MAX_OFFSETS_PER_TRIGGER as CAP;
    let t = new_topic("backlog", 2);
    let total = CAP as usize + 100;
    let per = [total * 3 / 5, total - total * 3 / 5];
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("linger.ms", "20")
        .set("batch.num.messages", "10000")
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .unwrap();
    for (part, n) in per.iter().enumerate() {
        for i in 0..*n {
            let v = i.to_string();
            let mut r: BaseRecord<'_, str, str> =
                BaseRecord::to(&t).partition(part as i32).payload(&v);
            loop {
                match p.send(r) {
                    Ok(()) => break,
                    Err((e, back)) => {
                        assert_eq!(
                            e.rdkafka_error_code(),
                            Some(rdkafka::error::RDKafkaErrorCode::QueueFull),
                            "{e}"
                        );
                        p.poll(Duration::from_millis(10));
                        r = back;
                    }
                }
            }
        }
    }
    p.flush(Duration::from_secs(120)).unwrap();

    // Each offset seen once; batch sizes noted.
    /// Per partition, whether each offset was read; each batch's rows.
    type Seen = (Vec<Vec<bool>>, Vec<usize>);
    let seen: Arc<Mutex<Seen>> = Arc::new(Mutex::new((
        per.iter().map(|n| vec![false; *n]).collect(),
        Vec::new(),
    )));
    let s = seen.clone();
    let dir = tempfile::tempdir().unwrap();
    let q = Session::new()
        .read_stream(source(&t).starting_offsets(StartingOffsets::Earliest))
        .write_stream()
        .trigger(Trigger::AvailableNow)
        .checkpoint_location(dir.path().join("chk").to_str().unwrap())
        .foreach_batch(move |_, batches| {
            let mut s = s.lock().unwrap();
            let mut rows = 0;
            for b in batches {
                let sc = b.schema();
                let part = b.column(sc.index_of("partition").unwrap()).clone();
                let off = b.column(sc.index_of("offset").unwrap()).clone();
                let (part, off) = (
                    part.as_primitive::<Int32Type>(),
                    off.as_primitive::<Int64Type>(),
                );
                for i in 0..b.num_rows() {
                    let slot = &mut s.0[part.value(i) as usize][off.value(i) as usize];
                    assert!(!*slot, "offset {} read twice", off.value(i));
                    *slot = true;
                }
                rows += b.num_rows();
            }
            s.1.push(rows);
            Ok(())
        })
        .start()
        .unwrap();
    q.await_termination(Some(Duration::from_secs(600)))
        .expect("query ran")
        .then_some(())
        .expect("query ended in time");
    let s = seen.lock().unwrap();
    let sizes: Vec<usize> = s.1.iter().copied().filter(|n| *n > 0).collect();
    assert!(sizes.len() >= 2, "one unbounded batch: {sizes:?}");
    assert!(
        sizes.iter().all(|n| *n <= CAP as usize + 2),
        "a batch over the default cap: {sizes:?}"
    );
    assert_eq!(sizes.iter().sum::<usize>(), total);
    assert!(
        s.0.iter().all(|p| p.iter().all(|x| *x)),
        "every record read"
    );
}

#[test]
fn a_sink_whose_broker_is_down_fails_within_its_delivery_timeout() {
    let input = new_topic("down-in", 1);
    produce_n(&input, 0, 5, |i| format!("v{i}"));
    let timeout = Duration::from_secs(3);
    // At least once: the flush, then with a send queue of 2 records the send
    // loop itself; exactly once: fencing at start.
    for (exactly_once, queue) in [(false, None), (false, Some("2")), (true, None)] {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = KafkaSink::new("127.0.0.1:1")
            .topic("nowhere")
            .delivery_timeout(timeout);
        if !exactly_once {
            sink = sink.at_least_once();
        }
        if let Some(q) = queue {
            sink = sink.option("kafka.queue.buffering.max.messages", q);
        }
        let started = std::time::Instant::now();
        let result = Session::new()
            .read_stream(source(&input).starting_offsets(StartingOffsets::Earliest))
            .write_stream()
            .checkpoint_location(dir.path().join("chk").to_str().unwrap())
            .sink(sink)
            .start()
            .and_then(|q| {
                let ended = q.await_termination(Some(Duration::from_secs(120)))?;
                assert!(
                    ended,
                    "exactly_once={exactly_once}: still running after 120 s"
                );
                Ok(())
            });
        let e = result
            .expect_err("a broker that is down is an error")
            .to_string();
        let took = started.elapsed();
        assert!(
            took < timeout * 3 + Duration::from_secs(5),
            "exactly_once={exactly_once}: failed after {took:?}"
        );
        assert!(e.contains("127.0.0.1:1"), "names the broker: {e}");
    }
}

/// Views per page and minute from `input` (5 offsets a batch, available
/// now) to an exactly-once Kafka sink on `output`.
/// Views per page and minute, 5 clicks a batch, available-now, into the
/// Kafka sink exactly once (the seed's pipeline); `chk` may be an `s3://` URL.
pub(crate) fn views_in_small_batches(input: &str, output: &str, chk: &Path) {
    let q = Session::new()
        .read_stream(
            source(input)
                .starting_offsets(StartingOffsets::Earliest)
                .max_offsets_per_trigger(5)
                .from_json("value", click_fields()),
        )
        .group_by(vec![window("event_ts", "1 minute"), col("page")])
        .agg(vec![count_star("views")])
        .write_stream()
        .output_mode(OutputMode::Update)
        .trigger(Trigger::AvailableNow)
        .checkpoint_location(chk.to_str().unwrap())
        .sink(
            KafkaSink::new(&bootstrap())
                .topic(output)
                .json_values()
                .key_columns(&["page"]),
        )
        .start()
        .unwrap();
    run_to_end(&q);
}

#[test]
fn a_kill_after_send_or_after_commit_leaves_each_update_once() {
    const TEST: &str = "kafka::a_kill_after_send_or_after_commit_leaves_each_update_once";
    if let Ok(chk) = std::env::var("WEIR_KAFKA_CRASH_CHILD") {
        let (input, output) = (
            std::env::var("WEIR_KAFKA_CRASH_IN").unwrap(),
            std::env::var("WEIR_KAFKA_CRASH_OUT").unwrap(),
        );
        views_in_small_batches(&input, &output, Path::new(&chk));
        return; // not reached when the failpoint fires
    }
    let input = new_topic("kill-in", 2);
    produce_minute_clicks(&input, 0, 20);
    let dir = tempfile::tempdir().unwrap();
    let expected_topic = new_topic("kill-expected", 1);
    views_in_small_batches(&input, &expected_topic, &dir.path().join("chk-expected"));
    let expected = updates(&read_topic(&expected_topic, "read_committed"));
    assert!(expected.values().any(|v| v.len() > 1), "several batches");
    for point in ["kafka_after_send", "kafka_after_commit"] {
        let output = new_topic("kill-out", 1);
        let chk = dir.path().join(format!("chk-{point}"));
        crate::common::run_child_killed_at_failpoint(
            TEST,
            &[
                ("WEIR_KAFKA_CRASH_CHILD", chk.display().to_string()),
                ("WEIR_KAFKA_CRASH_IN", input.clone()),
                ("WEIR_KAFKA_CRASH_OUT", output.clone()),
                ("WEIR_FAILPOINT", format!("{point}:1")),
            ],
        );
        assert!(!chk.join("commits/1").exists(), "{point}: before commits/1");
        views_in_small_batches(&input, &output, &chk);
        assert_eq!(
            updates(&read_topic(&output, "read_committed")),
            expected,
            "{point}: every update once, as without the kill"
        );
    }
}

/// Produces `txns` transactions of `per` records to each of `partitions`
/// partitions, every third one aborted (its records written, then aborted);
/// returns the committed values in offset order per partition.
fn produce_transactions(topic: &str, partitions: i32, txns: usize, per: usize) -> Vec<Vec<String>> {
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("transactional.id", unique("txn-in"))
        .set("linger.ms", "0")
        .create()
        .unwrap();
    p.init_transactions(Duration::from_secs(30)).unwrap();
    let mut committed = vec![Vec::new(); partitions as usize];
    for t in 0..txns {
        p.begin_transaction().unwrap();
        let mut values = Vec::new();
        for part in 0..partitions {
            for i in 0..per {
                let v = format!("p{part}-t{t}-{i}");
                p.send(
                    BaseRecord::<'_, str, str>::to(topic)
                        .partition(part)
                        .payload(&v),
                )
                .map_err(|(e, _)| e)
                .unwrap();
                values.push((part, v));
            }
        }
        p.flush(Duration::from_secs(30)).unwrap();
        if t % 3 == 2 {
            p.abort_transaction(Duration::from_secs(30)).unwrap();
        } else {
            p.commit_transaction(Duration::from_secs(30)).unwrap();
            for (part, v) in values {
                committed[part as usize].push(v);
            }
        }
    }
    committed
}

#[test]
fn a_transactional_topic_in_small_batches_gives_each_committed_record_once() {
    // Batch ends land on transaction markers and inside aborted transactions
    // (offsets without a record to read): each partition's reader continues
    // from where the last batch left it, and no record is read twice, lost
    // or read from an aborted transaction.
    let t = new_topic("txn-in", 2);
    let committed = produce_transactions(&t, 2, 9, 4);
    let dir = tempfile::tempdir().unwrap();
    let out: Batches = Arc::default();
    for cap in ["3", "5"] {
        let chk = dir.path().join(format!("chk-{cap}"));
        out.lock().unwrap().clear();
        let q = collect(
            source(&t)
                .starting_offsets(StartingOffsets::Earliest)
                .option("maxOffsetsPerTrigger", cap),
            &chk,
            Trigger::AvailableNow,
            &out,
        )
        .unwrap();
        run_to_end(&q);
        let mut rows = all_rows(&out);
        rows.sort_by_key(|r| (r.partition, r.offset));
        for (part, want) in committed.iter().enumerate() {
            let got: Vec<String> = rows
                .iter()
                .filter(|r| r.partition == part as i32)
                .map(|r| r.value.clone().unwrap())
                .collect();
            assert_eq!(&got, want, "partition {part}, maxOffsetsPerTrigger {cap}");
        }
        let batches = q.recent_progress().len();
        assert!(
            batches >= 10,
            "{batches} batches at maxOffsetsPerTrigger {cap}"
        );
    }
}

#[test]
fn batches_whose_records_are_there_are_read_without_waiting() {
    // Each partition keeps its consumer across batches and a read returns as
    // soon as every partition reached the batch's end: reading a few hundred
    // records already in Kafka takes milliseconds, not a fetch round per
    // batch and partition (it took hundreds of ms per batch when every batch
    // assigned and sought a consumer again).
    let t = new_topic("nowait", 4);
    for p in 0..4 {
        produce_n(&t, p, 3000, |i| format!("v{i}"));
    }
    let dir = tempfile::tempdir().unwrap();
    let out: Batches = Arc::default();
    let q = collect(
        source(&t)
            .starting_offsets(StartingOffsets::Earliest)
            .option("maxOffsetsPerTrigger", "400"),
        &dir.path().join("chk"),
        Trigger::AvailableNow,
        &out,
    )
    .unwrap();
    run_to_end(&q);
    let rows = all_rows(&out);
    let distinct: BTreeSet<(i32, i64)> = rows.iter().map(|r| (r.partition, r.offset)).collect();
    assert_eq!((rows.len(), distinct.len()), (12000, 12000));
    // The first batch starts the consumers; the others continue them.
    let mut reads: Vec<i64> = q
        .recent_progress()
        .iter()
        .filter(|p| p.num_input_rows > 0)
        .skip(1)
        .map(|p| p.duration_ms["getBatch"])
        .collect();
    reads.sort_unstable();
    assert!(reads.len() >= 25, "{reads:?}");
    eprintln!("getBatch per batch (ms, sorted): {reads:?}");
    // Generous for a debug build on a busy machine: a wait for a fetch
    // backoff or a poll timeout is hundreds of ms to a second.
    let slowest = reads[reads.len() - 1];
    assert!(
        slowest < 400,
        "a batch waited {slowest} ms in getBatch: {reads:?}"
    );
}

#[test]
fn a_batch_read_again_after_later_batches_reads_the_same_records() {
    // The partitions' consumers are kept across batches; a batch read again
    // (a replay) after they moved on must seek back and read exactly its
    // records, and the batch after it must continue correctly. Transaction
    // markers and aborted records put batch ends on offsets without records.
    use weir::source::{Source, SourceContext};
    let t = new_topic("replay", 2);
    produce_transactions(&t, 2, 6, 4);
    let dir = tempfile::tempdir().unwrap();
    let mut s = source(&t)
        .starting_offsets(StartingOffsets::Earliest)
        .option("maxOffsetsPerTrigger", "7");
    s.open(&SourceContext {
        metadata_dir: dir.path().to_path_buf(),
        sync: false,
        default_parallelism: 1,
    })
    .unwrap();
    let key = |rows: Vec<KRow>| -> Vec<(i32, i64, Option<String>)> {
        rows.into_iter()
            .map(|r| (r.partition, r.offset, r.value))
            .collect()
    };
    // Every batch once, in order.
    let mut ends = vec![None];
    let mut first = Vec::new();
    loop {
        let start = ends.last().unwrap().clone();
        let end = s.latest_offset(start.as_ref()).unwrap().unwrap();
        if Some(&end) == start.as_ref() {
            break;
        }
        first.push(key(kafka_rows(&s.get_batch(start.as_ref(), &end).unwrap())));
        ends.push(Some(end));
    }
    assert!(first.len() >= 5, "{} batches", first.len());
    let all: Vec<_> = first.iter().flatten().cloned().collect();
    let distinct: BTreeSet<(i32, i64)> = all.iter().map(|(p, o, _)| (*p, *o)).collect();
    assert_eq!(
        (all.len(), distinct.len()),
        (32, 32),
        "each committed record once"
    );
    // Each batch again, out of order (a replay), then the one after it.
    for i in [2, 0, first.len() - 1, 1] {
        let (start, end) = (ends[i].as_ref(), ends[i + 1].as_ref().unwrap());
        assert_eq!(
            key(kafka_rows(&s.get_batch(start, end).unwrap())),
            first[i],
            "batch {i} again"
        );
        if i + 2 < ends.len() {
            let next = ends[i + 2].as_ref().unwrap();
            assert_eq!(
                key(kafka_rows(&s.get_batch(Some(end), next).unwrap())),
                first[i + 1],
                "batch {} after batch {i} again",
                i + 1
            );
        }
    }
    s.stop();
}

/// One rule, one message: each Kafka option value weir-plan's connector
/// table refuses is refused by `stream_query!` at compile time (the
/// trybuild case `ui-tests/compile-fail/connector_kafka_options.rs`, whose
/// `.stderr` is read here) and by `KafkaSource` when the query starts, both
/// with the table rule's message (the option spelled as each user writes
/// it: `starting_offsets` in the macro, `startingOffsets` in the builder).
#[test]
fn the_macro_and_the_engine_refuse_the_same_kafka_options_with_the_same_message() {
    use weir::plan::connectors;
    let stderr = include_str!("../../ui-tests/compile-fail/connector_kafka_options.stderr");
    let kafka = connectors::source("kafka").unwrap();
    // (the macro's name, Spark's name, the value): the cases of the trybuild file.
    let cases = [
        ("assign", "assign", "{}"),
        ("assign", "assign", r#"{"clicks":[]}"#),
        ("assign", "assign", r#"{"clicks":[2147483648]}"#),
        (
            "starting_offsets",
            "startingOffsets",
            r#"{"clicks":{"-1":0}}"#,
        ),
        ("max_offsets_per_trigger", "maxOffsetsPerTrigger", "0"),
        ("subscribe", "subscribe", " , "),
        ("starting_offsets", "startingOffsets", "earliset"),
    ];
    let start = |source: KafkaSource| -> String {
        let dir = tempfile::tempdir().unwrap();
        match collect(
            source,
            &dir.path().join("chk"),
            Trigger::AvailableNow,
            &Arc::default(),
        ) {
            Err(e) => e.to_string(),
            Ok(q) => {
                let _ = q.await_termination(Some(Duration::from_secs(30)));
                q.exception().map(|e| e.to_string()).unwrap_or_default()
            }
        }
    };
    for (macro_name, spark_name, value) in cases {
        let kind = kafka.option(spark_name).unwrap().kind;
        let at_compile_time = connectors::check_value(kind, macro_name, value).unwrap_err();
        assert!(
            stderr.contains(&format!("error: {}\n", at_compile_time.message)),
            "the macro's message for {macro_name} = {value:?} is not the table's: {}",
            at_compile_time.message
        );
        let at_start = connectors::check_value(kind, spark_name, value).unwrap_err();
        // No broker is reached: the options are refused first.
        let mut source = KafkaSource::new("127.0.0.1:1");
        if spark_name != "assign" && spark_name != "subscribe" {
            source = source.subscribe("clicks");
        }
        let e = start(source.option(spark_name, value));
        assert!(
            e.contains(&at_start.to_string()),
            "{spark_name}={value:?}: the engine says {e:?}, the table {at_start}"
        );
    }
    // The typed builder methods go through the same rules.
    let e = start(KafkaSource::new("127.0.0.1:1").assign(&[]));
    let rule = connectors::assign("assign", "{}").unwrap_err().to_string();
    assert!(e.contains(&rule), "{e}");
    let e = start(
        KafkaSource::new("127.0.0.1:1")
            .subscribe("clicks")
            .max_offsets_per_trigger(0),
    );
    assert!(
        e.contains("`maxOffsetsPerTrigger` takes a whole number of at least 1"),
        "{e}"
    );
}
