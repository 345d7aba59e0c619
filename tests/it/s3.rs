//! Object storage (S3, through a real S3 API server on 127.0.0.1:
//! `scripts/s3.sh`): the storage layer and checkpoints on it.
//!
//! The server's endpoint comes from `WEIR_S3_ENDPOINT` (scripts/test.sh
//! starts moto and sets it); without it these tests fail, saying how to
//! start it. Each test makes its own bucket. The query tests run their
//! queries in child processes of this test binary with the endpoint and
//! test credentials in the standard `AWS_*` variables, as a user's process
//! would have them (and each run of a query is its own process).

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};

use weir::arrow::array::{Array, Int64Array};
use weir::plan::{DataType, Field};
use weir::source::MemoryStream;
use weir::storage::{object_requests, Created, Requests, S3Settings, Storage};

/// The S3 endpoint of the test server.
fn endpoint() -> String {
    std::env::var("WEIR_S3_ENDPOINT").unwrap_or_else(|_| {
        panic!(
            "WEIR_S3_ENDPOINT is not set: these tests need an S3 API server. Run `bash scripts/s3.sh start` and `export WEIR_S3_ENDPOINT=http://127.0.0.1:39900` (scripts/test.sh does both)"
        )
    })
}

/// Settings for the test server, given in the session's way (so they do not
/// depend on this process's environment).
fn settings() -> S3Settings {
    let mut s = S3Settings::default();
    for (k, v) in [
        ("spark.hadoop.fs.s3a.endpoint", endpoint().as_str()),
        ("spark.hadoop.fs.s3a.access.key", "test"),
        ("spark.hadoop.fs.s3a.secret.key", "test"),
        ("spark.hadoop.fs.s3a.endpoint.region", "us-east-1"),
        ("weir.s3.allowHttp", "true"),
    ] {
        assert!(s.set(k, v).unwrap(), "{k}");
    }
    s
}

/// The same settings as `AWS_*` environment variables, for a child process.
fn aws_env() -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ENDPOINT_URL", endpoint()),
        ("AWS_ACCESS_KEY_ID", "test".into()),
        ("AWS_SECRET_ACCESS_KEY", "test".into()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_ALLOW_HTTP", "true".into()),
    ]
}

/// A name no other test (or run) uses.
fn unique() -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    )
}

/// Creates a fresh bucket (an unsigned `PUT /bucket`, which moto accepts)
/// and returns its name.
fn new_bucket() -> String {
    let name = format!("weir-test-{}", unique());
    let ep = endpoint();
    let host = ep
        .strip_prefix("http://")
        .expect("the test server's endpoint is http://host:port")
        .trim_end_matches('/');
    let mut conn = std::net::TcpStream::connect(host).unwrap_or_else(|e| {
        panic!("cannot reach the S3 server at {ep} ({e}): run `bash scripts/s3.sh start`")
    });
    write!(
        conn,
        "PUT /{name} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "creating bucket {name}: {answer}"
    );
    name
}

fn open(bucket: &str, prefix: &str) -> Storage {
    Storage::open(&format!("s3://{bucket}/{prefix}"), &settings(), false).unwrap()
}

#[test]
fn a_second_create_of_the_same_key_is_refused_and_the_first_object_kept() {
    let b = new_bucket();
    let s = open(&b, "chk/q");
    assert_eq!(
        s.put_create("offsets/0", b"first").unwrap(),
        Created::Created
    );
    assert_eq!(
        s.put_create("offsets/0", b"second").unwrap(),
        Created::Exists
    );
    assert_eq!(s.get("offsets/0").unwrap().as_deref(), Some(&b"first"[..]));
    // Another client (another process's view) is refused the same way.
    let other = open(&b, "chk/q");
    assert_eq!(
        other.put_create("offsets/0", b"third").unwrap(),
        Created::Exists
    );
    assert_eq!(s.get("offsets/0").unwrap().as_deref(), Some(&b"first"[..]));
}

#[test]
fn of_concurrent_creators_of_one_key_exactly_one_wins() {
    let b = new_bucket();
    let s = open(&b, "race");
    for round in 0..5 {
        let key = format!("commits/{round}");
        let outcomes: Vec<Created> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..6)
                .map(|w| {
                    let s = s.clone();
                    let key = key.clone();
                    sc.spawn(move || s.put_create(&key, format!("w{w}").as_bytes()).unwrap())
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let won = outcomes.iter().filter(|o| **o == Created::Created).count();
        assert_eq!(won, 1, "round {round}: {outcomes:?}");
    }
}

#[test]
fn get_put_list_and_delete_on_s3() {
    let b = new_bucket();
    let s = open(&b, "dir");
    assert_eq!(s.get("missing").unwrap(), None);
    assert_eq!(s.list("").unwrap(), Vec::<String>::new());
    s.put("a/2", b"two").unwrap();
    s.put("a/10", b"ten").unwrap();
    s.put("a/sub/x", b"x").unwrap();
    s.put("b", b"bee").unwrap();
    // Direct children only, sorted; sizes reported.
    assert_eq!(s.list("a").unwrap(), vec!["10", "2"]);
    assert_eq!(s.list("").unwrap(), vec!["b"]);
    let e = s.list_entries("a").unwrap();
    assert_eq!((e[0].name.as_str(), e[0].size), ("10", 3));
    assert!(e[0].modified_ms > 0);
    // put overwrites.
    s.put("b", b"bee2").unwrap();
    assert_eq!(s.get("b").unwrap().as_deref(), Some(&b"bee2"[..]));
    // A child directory sees the same objects under its own names.
    let a = s.child("a").unwrap();
    assert_eq!(a.get("2").unwrap().as_deref(), Some(&b"two"[..]));
    assert_eq!(a.location().to_string(), format!("s3://{b}/dir/a"));
    assert!(a.local_root().is_none());
    // delete, twice (the second finds nothing: fine).
    s.delete("a/2").unwrap();
    s.delete("a/2").unwrap();
    assert_eq!(s.get("a/2").unwrap(), None);
    assert_eq!(s.list("a").unwrap(), vec!["10"]);
    // Nothing leaked outside the prefix.
    let root = open(&b, "");
    assert_eq!(root.list("").unwrap(), Vec::<String>::new());
    assert_eq!(root.list("dir").unwrap(), vec!["b"]);
}

#[test]
fn a_missing_bucket_is_a_clear_error() {
    let name = format!("weir-missing-{}", unique());
    let err = Storage::open(&format!("s3://{name}/chk"), &settings(), false)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!(
            "the bucket `{name}` does not exist at {}",
            endpoint()
        )),
        "{err}"
    );
    assert!(err.contains(&format!("aws s3 mb s3://{name}")), "{err}");
}

#[test]
fn credentials_never_appear_in_descriptions_or_errors() {
    let secret = "weirSecretKey/DoNotPrint0123456789abcdef";
    let key_id = "AKIAWEIRTESTKEYID0001";
    let mut s = settings();
    s.set("spark.hadoop.fs.s3a.access.key", key_id).unwrap();
    s.set("spark.hadoop.fs.s3a.secret.key", secret).unwrap();
    let b = new_bucket();
    let storage = Storage::open(&format!("s3://{b}/x"), &s, false).unwrap();
    let missing = Storage::open("s3://weir-no-such-bucket-for-creds/x", &s, false).unwrap_err();
    for text in [
        storage.describe(),
        format!("{storage:?}"),
        format!("{s:?}"),
        missing.to_string(),
        format!("{missing:?}"),
    ] {
        assert!(!text.contains(secret) && !text.contains(key_id), "{text}");
    }
    assert_eq!(
        storage.describe(),
        format!("s3://{b}/x (endpoint {})", endpoint())
    );
}

// ---- checkpoints on S3 ----

type Collected = Arc<Mutex<Vec<(i64, Vec<i64>)>>>;

fn fields() -> Vec<Field> {
    vec![Field::new("value", DataType::Int64)]
}

fn values(batches: &[weir::arrow::record_batch::RecordBatch]) -> Vec<i64> {
    let mut v: Vec<i64> = batches
        .iter()
        .flat_map(|b| {
            let a = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            (0..a.len()).map(|i| a.value(i)).collect::<Vec<_>>()
        })
        .collect();
    v.sort();
    v
}

/// A stream holding `history`, one batch per element.
fn stream(history: &[&[i64]]) -> MemoryStream {
    let s = MemoryStream::new(&fields());
    for rows in history {
        let json: Vec<_> = rows
            .iter()
            .map(|v| serde_json::json!({ "value": v }))
            .collect();
        s.add_json(&json).unwrap();
    }
    s
}

/// A stateless query (`value * 10`) on `stream`, checkpointed at `chk`,
/// collecting (batch id, sorted values) through foreach_batch.
fn start(stream: MemoryStream, chk: &str, out: Collected) -> weir::Result<weir::StreamingQuery> {
    crate::common::session()
        .read_stream(stream.clone())
        .select(vec![("value * 10", "value")])
        .write_stream()
        .foreach_batch(move |id, batches| {
            out.lock().unwrap().push((id, values(batches)));
            Ok(())
        })
        .checkpoint_location(chk)
        .start()
}

/// Runs test `name` of this binary in a child process with the test
/// server in the `AWS_*` variables and `envs`; returns its collected
/// batches (written by the child to a file) after asserting it passed.
fn run_child(name: &str, envs: &[(&str, String)]) -> Vec<(i64, Vec<i64>)> {
    let out = tempfile::NamedTempFile::new().unwrap();
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .envs(aws_env())
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
        .env("WEIR_S3_CHILD_OUT", out.path())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{name} child {envs:?} failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(out.path()).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: child output {text:?}: {e}"))
}

/// In a child process: the phase to run, if this is one.
fn child_phase() -> Option<(String, String)> {
    let phase = std::env::var("WEIR_S3_CHILD_PHASE").ok()?;
    let chk = std::env::var("WEIR_S3_CHILD_CHK").expect("the child's checkpoint");
    Some((phase, chk))
}

fn child_done(got: &Collected) {
    let path = std::env::var("WEIR_S3_CHILD_OUT").expect("the child's output file");
    let got = got.lock().unwrap().clone();
    std::fs::write(path, serde_json::to_string(&got).unwrap()).unwrap();
}

/// The history a phase's process has (a memory stream lives in its process:
/// each run re-adds what came before).
fn history(phase: &str) -> Vec<&'static [i64]> {
    let all: [&'static [i64]; 4] = [&[1, 2, 3], &[4, 5], &[6, 7], &[8]];
    let n = match phase {
        "first" => 2,
        "second" => 3,
        _ => 4,
    };
    all[..n].to_vec()
}

#[test]
fn a_stateless_query_checkpointed_on_s3_restarts_exactly() {
    if let Some((phase, chk)) = child_phase() {
        let h = history(&phase);
        let got: Collected = Arc::default();
        // The first run sees its history arrive in two steps.
        let s = stream(if phase == "first" { &h[..1] } else { &h });
        let q = start(s.clone(), &chk, got.clone()).unwrap();
        q.process_all_available().unwrap();
        if phase == "first" {
            s.add_json(&[
                serde_json::json!({"value": 4}),
                serde_json::json!({"value": 5}),
            ])
            .unwrap();
            q.process_all_available().unwrap();
        }
        q.stop().unwrap();
        assert!(q.exception().is_none(), "{:?}", q.exception());
        child_done(&got);
        return;
    }
    let b = new_bucket();
    let chk = format!("s3://{b}/chk/q1");
    let name = "s3::a_stateless_query_checkpointed_on_s3_restarts_exactly";
    let env = |phase: &str| {
        vec![
            ("WEIR_S3_CHILD_PHASE", phase.to_string()),
            ("WEIR_S3_CHILD_CHK", chk.clone()),
        ]
    };
    assert_eq!(
        run_child(name, &env("first")),
        vec![(0, vec![10, 20, 30]), (1, vec![40, 50])]
    );
    // A new process: exactly the rows after the committed batches.
    assert_eq!(run_child(name, &env("second")), vec![(2, vec![60, 70])]);
    let s = open(&b, "chk/q1");
    assert_eq!(s.list("offsets").unwrap(), vec!["0", "1", "2"]);
    assert_eq!(s.list("commits").unwrap(), vec!["0", "1", "2"]);
    let meta: serde_json::Value =
        serde_json::from_slice(&s.get("metadata").unwrap().unwrap()).unwrap();
    assert!(meta["id"].is_string(), "{meta}");
    // As if the second run died after its sink, before commits/2: the next
    // run re-runs batch 2 with its logged offsets (offsets/2 is not written
    // again, so this run is not mistaken for a concurrent one), then goes on.
    let offsets_2 = s.get("offsets/2").unwrap();
    s.delete("commits/2").unwrap();
    assert_eq!(
        run_child(name, &env("third")),
        vec![(2, vec![60, 70]), (3, vec![80])]
    );
    assert_eq!(
        s.get("offsets/2").unwrap(),
        offsets_2,
        "offsets/2 is kept as logged"
    );
    assert_eq!(s.list("commits").unwrap(), vec!["0", "1", "2", "3"]);
}

/// Two runs of one query on checkpoint `chk`, the second started while the
/// first is active: the second writes batch 1 first, so the first, planning
/// its batch 1, is refused with Spark's concurrent-run error. Returns what
/// the first run's sink received.
fn a_second_run_is_refused(chk: &str) -> Vec<(i64, Vec<i64>)> {
    let got: Collected = Arc::default();
    let first = stream(&[&[1]]);
    let a = start(first.clone(), chk, got.clone()).unwrap();
    a.process_all_available().unwrap();
    let other: Collected = Arc::default();
    // Its batch 1 ends at another offset than the first run's will (two
    // runs logging the very same entry would be running the same batch,
    // which is accepted: a write retried after a lost answer looks so).
    let b = start(stream(&[&[1], &[2], &[5]]), chk, other.clone()).unwrap();
    b.process_all_available().unwrap();
    b.stop().unwrap();
    assert_eq!(other.lock().unwrap().clone(), vec![(1, vec![20, 50])]);
    first.add_json(&[serde_json::json!({"value": 3})]).unwrap();
    let err = a.process_all_available().unwrap_err().to_string();
    assert!(
        err.contains(&format!(
            "another run of query {} is writing to checkpoint {chk}; only one run may use a checkpoint",
            a.id()
        )),
        "{err}"
    );
    assert!(!a.is_active());
    let got = got.lock().unwrap().clone();
    got
}

#[test]
fn a_second_run_on_the_same_s3_checkpoint_is_refused() {
    if let Some((_, chk)) = child_phase() {
        let got: Collected = Arc::new(Mutex::new(a_second_run_is_refused(&chk)));
        child_done(&got);
        return;
    }
    let b = new_bucket();
    let chk = format!("s3://{b}/chk/twice");
    let got = run_child(
        "s3::a_second_run_on_the_same_s3_checkpoint_is_refused",
        &[
            ("WEIR_S3_CHILD_PHASE", "run".into()),
            ("WEIR_S3_CHILD_CHK", chk),
        ],
    );
    // The refused run never ran its batch 1.
    assert_eq!(got, vec![(0, vec![10])]);
    let s = open(&b, "chk/twice");
    let offsets_1 = String::from_utf8(s.get("offsets/1").unwrap().unwrap()).unwrap();
    assert!(
        offsets_1.ends_with("\n2"),
        "batch 1 as the second run logged it: {offsets_1}"
    );
}

#[test]
fn a_second_run_on_the_same_local_checkpoint_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk");
    assert_eq!(
        a_second_run_is_refused(chk.to_str().unwrap()),
        vec![(0, vec![10])]
    );
    let offsets_1 = std::fs::read_to_string(chk.join("offsets/1")).unwrap();
    assert!(offsets_1.ends_with("\n2"), "{offsets_1}");
}

#[test]
fn what_an_s3_checkpoint_cannot_keep_yet_is_refused_before_writing() {
    if let Some((_, chk)) = child_phase() {
        let err = crate::common::session()
            .read_stream(stream(&[&[1]]))
            .group_by(vec![weir::functions::col("value")])
            .agg(vec![weir::functions::count_star("n")])
            .write_stream()
            .output_mode(weir::plan::OutputMode::Update)
            .foreach_batch(|_, _| Ok(()))
            .checkpoint_location(&chk)
            .start()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("not yet supported on object storage: the state of stateful operators"),
            "{err}"
        );
        let err = crate::common::session()
            .read_stream(weir::source::RateSource::new().rows_per_second(1))
            .write_stream()
            .foreach_batch(|_, _| Ok(()))
            .checkpoint_location(&chk)
            .start()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("not yet supported on object storage: source")
                && err.contains("keeps its own log"),
            "{err}"
        );
        child_done(&Arc::default());
        return;
    }
    let b = new_bucket();
    run_child(
        "s3::what_an_s3_checkpoint_cannot_keep_yet_is_refused_before_writing",
        &[
            ("WEIR_S3_CHILD_PHASE", "run".into()),
            ("WEIR_S3_CHILD_CHK", format!("s3://{b}/chk/stateful")),
        ],
    );
    // Nothing was written: no metadata, no logs.
    assert_eq!(
        open(&b, "").list("chk/stateful").unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(
        open(&b, "chk/stateful").list("offsets").unwrap(),
        Vec::<String>::new()
    );
}

#[test]
fn a_batch_checkpointed_on_s3_costs_two_puts_and_nothing_else() {
    if let Some((_, chk)) = child_phase() {
        let got: Collected = Arc::default();
        let s = stream(&[&[1]]);
        let q = start(s.clone(), &chk, got.clone()).unwrap();
        q.process_all_available().unwrap();
        let before = object_requests();
        for v in 2..=4 {
            s.add_json(&[serde_json::json!({ "value": v })]).unwrap();
            q.process_all_available().unwrap();
        }
        let per_3 = object_requests().since(&before);
        q.stop().unwrap();
        // offsets/N and commits/N, one conditional PUT each; no reads, no
        // listings, while the query runs (old entries are purged every
        // 10th batch, past the retention).
        assert_eq!(
            per_3,
            Requests {
                puts: 6,
                gets: 0,
                lists: 0,
                deletes: 0
            },
            "3 batches"
        );
        child_done(&got);
        return;
    }
    let b = new_bucket();
    let got = run_child(
        "s3::a_batch_checkpointed_on_s3_costs_two_puts_and_nothing_else",
        &[
            ("WEIR_S3_CHILD_PHASE", "run".into()),
            ("WEIR_S3_CHILD_CHK", format!("s3://{b}/chk/cost")),
        ],
    );
    assert_eq!(got.len(), 4, "{got:?}");
}
