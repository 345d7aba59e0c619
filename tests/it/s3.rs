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
pub(crate) fn endpoint() -> String {
    std::env::var("WEIR_S3_ENDPOINT").unwrap_or_else(|_| {
        panic!(
            "WEIR_S3_ENDPOINT is not set: these tests need an S3 API server. Run `bash scripts/s3.sh start` and `export WEIR_S3_ENDPOINT=http://127.0.0.1:39900` (scripts/test.sh does both)"
        )
    })
}

/// Settings for the test server, given in the session's way (so they do not
/// depend on this process's environment).
pub(crate) fn settings() -> S3Settings {
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
pub(crate) fn unique() -> String {
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
pub(crate) fn new_bucket() -> String {
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

/// How long a child process running one query may take before it is
/// killed and the test fails (a hung child must not hang the run).
const CHILD_DEADLINE: std::time::Duration = std::time::Duration::from_secs(180);

/// Runs `cmd` (a child of this test binary) to its end within
/// [`CHILD_DEADLINE`], its output kept in files; asserts it passed,
/// showing its output when not.
fn run_to_success(cmd: &mut std::process::Command, what: &str) {
    let stdout = tempfile::NamedTempFile::new().unwrap();
    let stderr = tempfile::NamedTempFile::new().unwrap();
    cmd.stdout(stdout.reopen().unwrap())
        .stderr(stderr.reopen().unwrap());
    let status = crate::common::TestChild::spawn(cmd).wait_within(CHILD_DEADLINE, what);
    assert!(
        status.success(),
        "{what} failed ({status}): {}\n{}",
        std::fs::read_to_string(stdout.path()).unwrap_or_default(),
        std::fs::read_to_string(stderr.path()).unwrap_or_default()
    );
}

/// Runs test `name` of this binary in a child process with the test
/// server in the `AWS_*` variables and `envs`; returns its collected
/// batches (written by the child to a file) after asserting it passed
/// within [`CHILD_DEADLINE`].
fn run_child(name: &str, envs: &[(&str, String)]) -> Vec<(i64, Vec<i64>)> {
    let out = tempfile::NamedTempFile::new().unwrap();
    run_to_success(
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", name, "--nocapture", "--test-threads=1"])
            .envs(aws_env())
            .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
            .env("WEIR_S3_CHILD_OUT", out.path()),
        &format!("{name} child {envs:?}"),
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

/// A user's source that keeps a log of its own (it does not say
/// `log_on_storage`): only a local checkpoint has room for it.
struct OwnLog;

impl weir::source::Source for OwnLog {
    fn schema(&self) -> weir::arrow::datatypes::SchemaRef {
        std::sync::Arc::new(weir::arrow::datatypes::Schema::new(vec![
            weir::arrow::datatypes::Field::new(
                "value",
                weir::arrow::datatypes::DataType::Int64,
                true,
            ),
        ]))
    }
    fn description(&self) -> String {
        "OwnLog".into()
    }
    fn latest_offset(
        &mut self,
        _start: Option<&weir::source::Offset>,
    ) -> weir::Result<Option<weir::source::Offset>> {
        Ok(None)
    }
    fn get_batch(
        &mut self,
        _start: Option<&weir::source::Offset>,
        _end: &weir::source::Offset,
    ) -> weir::Result<Vec<weir::arrow::record_batch::RecordBatch>> {
        Ok(vec![])
    }
}

/// A user's sink that writes under `checkpoint_dir` itself (it says
/// `needs_local_checkpoint`).
struct LocalFiles;

impl weir::sink::Sink for LocalFiles {
    fn description(&self) -> String {
        "LocalFiles".into()
    }
    fn needs_local_checkpoint(&self) -> bool {
        true
    }
    fn add_batch(
        &mut self,
        _id: i64,
        _batches: &[weir::arrow::record_batch::RecordBatch],
    ) -> weir::Result<()> {
        Ok(())
    }
}

#[test]
fn what_an_s3_checkpoint_cannot_keep_yet_is_refused_before_writing() {
    if let Some((_, chk)) = child_phase() {
        let err = crate::common::session()
            .read_stream(OwnLog)
            .write_stream()
            .foreach_batch(|_, _| Ok(()))
            .checkpoint_location(&chk)
            .start()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("not yet supported on object storage: source")
                && err.contains("OwnLog")
                && err.contains("keeps its own log"),
            "{err}"
        );
        // A sink that keeps files under the checkpoint directory is refused too ...
        let err = crate::common::session()
            .read_stream(stream(&[&[1]]))
            .write_stream()
            .sink(LocalFiles)
            .checkpoint_location(&chk)
            .start()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("not yet supported on object storage: the sink LocalFiles"),
            "{err}"
        );
        // ... while a user's own sink, which keeps nothing there, runs.
        struct Counting(Collected);
        impl weir::sink::Sink for Counting {
            fn description(&self) -> String {
                "Counting".into()
            }
            fn add_batch(
                &mut self,
                id: i64,
                batches: &[weir::arrow::record_batch::RecordBatch],
            ) -> weir::Result<()> {
                self.0.lock().unwrap().push((id, values(batches)));
                Ok(())
            }
        }
        let got: Collected = Arc::default();
        let q = crate::common::session()
            .read_stream(stream(&[&[1, 2]]))
            .write_stream()
            .sink(Counting(got.clone()))
            .checkpoint_location(&format!("{chk}-own-sink"))
            .start()
            .unwrap();
        q.process_all_available().unwrap();
        q.stop().unwrap();
        assert_eq!(*got.lock().unwrap(), vec![(0, vec![1, 2])]);
        // The rate source keeps its start time on the checkpoint's storage.
        let q = crate::common::session()
            .read_stream(weir::source::RateSource::new().rows_per_second(1))
            .write_stream()
            .foreach_batch(|_, _| Ok(()))
            .checkpoint_location(&format!("{chk}-rate"))
            .start()
            .unwrap();
        q.process_all_available().unwrap();
        q.stop().unwrap();
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
    // The rate source's start time is in S3, as Spark writes it locally.
    let start = open(&b, "chk/stateful-rate").get("sources/0/0").unwrap();
    let start = String::from_utf8(start.expect("sources/0/0 on S3")).unwrap();
    assert!(start.starts_with("v1\n{\"creationTimeMs\":"), "{start}");
}

/// The seed's main pipeline, Kafka -> `from_json` -> page views per
/// 1-minute window -> Kafka exactly once, with its checkpoint on S3: a run
/// killed after the sink committed batch 1 (before `commits/1`) and
/// restarted in another process leaves in the output topic, read
/// `read_committed`, exactly what an uninterrupted run writes.
#[cfg(feature = "kafka")]
#[test]
fn kafka_page_views_exactly_once_on_s3_killed_after_the_commit_recover_exactly() {
    use crate::kafka::{new_topic, produce_minute_clicks, read_topic, updates};
    const TEST: &str =
        "s3::kafka_page_views_exactly_once_on_s3_killed_after_the_commit_recover_exactly";
    if let Some((_, chk)) = child_phase() {
        let input = std::env::var("WEIR_S3_KAFKA_IN").unwrap();
        let output = std::env::var("WEIR_S3_KAFKA_OUT").unwrap();
        crate::kafka::views_in_small_batches(&input, &output, std::path::Path::new(&chk));
        child_done(&Arc::default());
        return;
    }
    let input = new_topic("s3-clicks", 2);
    produce_minute_clicks(&input, 0, 20);
    let dir = tempfile::tempdir().unwrap();
    let reference = new_topic("s3-views-expected", 1);
    crate::kafka::views_in_small_batches(&input, &reference, &dir.path().join("chk"));
    let expected = updates(&read_topic(&reference, "read_committed"));
    assert!(expected.values().any(|v| v.len() > 1), "several batches");
    let b = new_bucket();
    let output = new_topic("s3-views", 1);
    let env: Vec<(&str, String)> = vec![
        ("WEIR_S3_CHILD_PHASE", "run".into()),
        ("WEIR_S3_CHILD_CHK", format!("s3://{b}/chk/page_views")),
        ("WEIR_S3_KAFKA_IN", input.clone()),
        ("WEIR_S3_KAFKA_OUT", output.clone()),
    ];
    let mut killed = aws_env();
    killed.extend(env.iter().cloned());
    killed.push(("WEIR_FAILPOINT", "kafka_after_commit:1".into()));
    crate::common::run_child_killed_at_failpoint(TEST, &killed);
    let s = open(&b, "chk/page_views");
    assert_eq!(
        s.list("commits").unwrap(),
        vec!["0"],
        "killed before commits/1"
    );
    // The starting offsets are kept in S3, in the file a local checkpoint has.
    let initial = String::from_utf8(s.get("sources/0/initial-offsets").unwrap().unwrap()).unwrap();
    assert!(
        initial.starts_with("v1\n") && initial.contains(&input),
        "{initial}"
    );
    run_child(TEST, &env);
    assert_eq!(
        updates(&read_topic(&output, "read_committed")),
        expected,
        "every update once, as without the kill"
    );
}

/// With a `topic` column, the Kafka sink's batch markers go to the first
/// topic written, recorded in `sinks/kafka/marker-topic` on the S3
/// checkpoint: a restart whose last batch's commit was lost finds the
/// marker there and does not write the batch again.
#[cfg(feature = "kafka")]
#[test]
fn the_kafka_sink_records_its_marker_topic_in_s3_and_a_restart_finds_it() {
    use crate::kafka::{bootstrap, new_topic, read_topic};
    let topic = new_topic("s3-marker", 1);
    let b = new_bucket();
    let chk = format!("s3://{b}/chk/marker");
    let history: Vec<Vec<i64>> = vec![vec![1, 2], vec![3]];
    let run = |n: usize| {
        let session = weir::Session::with_config(weir::SessionConfig {
            fsync_checkpoint: false,
            s3: settings(),
            ..weir::SessionConfig::default()
        });
        let rows: Vec<&[i64]> = history[..n].iter().map(Vec::as_slice).collect();
        let q = session
            .read_stream(stream(&rows))
            .select(vec![
                (&format!("'{topic}'") as &str, "topic"),
                ("CAST(value AS STRING)", "value"),
            ])
            .write_stream()
            .sink(weir::sink::KafkaSink::new(&bootstrap()))
            .checkpoint_location(&chk)
            .start()
            .unwrap();
        q.process_all_available().unwrap();
        q.stop().unwrap();
    };
    run(1);
    let s = open(&b, "chk/marker");
    assert_eq!(
        s.get("sinks/kafka/marker-topic").unwrap().as_deref(),
        Some(topic.as_bytes())
    );
    // A crash after the transaction of batch 0, before commits/0.
    s.delete("commits/0").unwrap();
    run(2);
    let values: Vec<String> = read_topic(&topic, "read_committed")
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    assert_eq!(values, ["1", "2", "3"], "batch 0 written once");
}

/// A PostgreSQL sink on an S3 checkpoint takes the query id from the
/// checkpoint's metadata in S3: a batch run again after a crash (its commit
/// lost) is recognised by the sink's marker and not written twice.
#[cfg(feature = "postgres")]
#[test]
fn a_postgres_sink_on_an_s3_checkpoint_restarts_without_duplicating() {
    use weir::sink::postgres::client::{Client, NoTls};
    use weir::sink::PostgresSink;
    let url = std::env::var("WEIR_POSTGRES_URL")
        .expect("WEIR_POSTGRES_URL is not set: start PostgreSQL with `eval \"$(bash scripts/services.sh start)\"`");
    let table = format!("weir_s3_{}", unique().replace('-', "_"));
    let b = new_bucket();
    let chk = format!("s3://{b}/chk/pg");
    // Starts with `history` in the stream, then adds `more`, one batch each.
    let run = |history: &[&[i64]], more: &[&[i64]]| {
        let session = weir::Session::with_config(weir::SessionConfig {
            fsync_checkpoint: false,
            s3: settings(),
            ..weir::SessionConfig::default()
        });
        let input = stream(history);
        let q = session
            .read_stream(input.clone())
            .write_stream()
            .sink(PostgresSink::new(&url, &table).create_table(true))
            .checkpoint_location(&chk)
            .start()
            .unwrap();
        q.process_all_available().unwrap();
        for rows in more {
            let json: Vec<_> = rows
                .iter()
                .map(|v| serde_json::json!({ "value": v }))
                .collect();
            input.add_json(&json).unwrap();
            q.process_all_available().unwrap();
        }
        q.stop().unwrap();
    };
    run(&[&[1, 2, 3]], &[&[4, 5]]);
    // A crash after the sink wrote batch 1, before the commit log had it.
    let s = open(&b, "chk/pg");
    assert_eq!(s.list("commits").unwrap(), vec!["0", "1"]);
    s.delete("commits/1").unwrap();
    run(&[&[1, 2, 3], &[4, 5], &[6]], &[]);
    let mut c = Client::connect(&url, NoTls).unwrap();
    let rows: Vec<i64> = c
        .query(&format!("SELECT value FROM {table} ORDER BY value"), &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(rows, vec![1, 2, 3, 4, 5, 6], "batch 1 written once");
    let meta: serde_json::Value =
        serde_json::from_slice(&s.get("metadata").unwrap().unwrap()).unwrap();
    let id = meta["id"].as_str().unwrap().to_string();
    let marker: i64 = c
        .query_one(
            "SELECT batch_id FROM weir_sink_commits WHERE sink = $1 AND query_id = $2",
            &[&table, &id],
        )
        .unwrap()
        .get(0);
    assert_eq!(marker, 2, "the marker is keyed by the query id in S3");
    c.batch_execute(&format!(
        "DROP TABLE {table}; DELETE FROM weir_sink_commits WHERE sink = '{table}'"
    ))
    .unwrap();
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

// ---- state on S3 ----

/// Runs the conformance suite on `provider` in a child process (test
/// `name`), every scenario's checkpoint on S3 (RocksDB's working copies in
/// a local directory of their own).
fn conformance_on_s3(provider: &str, name: &str) {
    if let Some((_, chk)) = child_phase() {
        crate::conformance::conformance_at(provider, &|scenario| format!("{chk}/{scenario}"));
        child_done(&Arc::default());
        return;
    }
    let b = new_bucket();
    let local = tempfile::tempdir().unwrap();
    run_child(
        name,
        &[
            ("WEIR_S3_CHILD_PHASE", "run".into()),
            ("WEIR_S3_CHILD_CHK", format!("s3://{b}/conformance")),
            ("SPARK_LOCAL_DIRS", local.path().display().to_string()),
        ],
    );
    // The state is on S3, version by version.
    let s = open(&b, "conformance/key_count_complete/state/0");
    let mut deltas = Vec::new();
    for p in 0..4 {
        deltas.extend(s.list(&p.to_string()).unwrap());
    }
    assert!(
        deltas.iter().any(|n| n == "1.delta") && deltas.iter().any(|n| n == "2.delta"),
        "{deltas:?}"
    );
    let working = local.path().join("weir-rocksdb");
    assert_eq!(
        working.exists(),
        provider == "rocksdb",
        "RocksDB keeps its working copies in SPARK_LOCAL_DIRS"
    );
}

#[test]
fn conformance_with_the_checkpoint_on_s3() {
    conformance_on_s3("memory", "s3::conformance_with_the_checkpoint_on_s3");
}

#[cfg(feature = "rocksdb")]
#[test]
fn conformance_with_the_checkpoint_on_s3_on_rocksdb() {
    conformance_on_s3(
        "rocksdb",
        "s3::conformance_with_the_checkpoint_on_s3_on_rocksdb",
    );
}

/// The windowed aggregation's input: chunk `i` holds events of minute `i`
/// (2-minute windows: each window's rows come in two batches, so its count
/// needs the state of the batch before).
fn agg_chunks() -> Vec<Vec<serde_json::Value>> {
    (0..6i64)
        .map(|i| {
            (0..6i64)
                .map(|j| {
                    let sec = i * 60 + j * 10 - if j == 5 { 40 } else { 0 };
                    serde_json::json!({
                        "ts": format!("2024-01-01T12:{:02}:{:02}Z", sec / 60, sec % 60),
                        "key": format!("k{}", j % 3),
                        "value": i * 10 + j,
                    })
                })
                .collect()
        })
        .collect()
}

/// Counts and sums per 2-minute window and key (30 s watermark, append) on
/// `provider` with 2 state partitions, one batch per chunk (no no-data
/// batches). Starts with the first `pre` chunks already in the stream (a
/// restart re-adds what its killed run had), then adds the rest up to chunk
/// `last` (excluded) one batch at a time. Each batch's sorted rows go to
/// `out/<batch>-<pid>`.
fn agg_query(chk: &str, provider: &str, out: &std::path::Path, pre: usize, last: usize) {
    use weir::functions::{col, count_star, sum, window};
    let mut conf = weir::SessionConfig {
        fsync_checkpoint: false,
        no_data_batches: false,
        shuffle_partitions: Some(2),
        ..weir::SessionConfig::default()
    };
    conf.set("spark.sql.streaming.stateStore.providerClass", provider)
        .unwrap();
    let chunks = agg_chunks();
    let s = MemoryStream::new(&crate::common::fields());
    for c in &chunks[..pre] {
        s.add_json(c).unwrap();
    }
    let out = out.to_path_buf();
    let q = weir::Session::with_config(conf)
        .read_stream(s.clone())
        .with_watermark("ts", "30 seconds")
        .group_by(vec![window("ts", "2 minutes"), col("key")])
        .agg(vec![count_star("n"), sum("value", "total")])
        .write_stream()
        .output_mode(weir::plan::OutputMode::Append)
        .foreach_batch(move |id, batches| {
            let mut rows: Vec<String> = crate::common::rows_json(batches)
                .iter()
                .map(|r| r.to_string())
                .collect();
            rows.sort();
            let name = format!("{id}-{}", std::process::id());
            std::fs::write(out.join(name), serde_json::to_string(&rows).unwrap()).unwrap();
            Ok(())
        })
        .checkpoint_location(chk)
        .start()
        .unwrap();
    q.process_all_available().unwrap();
    for c in &chunks[pre..last] {
        s.add_json(c).unwrap();
        q.process_all_available().unwrap();
    }
    q.stop().unwrap();
    assert!(q.exception().is_none(), "{:?}", q.exception());
}

/// What [`agg_query`] runs wrote: each batch's outputs, one per run that
/// ran it, in no particular order.
fn agg_outputs(out: &std::path::Path) -> std::collections::BTreeMap<i64, Vec<Vec<String>>> {
    let mut m: std::collections::BTreeMap<i64, Vec<Vec<String>>> = Default::default();
    for e in std::fs::read_dir(out).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let batch: i64 = name.split('-').next().unwrap().parse().unwrap();
        let rows: Vec<String> =
            serde_json::from_str(&std::fs::read_to_string(e.path()).unwrap()).unwrap();
        m.entry(batch).or_default().push(rows);
    }
    m
}

/// The uninterrupted run of [`agg_query`], on a local checkpoint: each
/// batch's rows.
fn agg_reference(provider: &str) -> std::collections::BTreeMap<i64, Vec<String>> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let chk = dir.path().join("chk");
    agg_query(chk.to_str().unwrap(), provider, &out, 0, 6);
    let reference: std::collections::BTreeMap<i64, Vec<String>> = agg_outputs(&out)
        .into_iter()
        .map(|(b, mut runs)| (b, runs.pop().unwrap()))
        .collect();
    assert_eq!(reference.len(), 6, "{reference:?}");
    assert!(
        reference.values().any(|rows| rows
            .iter()
            .any(|r| r.contains(r#""n":4"#) || r.contains(r#""n":3"#))),
        "some window counts rows of two batches: {reference:?}"
    );
    reference
}

/// In a child process: runs [`agg_query`] as the environment says.
fn agg_child(provider: &str) -> bool {
    let Some((_, chk)) = child_phase() else {
        return false;
    };
    let out = std::env::var("WEIR_S3_AGG_OUT").unwrap();
    let pre: usize = std::env::var("WEIR_S3_AGG_PRE").unwrap().parse().unwrap();
    let last: usize = std::env::var("WEIR_S3_AGG_LAST").map_or(6, |l| l.parse().unwrap());
    agg_query(&chk, provider, std::path::Path::new(&out), pre, last);
    child_done(&Arc::default());
    true
}

/// Kills a child running the windowed aggregation on an S3 checkpoint at
/// `point` of batch 3, restarts it in another process, and checks the
/// output, batch for batch, is an uninterrupted run's, the killed batch's
/// included (run twice, the same both times, when the kill came after the
/// sink; the state partitions commit in their tasks, before it).
fn killed_agg_recovers_exactly(point: &str, provider: &str, name: &str) {
    if agg_child(provider) {
        return;
    }
    let reference = agg_reference(provider);
    let b = new_bucket();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let env = |pre: usize| -> Vec<(&'static str, String)> {
        vec![
            ("WEIR_S3_CHILD_PHASE", "run".into()),
            ("WEIR_S3_CHILD_CHK", format!("s3://{b}/agg")),
            ("WEIR_S3_AGG_OUT", out.display().to_string()),
            ("WEIR_S3_AGG_PRE", pre.to_string()),
            (
                "SPARK_LOCAL_DIRS",
                dir.path().join("local").display().to_string(),
            ),
        ]
    };
    let mut killed: Vec<(&str, String)> = aws_env();
    killed.extend(env(0));
    killed.push(("WEIR_FAILPOINT", format!("{point}:3")));
    crate::common::run_child_killed_at_failpoint(name, &killed);
    let s = open(&b, "agg");
    assert_eq!(s.list("commits").unwrap(), vec!["0", "1", "2"], "{point}");
    // The restart re-runs batch 3 with its logged offsets, then goes on.
    run_child(name, &env(4));
    let got = agg_outputs(&out);
    let before_sink = point == "between_state_partitions";
    for (batch, runs) in &got {
        let want = if *batch == 3 && !before_sink { 2 } else { 1 };
        assert_eq!(runs.len(), want, "{point}: batch {batch} ran {runs:?}");
        assert!(runs.iter().all(|r| *r == runs[0]), "{point}: {runs:?}");
    }
    let got: std::collections::BTreeMap<i64, Vec<String>> = got
        .into_iter()
        .map(|(b, mut r)| (b, r.pop().unwrap()))
        .collect();
    assert_eq!(got, reference, "{point} on {provider}");
    for p in ["0", "1"] {
        let names = s.child("state/0").unwrap().list(p).unwrap();
        let want: Vec<String> = (1..=6).map(|v| format!("{v}.delta")).collect();
        let mut deltas: Vec<String> = names
            .into_iter()
            .filter(|n| n.ends_with(".delta"))
            .collect();
        deltas.sort_by_key(|n| n.split('.').next().unwrap().parse::<u64>().unwrap());
        assert_eq!(deltas, want, "partition {p}");
    }
}

#[test]
fn a_windowed_aggregation_on_s3_killed_after_the_sink_recovers_exactly() {
    killed_agg_recovers_exactly(
        "after_sink",
        "memory",
        "s3::a_windowed_aggregation_on_s3_killed_after_the_sink_recovers_exactly",
    );
}

#[test]
fn a_windowed_aggregation_on_s3_killed_between_state_partitions_recovers_exactly() {
    killed_agg_recovers_exactly(
        "between_state_partitions",
        "memory",
        "s3::a_windowed_aggregation_on_s3_killed_between_state_partitions_recovers_exactly",
    );
}

#[test]
fn a_windowed_aggregation_on_s3_killed_after_the_state_commit_recovers_exactly() {
    killed_agg_recovers_exactly(
        "after_state_commit",
        "memory",
        "s3::a_windowed_aggregation_on_s3_killed_after_the_state_commit_recovers_exactly",
    );
}

#[cfg(feature = "rocksdb")]
#[test]
fn a_windowed_aggregation_on_s3_and_rocksdb_killed_after_the_sink_recovers_exactly() {
    killed_agg_recovers_exactly(
        "after_sink",
        "rocksdb",
        "s3::a_windowed_aggregation_on_s3_and_rocksdb_killed_after_the_sink_recovers_exactly",
    );
}

#[cfg(feature = "rocksdb")]
#[test]
fn a_windowed_aggregation_on_s3_and_rocksdb_killed_after_the_state_commit_recovers_exactly() {
    killed_agg_recovers_exactly(
        "after_state_commit",
        "rocksdb",
        "s3::a_windowed_aggregation_on_s3_and_rocksdb_killed_after_the_state_commit_recovers_exactly",
    );
}

/// The windowed aggregation stopped after batch 2 on one "machine" and
/// resumed on another: a new process with another local directory (for
/// RocksDB: no working copy), from the S3 checkpoint alone.
fn resumed_from_s3_alone(provider: &str, name: &str) {
    if agg_child(provider) {
        return;
    }
    let reference = agg_reference(provider);
    let b = new_bucket();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let env = |pre: usize, machine: &str| -> Vec<(&'static str, String)> {
        vec![
            ("WEIR_S3_CHILD_PHASE", "run".into()),
            ("WEIR_S3_CHILD_CHK", format!("s3://{b}/moved")),
            ("WEIR_S3_AGG_OUT", out.display().to_string()),
            ("WEIR_S3_AGG_PRE", pre.to_string()),
            (
                "SPARK_LOCAL_DIRS",
                dir.path().join(machine).display().to_string(),
            ),
        ]
    };
    // Machine A: batches 0..=2 (three chunks, then stopped).
    let mut first = env(0, "a");
    first.push(("WEIR_S3_AGG_LAST", "3".into()));
    run_child(name, &first);
    assert_eq!(
        open(&b, "moved").list("commits").unwrap(),
        vec!["0", "1", "2"]
    );
    assert_eq!(
        dir.path().join("a").join("weir-rocksdb").exists(),
        provider == "rocksdb"
    );
    // Its local directory is gone with the machine.
    let _ = std::fs::remove_dir_all(dir.path().join("a"));
    // Machine B: everything up to batch 2 is in the stream, as it was.
    run_child(name, &env(3, "b"));
    let got: std::collections::BTreeMap<i64, Vec<String>> = agg_outputs(&out)
        .into_iter()
        .map(|(b, runs)| {
            assert_eq!(runs.len(), 1, "batch {b} ran once: {runs:?}");
            (b, runs[0].clone())
        })
        .collect();
    assert_eq!(got, reference, "{provider}");
}

#[test]
fn a_windowed_aggregation_resumes_from_the_s3_checkpoint_alone() {
    resumed_from_s3_alone(
        "memory",
        "s3::a_windowed_aggregation_resumes_from_the_s3_checkpoint_alone",
    );
}

#[cfg(feature = "rocksdb")]
#[test]
fn a_windowed_aggregation_on_rocksdb_resumes_from_the_s3_checkpoint_alone() {
    resumed_from_s3_alone(
        "rocksdb",
        "s3::a_windowed_aggregation_on_rocksdb_resumes_from_the_s3_checkpoint_alone",
    );
}

/// Counts the S3 requests of each batch of a stateful query (a count per
/// value, update mode, 2 state partitions, 5 batches retained) in a child
/// process: the logs' two PUTs and one PUT per partition; a snapshot per
/// partition every 10th version; the old files removed every 10 versions
/// (the logs' beside the batches: `spark.sql.streaming.asyncLogPurge.enabled`).
fn state_requests_per_batch(provider: &str, name: &str) {
    if let Some((_, chk)) = child_phase() {
        let mut conf = weir::SessionConfig {
            fsync_checkpoint: false,
            shuffle_partitions: Some(2),
            min_batches_to_retain: 5,
            ..weir::SessionConfig::default()
        };
        conf.set("spark.sql.streaming.stateStore.providerClass", provider)
            .unwrap();
        let s = stream(&[&[0]]);
        let q = weir::Session::with_config(conf)
            .read_stream(s.clone())
            .group_by(vec![weir::functions::col("value")])
            .agg(vec![weir::functions::count_star("n")])
            .write_stream()
            .output_mode(weir::plan::OutputMode::Update)
            .foreach_batch(|_, _| Ok(()))
            .checkpoint_location(&chk)
            .start()
            .unwrap();
        q.process_all_available().unwrap();
        let mut per_batch = Vec::new();
        let mut from_batch_10 = object_requests();
        for v in 1..=14 {
            let before = object_requests();
            if v == 10 {
                from_batch_10 = before;
            }
            s.add_json(&[serde_json::json!({ "value": v })]).unwrap();
            q.process_all_available().unwrap();
            per_batch.push(object_requests().since(&before));
        }
        q.stop().unwrap();
        // The logs' purge asked for by batch 10 (the default
        // `asyncLogPurge`: on a thread of the query's own) ends by the stop.
        let since_batch_10 = object_requests().since(&from_batch_10);
        assert!(q.exception().is_none(), "{:?}", q.exception());
        let puts = |puts| Requests {
            puts,
            gets: 0,
            lists: 0,
            deletes: 0,
        };
        for (i, r) in per_batch.iter().enumerate() {
            let batch = i + 1;
            // State version 10: each partition's snapshot too.
            let want = if batch == 9 { 6 } else { 4 };
            assert_eq!(
                (r.puts, r.gets),
                (want, 0),
                "batch {batch} on {provider}: {per_batch:?}"
            );
            if batch < 10 {
                assert_eq!(*r, puts(want), "batch {batch} on {provider}: {per_batch:?}");
            }
        }
        // Version 15 = 5 retained past the snapshot of 10: batch 14's
        // partitions list their files and remove versions 1..=9 themselves.
        let last = per_batch[13];
        assert!(
            last.lists >= 2 && last.deletes >= 18,
            "batch 14 on {provider}: {per_batch:?}"
        );
        // And the logs drop entries 0..=4 (a listing and 5 deletes each)
        // beside batches 10 to 14, or by the stop: nothing else.
        assert_eq!(
            since_batch_10,
            Requests {
                lists: 2 + 2,
                deletes: 18 + 10,
                ..puts(5 * 4)
            },
            "batches 10-14 and the stop on {provider}: {per_batch:?}"
        );
        child_done(&Arc::default());
        return;
    }
    let b = new_bucket();
    let local = tempfile::tempdir().unwrap();
    run_child(
        name,
        &[
            ("WEIR_S3_CHILD_PHASE", "run".into()),
            ("WEIR_S3_CHILD_CHK", format!("s3://{b}/cost")),
            ("SPARK_LOCAL_DIRS", local.path().display().to_string()),
        ],
    );
    // What is left: the snapshot of 10 and the versions after it.
    let state = open(&b, "cost/state/0");
    for p in ["0", "1"] {
        let mut names = state.list(p).unwrap();
        names.sort_by_key(|n| n.split('.').next().unwrap().parse::<u64>().unwrap());
        let mut want: Vec<String> = (10..=15).map(|v| format!("{v}.delta")).collect();
        want.insert(1, "10.snapshot".into());
        assert_eq!(names, want, "partition {p}");
    }
}

#[test]
fn a_stateful_batch_on_s3_costs_one_put_per_state_partition() {
    state_requests_per_batch(
        "memory",
        "s3::a_stateful_batch_on_s3_costs_one_put_per_state_partition",
    );
}

#[cfg(feature = "rocksdb")]
#[test]
fn a_stateful_batch_on_s3_and_rocksdb_costs_one_put_per_state_partition() {
    state_requests_per_batch(
        "rocksdb",
        "s3::a_stateful_batch_on_s3_and_rocksdb_costs_one_put_per_state_partition",
    );
}

#[test]
fn a_run_behind_another_cannot_overwrite_its_state_on_s3() {
    use weir::state::{MemoryStateStore, StateStore};
    let b = new_bucket();
    let dir = open(&b, "chk/state/0/0");
    let mut a = MemoryStateStore::open_on(dir.clone(), 0, 100).unwrap();
    a.put(b"k".to_vec(), b"1".to_vec());
    a.commit(1).unwrap();
    a.put(b"k".to_vec(), b"2".to_vec());
    a.commit(2).unwrap();
    // A restart at version 1 runs batch 1 again: it replaces version 2 (a
    // leftover of a batch the commit log does not have).
    let mut rerun = MemoryStateStore::open_on(dir.clone(), 1, 100).unwrap();
    rerun.put(b"k".to_vec(), b"two".to_vec());
    rerun.commit(2).unwrap();
    assert_eq!(
        MemoryStateStore::open_on(dir.clone(), 2, 100)
            .unwrap()
            .get(b"k")
            .as_deref(),
        Some(&b"two"[..])
    );
    // Version 3 is written once: the run that comes second is refused.
    rerun.put(b"k".to_vec(), b"3".to_vec());
    rerun.commit(3).unwrap();
    a.put(b"k".to_vec(), b"three".to_vec());
    let err = a.commit(3).unwrap_err().to_string();
    assert!(
        err.contains("another run of this query wrote state version 3 first")
            && err.contains(&format!("s3://{b}/chk/state/0/0/3.delta")),
        "{err}"
    );
    assert_eq!(
        MemoryStateStore::open_on(dir, 3, 100)
            .unwrap()
            .get(b"k")
            .as_deref(),
        Some(&b"3"[..])
    );
}

#[cfg(feature = "rocksdb")]
#[test]
fn rocksdb_on_s3_keeps_a_local_working_copy_and_trusts_it_only_when_current() {
    use weir::state::rocksdb::local_dir_for;
    use weir::state::{RocksDbStateStore, StateStore};
    let b = new_bucket();
    let dir = open(&b, "chk/state/0/0");
    let local = local_dir_for(&dir);
    assert!(!local.exists());
    let mut s = RocksDbStateStore::open_on(&dir, 0, 100, false).unwrap();
    s.put(b"a".to_vec(), b"1".to_vec());
    s.commit(1).unwrap();
    s.put(b"b".to_vec(), b"2".to_vec());
    s.commit(2).unwrap();
    drop(s);
    // The deltas are objects; the instance is a local working copy.
    assert_eq!(dir.list("").unwrap(), vec!["1.delta", "2.delta"]);
    assert!(local.join("rocksdb").is_dir());
    let marker = std::fs::read_to_string(local.join("rocksdb.version")).unwrap();
    assert!(marker.starts_with("2 "), "{marker}");
    // Reopened at its version: the working copy is used as it is.
    let s = RocksDbStateStore::open_on(&dir, 2, 100, false).unwrap();
    assert_eq!(s.len(), 2);
    drop(s);
    // Another machine ran batch 1 again and wrote another version 2: the
    // working copy no longer holds the checkpoint's version 2.
    let mut other = weir::state::MemoryStateStore::open_on(dir.clone(), 1, 100).unwrap();
    other.put(b"c".to_vec(), b"3".to_vec());
    other.commit(2).unwrap();
    let s = RocksDbStateStore::open_on(&dir, 2, 100, false).unwrap();
    assert_eq!(s.get(b"b"), None);
    assert_eq!(s.get(b"c").as_deref(), Some(&b"3"[..]));
    assert_eq!(s.len(), 2);
    drop(s);
    // A new machine: no working copy at all; restored from S3 alone.
    std::fs::remove_dir_all(&local).unwrap();
    let s = RocksDbStateStore::open_on(&dir, 2, 100, false).unwrap();
    assert_eq!(s.get(b"a").as_deref(), Some(&b"1"[..]));
    assert_eq!(s.get(b"c").as_deref(), Some(&b"3"[..]));
    drop(s);
    std::fs::remove_dir_all(&local).unwrap();
}

/// The session's `spark.hadoop.fs.s3a.*` settings take a query's checkpoint
/// to S3 with no `AWS_*` variable in the process (a child without them);
/// an S3 setting the session does not know is refused, naming the known ones.
#[test]
fn session_s3_settings_reach_s3_without_the_aws_environment() {
    const AWS: [&str; 6] = [
        "AWS_ENDPOINT_URL",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_ALLOW_HTTP",
    ];
    if std::env::var("WEIR_S3_SESSION_CHILD").is_ok() {
        for k in AWS {
            assert!(std::env::var(k).is_err(), "{k} is set in the child");
        }
        let chk = std::env::var("WEIR_S3_CHILD_CHK").expect("the child's checkpoint");
        let mut conf = weir::SessionConfig {
            fsync_checkpoint: false,
            ..weir::SessionConfig::default()
        };
        for (k, v) in [
            ("spark.hadoop.fs.s3a.endpoint", endpoint().as_str()),
            ("spark.hadoop.fs.s3a.access.key", "test"),
            ("spark.hadoop.fs.s3a.secret.key", "test"),
            ("spark.hadoop.fs.s3a.endpoint.region", "us-east-1"),
            ("spark.hadoop.fs.s3a.connection.ssl.enabled", "false"),
        ] {
            conf.set(k, v).unwrap();
        }
        let got: Collected = Arc::default();
        let out = got.clone();
        let q = weir::Session::with_config(conf)
            .read_stream(stream(&[&[1, 2]]))
            .select(vec![("value * 10", "value")])
            .write_stream()
            .foreach_batch(move |id, batches| {
                out.lock().unwrap().push((id, values(batches)));
                Ok(())
            })
            .checkpoint_location(&chk)
            .start()
            .unwrap();
        q.process_all_available().unwrap();
        q.stop().unwrap();
        assert!(q.exception().is_none(), "{:?}", q.exception());
        assert_eq!(*got.lock().unwrap(), vec![(0, vec![10, 20])]);
        return;
    }
    let err = weir::SessionConfig::default()
        .set("spark.hadoop.fs.s3a.endpoint.url", "http://x")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("spark.hadoop.fs.s3a.endpoint.url")
            && err.contains("spark.hadoop.fs.s3a.endpoint,"),
        "{err}"
    );
    let bucket = new_bucket();
    let chk = format!("s3://{bucket}/q");
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "s3::session_s3_settings_reach_s3_without_the_aws_environment",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("WEIR_S3_SESSION_CHILD", "1")
    .env("WEIR_S3_CHILD_CHK", &chk);
    for k in AWS {
        cmd.env_remove(k);
    }
    run_to_success(&mut cmd, "the child with session S3 settings only");
    // The child's checkpoint is on S3: batch 0 is committed there.
    let st = open(&bucket, "q");
    assert!(st.get("commits/0").unwrap().is_some(), "no commits/0 on S3");
}

// --- The seed's page-views pipeline over files on S3 -------------------

/// The clicks' schema: a page and when it was viewed.
fn click_fields() -> Vec<Field> {
    vec![
        Field::new("page", DataType::String),
        Field::new("event_ts", DataType::Timestamp),
    ]
}

/// The click logs landing in `logs/incoming/`: file `i` holds minute `i`'s
/// clicks on three pages (and one late click of the minute before), as
/// JSON lines.
fn click_logs() -> Vec<(String, String)> {
    (0..6u32)
        .map(|i| {
            let mut lines: Vec<String> = (0..9u32)
                .map(|j| {
                    serde_json::json!({
                        "page": format!("/page/{}", (i + j) % 3),
                        "event_ts": format!("2024-01-01T12:{i:02}:{:02}Z", j * 6),
                    })
                    .to_string()
                })
                .collect();
            if i > 0 {
                lines.push(
                    serde_json::json!({
                        "page": "/page/0",
                        "event_ts": format!("2024-01-01T12:{:02}:59Z", i - 1),
                    })
                    .to_string(),
                );
            }
            (format!("clicks-{i:03}.json"), lines.join("\n"))
        })
        .collect()
}

/// Lands the click logs in `incoming` (the storage API: local or S3 alike).
fn land_click_logs(incoming: &Storage) {
    for (name, text) in click_logs() {
        incoming.put(&name, text.as_bytes()).unwrap();
    }
}

/// The pages dimension table (page -> section) as one Parquet object.
fn pages_parquet() -> Vec<u8> {
    let pages = ["/page/0", "/page/1", "/page/2"];
    let sections = ["home", "shop", "blog"];
    let batch = weir::row::batch_from_arrays(
        pages_fields(),
        vec![
            <String as weir::ArrowValue>::to_array(pages.iter().map(|p| p.to_string()).collect()),
            <String as weir::ArrowValue>::to_array(
                sections.iter().map(|p| p.to_string()).collect(),
            ),
        ],
    )
    .unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(Vec::new(), batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.into_inner().unwrap()
}

fn pages_fields() -> Vec<Field> {
    vec![
        Field::new("page", DataType::String),
        Field::new("section", DataType::String),
    ]
}

/// The seed's pipeline: page views per page, section and minute (1-minute
/// watermark, append mode), from JSON logs at `input` (one file a batch)
/// joined with the pages dimension table (Parquet, at `dim/pages/` beside
/// the input directory, written there first) to Parquet at `output` partitioned by
/// page, checkpointed at `chk`; runs until the input is processed, then
/// stops.
fn page_views(conf: weir::SessionConfig, input: &str, output: &str, chk: &str) {
    use weir::functions::{col, count_star, window};
    use weir::sink::{FileFormat, FileSink};
    use weir::source::FileSource;
    // Beside the input: <input's parent>/dim/pages.
    let dims = match input.trim_end_matches('/').rsplit_once('/') {
        Some((parent, _)) => format!("{parent}/dim/pages"),
        None => panic!("an input location with a parent: {input}"),
    };
    Storage::open(&dims, &conf.s3, false)
        .unwrap()
        .put("pages.parquet", &pages_parquet())
        .unwrap();
    let pages = weir::StaticTable::files(dims.as_str(), FileFormat::Parquet, pages_fields());
    let q = weir::Session::with_config(conf)
        .read_stream(
            FileSource::new(input, FileFormat::Json, click_fields()).max_files_per_trigger(1),
        )
        .with_watermark("event_ts", "1 minute")
        .join_static("pages", pages, ["page"], weir::plan::JoinType::LeftOuter)
        .group_by(vec![
            window("event_ts", "1 minute"),
            col("page"),
            col("section"),
        ])
        .agg(vec![count_star("views")])
        .write_stream()
        .output_mode(weir::plan::OutputMode::Append)
        .sink(FileSink::new(output, FileFormat::Parquet).partition_by(vec!["page".into()]))
        .checkpoint_location(chk)
        .start()
        .unwrap();
    q.process_all_available().unwrap();
    q.stop().unwrap();
    assert!(q.exception().is_none(), "{:?}", q.exception());
}

/// A session on the test server through its own settings (not the
/// environment), files not fsync'd.
fn s3_conf() -> weir::SessionConfig {
    weir::SessionConfig {
        fsync_checkpoint: false,
        s3: settings(),
        ..weir::SessionConfig::default()
    }
}

/// What a file sink committed under `out`, read through its manifest only:
/// each row as JSON (the page from its partition directory), sorted; and
/// the committed objects' names.
fn committed_rows(out: &Storage) -> (Vec<String>, Vec<String>) {
    let names = weir::sink::file::committed_objects(out).unwrap();
    let mut rows = Vec::new();
    for name in &names {
        let bytes = out
            .get(name)
            .unwrap()
            .unwrap_or_else(|| panic!("{name} is in the manifest but missing"));
        let tmp = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(tmp.path(), bytes).unwrap();
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
            std::fs::File::open(tmp.path()).unwrap(),
        )
        .unwrap()
        .build()
        .unwrap();
        let batches: Vec<_> = reader.map(|b| b.unwrap()).collect();
        let (dir, _) = name.split_once('/').expect("a partition directory");
        let (col, page) = weir::sink::file::parse_partition_dir(dir).unwrap();
        assert_eq!(col, "page");
        for mut row in crate::common::rows_json(&batches) {
            row["page"] = serde_json::json!(page.clone().unwrap().unwrap());
            rows.push(row.to_string());
        }
    }
    rows.sort();
    (rows, names)
}

/// The sink's output at `location` read back by weir's file source (an
/// available-now query): `(page, views)` pairs, sorted.
fn read_back_with_the_file_source(location: &str) -> Vec<String> {
    use weir::source::{FileFormat, FileSource};
    let dir = tempfile::tempdir().unwrap();
    let got: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = got.clone();
    let q = weir::Session::with_config(s3_conf())
        .read_stream(FileSource::new(
            location,
            FileFormat::Parquet,
            vec![
                Field::new("page", DataType::String),
                Field::new("views", DataType::Int64),
            ],
        ))
        .write_stream()
        .foreach_batch(move |_, batches| {
            let rows = crate::common::rows_json(batches);
            sink.lock()
                .unwrap()
                .extend(rows.iter().map(|r| r.to_string()));
            Ok(())
        })
        .checkpoint_location(dir.path().join("chk").to_str().unwrap())
        .trigger(weir::Trigger::AvailableNow)
        .start()
        .unwrap();
    q.await_termination(None).unwrap();
    assert!(q.exception().is_none(), "{:?}", q.exception());
    let mut got = got.lock().unwrap().clone();
    got.sort();
    got
}

/// `(page, views)` of full output rows, as the file source reads them.
fn page_and_views(rows: &[String]) -> Vec<String> {
    let mut out: Vec<String> = rows
        .iter()
        .map(|r| {
            let v: serde_json::Value = serde_json::from_str(r).unwrap();
            serde_json::json!({"page": v["page"], "views": v["views"]}).to_string()
        })
        .collect();
    out.sort();
    out
}

/// The pipeline on local disk: the reference output rows.
fn page_views_on_local_disk() -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let incoming = dir.path().join("logs/incoming");
    land_click_logs(&Storage::local(&incoming, false));
    let out = dir.path().join("out");
    page_views(
        s3_conf(),
        incoming.to_str().unwrap(),
        out.to_str().unwrap(),
        dir.path().join("chk").to_str().unwrap(),
    );
    let (rows, _) = committed_rows(&Storage::local(&out, false));
    assert!(rows.len() >= 9, "windows closed and were written: {rows:?}");
    assert!(
        rows.iter().any(|r| r.contains(r#""views":4"#)),
        "a late click counted in its window: {rows:?}"
    );
    assert!(
        rows.iter().all(|r| ["home", "shop", "blog"]
            .iter()
            .any(|s| r.contains(&format!(r#""section":"{s}""#)))),
        "every view joined its page's section: {rows:?}"
    );
    rows
}

#[test]
fn the_page_views_pipeline_on_s3_writes_what_it_writes_on_local_disk() {
    let reference = page_views_on_local_disk();
    let b = new_bucket();
    land_click_logs(&open(&b, "logs/incoming"));
    page_views(
        s3_conf(),
        &format!("s3://{b}/logs/incoming/"),
        &format!("s3://{b}/out"),
        &format!("s3://{b}/chk/page_views"),
    );
    let (rows, names) = committed_rows(&open(&b, "out"));
    assert_eq!(rows, reference);
    assert!(
        names.iter().all(|n| n.starts_with("page=%2Fpage%2F")),
        "{names:?}"
    );
    // Everything is on S3: the sink's manifest and marker, the source's
    // seen-files log and the query's logs under the checkpoint.
    let manifest = open(&b, "out/_spark_metadata").list("").unwrap();
    assert!(manifest.contains(&".weir-sink".to_string()), "{manifest:?}");
    let chk = open(&b, "chk/page_views");
    let logged = chk.list("sources/0").unwrap();
    assert_eq!(
        logged,
        vec!["0", "1", "2", "3", "4", "5"],
        "one entry a file"
    );
    assert!(!chk.list("commits").unwrap().is_empty());
    // weir's file source reads the output through the manifest.
    assert_eq!(
        read_back_with_the_file_source(&format!("s3://{b}/out")),
        page_and_views(&reference)
    );
}

/// The batch of the first data object a run on local disk committed (the
/// first batch that writes output).
fn first_batch_with_output() -> i64 {
    let dir = tempfile::tempdir().unwrap();
    let incoming = dir.path().join("in");
    land_click_logs(&Storage::local(&incoming, false));
    let out = dir.path().join("out");
    page_views(
        s3_conf(),
        incoming.to_str().unwrap(),
        out.to_str().unwrap(),
        dir.path().join("chk").to_str().unwrap(),
    );
    let (_, names) = committed_rows(&Storage::local(&out, false));
    names
        .iter()
        .map(|n| batch_of(n))
        .min()
        .expect("some output")
}

/// The batch id in a data object's name (`.../part-00003-<uuid>.parquet`).
fn batch_of(name: &str) -> i64 {
    let file = name.rsplit('/').next().unwrap();
    file.strip_prefix("part-").unwrap()[..5].parse().unwrap()
}

/// Kills a child running the page-views pipeline on S3 at `point` of the
/// first batch with output, restarts it in another process, and checks the
/// output through the manifest is an uninterrupted run's. Killed after a
/// data object: the object is an orphan no manifest entry lists and no
/// reader sees. Killed after the manifest entry: the re-run batch writes
/// nothing new.
fn killed_page_views_recovers_exactly(point: &str, name: &str) {
    if let Some((_, chk)) = child_phase() {
        // The child reaches S3 through the AWS_* environment, as a
        // user's process would.
        let b = std::env::var("WEIR_S3_PV_BUCKET").unwrap();
        let conf = weir::SessionConfig {
            fsync_checkpoint: false,
            ..weir::SessionConfig::default()
        };
        page_views(
            conf,
            &format!("s3://{b}/logs/incoming"),
            &format!("s3://{b}/out"),
            &chk,
        );
        child_done(&Arc::default());
        return;
    }
    let reference = page_views_on_local_disk();
    let batch = first_batch_with_output();
    let b = new_bucket();
    land_click_logs(&open(&b, "logs/incoming"));
    let env = vec![
        ("WEIR_S3_CHILD_PHASE", "run".to_string()),
        ("WEIR_S3_CHILD_CHK", format!("s3://{b}/chk/page_views")),
        ("WEIR_S3_PV_BUCKET", b.clone()),
    ];
    let mut killed = aws_env();
    killed.extend(env.clone());
    killed.push(("WEIR_FAILPOINT", format!("{point}:{batch}")));
    crate::common::run_child_killed_at_failpoint(name, &killed);
    let out = open(&b, "out");
    let entry = format!("_spark_metadata/{batch}");
    let logged_before = out.get(&entry).unwrap();
    let data_objects = || {
        assert_eq!(out.list("").unwrap(), Vec::<String>::new(), "all in pages");
        let mut on_s3 = Vec::new();
        for p in 0..3 {
            let (dir, _) =
                weir::sink::file::partition_dir_name("page", Some(&format!("/page/{p}")));
            for name in out.list(&dir).unwrap() {
                on_s3.push(format!("{dir}/{name}"));
            }
        }
        on_s3.sort();
        on_s3
    };
    let killed_batch_objects = data_objects();
    run_child(name, &env);
    let (rows, committed) = committed_rows(&out);
    assert_eq!(
        rows, reference,
        "{point}: through the manifest, an uninterrupted run's rows"
    );
    let on_s3 = data_objects();
    assert!(committed.iter().all(|n| on_s3.contains(n)), "{committed:?}");
    let orphans: Vec<&String> = on_s3.iter().filter(|n| !committed.contains(n)).collect();
    if point == "file_sink_after_data" {
        // Killed after its first data object, before the manifest entry.
        assert_eq!(logged_before, None, "batch {batch}");
        assert!(
            !orphans.is_empty(),
            "the killed run left a data object: {on_s3:?}"
        );
        assert!(
            orphans.iter().all(|n| batch_of(n) == batch),
            "only the killed batch's: {orphans:?}"
        );
    } else {
        // The entry was there: the re-run batch wrote nothing new, and the
        // entry is the killed run's, unchanged.
        assert!(logged_before.is_some(), "batch {batch}");
        assert_eq!(out.get(&entry).unwrap(), logged_before);
        assert!(orphans.is_empty(), "{orphans:?}");
        let of_batch = |names: &[String]| -> Vec<String> {
            names
                .iter()
                .filter(|n| batch_of(n) == batch)
                .cloned()
                .collect()
        };
        assert_eq!(of_batch(&on_s3), of_batch(&killed_batch_objects));
    }
    assert!(out.get(&entry).unwrap().is_some());
    // A reader through the manifest never sees an orphan.
    assert_eq!(
        read_back_with_the_file_source(&format!("s3://{b}/out")),
        page_and_views(&reference)
    );
}

#[test]
fn the_page_views_pipeline_on_s3_killed_after_a_data_object_recovers_exactly() {
    killed_page_views_recovers_exactly(
        "file_sink_after_data",
        "s3::the_page_views_pipeline_on_s3_killed_after_a_data_object_recovers_exactly",
    );
}

#[test]
fn the_page_views_pipeline_on_s3_killed_after_the_manifest_recovers_exactly() {
    killed_page_views_recovers_exactly(
        "file_sink_after_manifest",
        "s3::the_page_views_pipeline_on_s3_killed_after_the_manifest_recovers_exactly",
    );
}

/// The file source on `s3://<b>/in` with its log at `chk/sources/0`.
fn s3_file_source(b: &str, latest_first: bool) -> weir::source::FileSource {
    use weir::source::{FileFormat, FileSource, Source, SourceContext, SourceStorage};
    let mut s = FileSource::new(
        format!("s3://{b}/in/"),
        FileFormat::Json,
        crate::common::fields(),
    )
    .max_files_per_trigger(1)
    .latest_first(latest_first)
    .log_compact_interval(2);
    let log = if latest_first {
        "chk/latest"
    } else {
        "chk/sources/0"
    };
    s.open_on(
        &SourceContext {
            metadata_dir: std::path::PathBuf::from("unused"),
            sync: false,
            default_parallelism: 1,
        },
        &SourceStorage {
            metadata: open(b, log),
            s3: settings(),
        },
    )
    .unwrap();
    s
}

/// The `key` column of a source's batches.
fn source_keys(batches: &[weir::arrow::record_batch::RecordBatch]) -> Vec<String> {
    crate::common::rows_json(batches)
        .iter()
        .map(|r| r["key"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_file_source_on_an_s3_prefix_takes_each_object_once_in_order() {
    use weir::source::{Offset, Source};
    let b = new_bucket();
    let input = open(&b, "in");
    let click = |key: &str| format!(r#"{{"ts":"2024-01-01T12:00:00Z","key":"{key}","value":1}}"#);
    input.put("a.json", click("a").as_bytes()).unwrap();
    // S3 keeps modification times to the second.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    input.put("b.json", click("b").as_bytes()).unwrap();
    // Hidden names are not read.
    input.put("_SUCCESS", b"").unwrap();
    input.put(".c.json", click("hidden").as_bytes()).unwrap();
    let mut s = s3_file_source(&b, false);
    let o0 = s.latest_offset(None).unwrap().unwrap();
    assert_eq!(source_keys(&s.get_batch(None, &o0).unwrap()), ["a"]);
    let o1 = s.latest_offset(Some(&o0)).unwrap().unwrap();
    assert_eq!(source_keys(&s.get_batch(Some(&o0), &o1).unwrap()), ["b"]);
    assert_eq!(s.latest_offset(Some(&o1)).unwrap(), Some(o1.clone()));
    // The seen-files log is on S3, compacted (every 2nd entry here).
    assert_eq!(open(&b, "chk/sources/0").list("").unwrap(), ["1.compact"]);
    // A restart on another "machine" skips both, re-reads a logged entry,
    // and takes a new object.
    let mut s2 = s3_file_source(&b, false);
    assert_eq!(s2.latest_offset(Some(&o1)).unwrap(), Some(o1.clone()));
    assert_eq!(
        source_keys(&s2.get_batch(None, &Offset::from(0)).unwrap()),
        ["a"]
    );
    input.put("e.json", click("e").as_bytes()).unwrap();
    let o2 = s2.latest_offset(Some(&o1)).unwrap().unwrap();
    assert_eq!(source_keys(&s2.get_batch(Some(&o1), &o2).unwrap()), ["e"]);
    assert_eq!(
        open(&b, "chk/sources/0").list("").unwrap(),
        ["1.compact", "2"]
    );
    // latestFirst takes the newest object first (of two written in the
    // same second, the greater name).
    let mut newest = s3_file_source(&b, true);
    let n0 = newest.latest_offset(None).unwrap().unwrap();
    let first = source_keys(&newest.get_batch(None, &n0).unwrap());
    assert_eq!(first, ["e"]);
    // Objects below the prefix's own are read too (Spark's file index lists
    // every leaf file); those of a hidden directory are not.
    input
        .put("_tmp/g.json", click("hidden").as_bytes())
        .unwrap();
    input.put("sub/d.json", click("nested").as_bytes()).unwrap();
    let o3 = s2.latest_offset(Some(&o2)).unwrap().unwrap();
    assert_eq!(
        source_keys(&s2.get_batch(Some(&o2), &o3).unwrap()),
        ["nested"]
    );
    assert_eq!(s2.latest_offset(Some(&o3)).unwrap(), Some(o3.clone()));
}

#[test]
fn a_file_sink_batch_on_s3_costs_one_put_per_object_and_one_for_its_manifest() {
    const NAME: &str =
        "s3::a_file_sink_batch_on_s3_costs_one_put_per_object_and_one_for_its_manifest";
    if let Some((_, out)) = child_phase() {
        use weir::sink::{FileFormat, FileSink};
        // A local checkpoint: only the sink talks to S3.
        let chk = tempfile::tempdir().unwrap();
        let s = MemoryStream::new(&crate::common::fields());
        let row = |k: &str| serde_json::json!({"ts": "2024-01-01T12:00:00Z", "key": k, "value": 1});
        s.add_json(&[row("a")]).unwrap();
        let q = crate::common::session()
            .read_stream(s.clone())
            .write_stream()
            .sink(FileSink::new(&out, FileFormat::Json).partition_by(vec!["key".into()]))
            .checkpoint_location(chk.path().to_str().unwrap())
            .start()
            .unwrap();
        q.process_all_available().unwrap();
        let before = object_requests();
        // Two batches: one key, then two keys.
        s.add_json(&[row("b")]).unwrap();
        q.process_all_available().unwrap();
        s.add_json(&[row("c"), row("d")]).unwrap();
        q.process_all_available().unwrap();
        let used = object_requests().since(&before);
        q.stop().unwrap();
        assert!(q.exception().is_none(), "{:?}", q.exception());
        assert_eq!(
            used,
            Requests {
                puts: 1 + 1 + 2 + 1,
                gets: 0,
                lists: 0,
                deletes: 0
            },
            "objects, then the manifest entry, per batch; nothing read"
        );
        child_done(&Arc::default());
        return;
    }
    let b = new_bucket();
    run_child(
        NAME,
        &[
            ("WEIR_S3_CHILD_PHASE", "run".into()),
            ("WEIR_S3_CHILD_CHK", format!("s3://{b}/out")),
        ],
    );
    let out = open(&b, "out");
    let committed = weir::sink::file::committed_objects(&out).unwrap();
    let dirs: Vec<&str> = committed
        .iter()
        .map(|n| n.split_once('/').unwrap().0)
        .collect();
    assert_eq!(dirs, ["key=a", "key=b", "key=c", "key=d"]);
    assert_eq!(
        open(&b, "out/_spark_metadata").list("").unwrap(),
        [".weir-sink", "0", "1", "2"]
    );
}

#[test]
fn a_spark_written_manifest_on_s3_is_read_through_its_s3a_uris() {
    let b = new_bucket();
    let out = open(&b, "spark/out");
    out.put("k=a%2Fb/part-0.json", b"{}").unwrap();
    out.put("part-1.json", b"{}").unwrap();
    out.put("orphan.json", b"{}").unwrap();
    // Spark writes percent-encoded s3a:// URIs, and compacts.
    let meta = out.child("_spark_metadata").unwrap();
    meta.put(
        "0",
        format!(
            "v1\n{{\"path\":\"s3a://{b}/spark/out/k=a%252Fb/part-0.json\",\"action\":\"add\"}}"
        )
        .as_bytes(),
    )
    .unwrap();
    meta.put(
        "1",
        format!("v1\n{{\"path\":\"s3://{b}/spark/out/part-1.json\",\"action\":\"add\"}}")
            .as_bytes(),
    )
    .unwrap();
    assert_eq!(
        weir::sink::file::committed_objects(&out).unwrap(),
        ["k=a%2Fb/part-0.json", "part-1.json"]
    );
    // A `delete` action removes an entry.
    meta.put("2", b"v1\n{\"path\":\"part-1.json\",\"action\":\"delete\"}")
        .unwrap();
    assert_eq!(
        weir::sink::file::committed_objects(&out).unwrap(),
        ["k=a%2Fb/part-0.json"]
    );
    // An entry outside the sink's directory is refused, naming it.
    meta.put(
        "3",
        format!("v1\n{{\"path\":\"s3a://{b}/elsewhere/x.json\",\"action\":\"add\"}}").as_bytes(),
    )
    .unwrap();
    let err = weir::sink::file::committed_objects(&out)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("elsewhere/x.json") && err.contains("not below"),
        "{err}"
    );
}
