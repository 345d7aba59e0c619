//! The crash-injection matrix (issue 10): a fixed workload runs in a child
//! process that is killed with SIGKILL at a chosen step of a chosen batch
//! (`WEIR_FAILPOINT`, see `weir::failpoint`), restarted (sometimes killed
//! again during the replay), and run to the end; its sink's final contents
//! must equal those of an uninterrupted run on a fresh backend.
//!
//! The workload: 12 JSON files read one per batch, a 10-minute watermark, a
//! 10-minute windowed count and sum per key over 2 state partitions (so
//! output, late rows and no-data batches all happen), old batches purged
//! every 10 (`minBatchesToRetain` 2), every checkpoint file fsync'd. The
//! sinks: the file sink (append; rows read through its manifest), Kafka
//! (append and update, read `read_committed`), PostgreSQL (append and update,
//! the table) and Redis (update, the hashes).
//!
//! CI runs a seeded sample (`WEIR_CRASH_RUNS`, default 20; `WEIR_CRASH_SEED`);
//! `bash scripts/crash_matrix.sh` runs every combination
//! (`WEIR_CRASH_RUNS=all`) and prints the tally.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};

use weir::functions::{col, count_star, sum, window};
use weir::plan::OutputMode;
use weir::sink::{BoxSink, FileFormat, FileSink};
use weir::source::FileSource;
use weir::{Session, SessionConfig};

const TEST: &str = "crash_matrix::kill_at_every_step_matches_an_uninterrupted_run";
const FILES: usize = 12;
/// Batches the matrix aims at (the workload runs about this many, with its
/// no-data batches; a point never reached leaves the run uninterrupted).
const BATCHES: i64 = 13;

/// One sink and output mode of the matrix.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Pair {
    FileAppend,
    #[cfg(feature = "kafka")]
    KafkaAppend,
    #[cfg(feature = "kafka")]
    KafkaUpdate,
    #[cfg(feature = "postgres")]
    PostgresAppend,
    #[cfg(feature = "postgres")]
    PostgresUpdate,
    #[cfg(feature = "redis")]
    RedisUpdate,
}

impl Pair {
    fn all() -> Vec<Pair> {
        vec![
            Pair::FileAppend,
            #[cfg(feature = "kafka")]
            Pair::KafkaAppend,
            #[cfg(feature = "kafka")]
            Pair::KafkaUpdate,
            #[cfg(feature = "postgres")]
            Pair::PostgresAppend,
            #[cfg(feature = "postgres")]
            Pair::PostgresUpdate,
            #[cfg(feature = "redis")]
            Pair::RedisUpdate,
        ]
    }

    fn name(self) -> String {
        format!("{self:?}")
    }

    fn from_name(s: &str) -> Pair {
        Pair::all()
            .into_iter()
            .find(|p| p.name() == s)
            .unwrap_or_else(|| panic!("unknown pair {s}"))
    }

    fn mode(self) -> OutputMode {
        match self {
            Pair::FileAppend => OutputMode::Append,
            #[cfg(feature = "kafka")]
            Pair::KafkaAppend => OutputMode::Append,
            #[cfg(feature = "kafka")]
            Pair::KafkaUpdate => OutputMode::Update,
            #[cfg(feature = "postgres")]
            Pair::PostgresAppend => OutputMode::Append,
            #[cfg(feature = "postgres")]
            Pair::PostgresUpdate => OutputMode::Update,
            #[cfg(feature = "redis")]
            Pair::RedisUpdate => OutputMode::Update,
        }
    }

    /// The failpoints a batch of this pair passes (the engine's and its sink's).
    fn points(self) -> Vec<&'static str> {
        let mut p = vec![
            "after_source_log",
            "before_rename",
            "after_offsets",
            "after_read",
            "after_sink",
            "between_state_partitions",
            "after_state_commit",
            "after_commit_log",
            "during_cleanup",
        ];
        p.extend_from_slice(match self {
            Pair::FileAppend => &["file_sink_after_data", "file_sink_after_manifest"][..],
            #[cfg(feature = "kafka")]
            Pair::KafkaAppend | Pair::KafkaUpdate => &["kafka_after_send", "kafka_after_commit"],
            #[cfg(feature = "postgres")]
            Pair::PostgresAppend | Pair::PostgresUpdate => &["postgres_before_commit"],
            #[cfg(feature = "redis")]
            Pair::RedisUpdate => &["redis_before_script", "redis_after_script"],
        });
        p
    }

    /// A backend target no other run uses.
    fn fresh_target(self, dir: &Path) -> String {
        let tag = format!(
            "weir_crash_{}_{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        );
        match self {
            Pair::FileAppend => dir.join("out").to_str().unwrap().to_string(),
            #[cfg(feature = "kafka")]
            Pair::KafkaAppend | Pair::KafkaUpdate => {
                let t = tag.replace('_', "-");
                kafka::admin().create_topic(&t, 2).unwrap();
                t
            }
            #[allow(unreachable_patterns)]
            _ => tag,
        }
    }

    fn sink(self, target: &str) -> BoxSink {
        match self {
            Pair::FileAppend => FileSink::new(target, FileFormat::Json).into(),
            #[cfg(feature = "kafka")]
            Pair::KafkaAppend | Pair::KafkaUpdate => {
                weir::sink::KafkaSink::new(&kafka::bootstrap())
                    .topic(target)
                    .json_values()
                    .key_columns(&["key"])
                    .into()
            }
            #[cfg(feature = "postgres")]
            Pair::PostgresAppend => weir::sink::PostgresSink::new(postgres::url(), target)
                .create_table(true)
                .into(),
            #[cfg(feature = "postgres")]
            Pair::PostgresUpdate => weir::sink::PostgresSink::new(postgres::url(), target)
                .key_columns(vec!["window", "key"])
                .create_table(true)
                .into(),
            #[cfg(feature = "redis")]
            Pair::RedisUpdate => weir::sink::RedisSink::new(redis::url())
                .key_prefix(target)
                .key_columns(vec!["window", "key"])
                .into(),
        }
    }

    /// The sink's final contents, as sorted canonical JSON rows.
    fn read(self, target: &str) -> Vec<String> {
        let mut rows = match self {
            Pair::FileAppend => file_rows(Path::new(target)),
            #[cfg(feature = "kafka")]
            Pair::KafkaAppend | Pair::KafkaUpdate => kafka::committed_values(target),
            #[cfg(feature = "postgres")]
            Pair::PostgresAppend | Pair::PostgresUpdate => postgres::rows(target),
            #[cfg(feature = "redis")]
            Pair::RedisUpdate => redis::rows(target),
        };
        rows.sort();
        rows
    }
}

/// File `i` of the workload: three events five minutes on from the last
/// file's, and every fourth file a row that arrives late.
fn file_text(i: usize) -> String {
    let base = 1_704_110_400i64 + i as i64 * 300; // 2024-01-01T12:00:00Z + 5 min per file
    let mut lines = Vec::new();
    for j in 0..3i64 {
        let ts = base + j * 60;
        let key = ["a", "b", "c"][(i + j as usize) % 3];
        lines.push(serde_json::json!({
            "ts": crate::common::iso(ts * 1_000_000),
            "key": key,
            "value": i as i64 * 10 + j,
        }));
    }
    if i % 4 == 3 {
        let ts = base - 40 * 60; // 40 minutes behind: behind the watermark
        lines.push(serde_json::json!({"ts": crate::common::iso(ts * 1_000_000), "key": "late", "value": 1000}));
    }
    lines
        .iter()
        .map(|l| l.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

fn write_inputs(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..FILES {
        std::fs::write(dir.join(format!("f{i:02}.json")), file_text(i)).unwrap();
    }
}

fn session() -> Session {
    let mut conf = SessionConfig {
        fsync_checkpoint: true,
        ..SessionConfig::default()
    };
    conf.set("spark.sql.shuffle.partitions", "2").unwrap();
    conf.set("spark.sql.streaming.minBatchesToRetain", "2")
        .unwrap();
    Session::with_config(conf)
}

/// The child side: runs the workload to its end (or to its failpoint).
fn child(dir: &Path, pair: Pair, target: &str) {
    let q = session()
        .read_stream(
            FileSource::new(dir.join("in"), FileFormat::Json, crate::common::fields())
                .max_files_per_trigger(1),
        )
        .with_watermark("ts", "10 minutes")
        .group_by(vec![window("ts", "10 minutes"), col("key")])
        .agg(vec![count_star("n"), sum("value", "total")])
        .write_stream()
        .output_mode(pair.mode())
        .checkpoint_location(dir.join("chk").to_str().unwrap())
        .sink(pair.sink(target))
        .start()
        .unwrap_or_else(|e| panic!("start: {e}"));
    // The default trigger: each batch plans its own file (and logs it in
    // the source's own log) as a long-running query does.
    if let Err(e) = q.process_all_available() {
        panic!("the query failed: {e}");
    }
    q.stop().unwrap();
    if let Some(e) = q.exception() {
        panic!("the query failed: {e}");
    }
}

/// How a child process ended.
#[derive(Debug, PartialEq)]
enum End {
    Finished,
    Killed,
}

fn run_child(dir: &Path, pair: Pair, target: &str, failpoint: Option<&str>) -> End {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env("WEIR_CRASH_CHILD", dir)
        .env("WEIR_CRASH_PAIR", pair.name())
        .env("WEIR_CRASH_TARGET", target)
        .env_remove("WEIR_FAILPOINT")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(f) = failpoint {
        cmd.env("WEIR_FAILPOINT", f);
    }
    let out = cmd.output().unwrap();
    if out.status.signal() == Some(9) {
        return End::Killed;
    }
    assert!(
        out.status.success(),
        "{pair:?} child ({failpoint:?}) failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    End::Finished
}

/// One cell of the matrix.
#[derive(Clone, Debug)]
struct Run {
    pair: Pair,
    point: &'static str,
    batch: i64,
    nth: u32,
    kill_replay: bool,
}

fn all_runs() -> Vec<Run> {
    let mut runs = Vec::new();
    for pair in Pair::all() {
        for point in pair.points() {
            for batch in 0..BATCHES {
                // Old batches are purged every 10th batch (checkpoint/purge.rs).
                if point == "during_cleanup" && batch % 10 != 0 {
                    continue;
                }
                // A checkpoint file's rename happens several times a batch
                // (offsets, state deltas, commit): aim at the 1st and the 3rd.
                let nths: &[u32] = if point == "before_rename" {
                    &[1, 3]
                } else {
                    &[1]
                };
                for &nth in nths {
                    runs.push(Run {
                        pair,
                        point,
                        batch,
                        nth,
                        kill_replay: (batch + nth as i64) % 3 == 0,
                    });
                }
            }
        }
    }
    runs
}

/// A fixed sample for a seed: runs are grouped by (pair, point) and
/// shuffled (splitmix64 keys) within each group; the groups are ordered by
/// their shuffled rank within their pair, so the sample takes one run of a
/// point of every pair before a second point of any, and one run of every
/// group before a second run of any.
fn sample(runs: Vec<Run>, seed: u64, n: usize) -> Vec<Run> {
    let mix = |mut z: u64| {
        z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut groups: BTreeMap<(String, &str), Vec<(u64, Run)>> = BTreeMap::new();
    for (i, r) in runs.into_iter().enumerate() {
        groups
            .entry((r.pair.name(), r.point))
            .or_default()
            .push((mix(seed ^ mix(i as u64)), r));
    }
    // Per pair, its groups in shuffled order (keyed by their first run's key).
    let mut by_pair: BTreeMap<String, Vec<(u64, Vec<Run>)>> = BTreeMap::new();
    for ((pair, _), mut g) in groups {
        g.sort_by_key(|(k, _)| *k);
        let key = g[0].0;
        by_pair
            .entry(pair)
            .or_default()
            .push((key, g.into_iter().map(|(_, r)| r).collect()));
    }
    let mut ordered: Vec<(usize, u64, Vec<Run>)> = Vec::new();
    for (_, mut gs) in by_pair {
        gs.sort_by_key(|(k, _)| *k);
        for (rank, (k, g)) in gs.into_iter().enumerate() {
            ordered.push((rank, k, g));
        }
    }
    ordered.sort_by_key(|(rank, k, _)| (*rank, *k));
    let deepest = ordered.iter().map(|(_, _, g)| g.len()).max().unwrap_or(0);
    (0..deepest)
        .flat_map(|i| {
            ordered
                .iter()
                .filter_map(move |(_, _, g)| g.get(i).cloned())
        })
        .take(n)
        .collect()
}

#[test]
fn kill_at_every_step_matches_an_uninterrupted_run() {
    if let Ok(dir) = std::env::var("WEIR_CRASH_CHILD") {
        let pair = Pair::from_name(&std::env::var("WEIR_CRASH_PAIR").unwrap());
        child(
            Path::new(&dir),
            pair,
            &std::env::var("WEIR_CRASH_TARGET").unwrap(),
        );
        return;
    }
    let seed: u64 = std::env::var("WEIR_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20261201);
    let all = all_runs();
    let full = std::env::var("WEIR_CRASH_RUNS").ok().as_deref() == Some("all");
    let runs = match std::env::var("WEIR_CRASH_RUNS").ok().as_deref() {
        Some("all") => all,
        Some(n) => sample(
            all,
            seed,
            n.parse().expect("WEIR_CRASH_RUNS: a number or `all`"),
        ),
        None => sample(all, seed, 20),
    };
    // The uninterrupted run of each pair, on its own fresh backend.
    let mut reference: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for pair in Pair::all() {
        if !runs.iter().any(|r| r.pair == pair) {
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        write_inputs(&dir.path().join("in"));
        let target = pair.fresh_target(dir.path());
        assert_eq!(run_child(dir.path(), pair, &target, None), End::Finished);
        let rows = pair.read(&target);
        assert!(!rows.is_empty(), "{pair:?}: the workload wrote nothing");
        reference.insert(pair.name(), rows);
    }
    let (mut killed, mut replay_killed, mut mismatched) = (0, 0, Vec::new());
    // point -> (runs, runs killed there)
    let mut by_point: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for (k, run) in runs.iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        write_inputs(&dir.path().join("in"));
        let target = run.pair.fresh_target(dir.path());
        let fp = format!("{}:{}:{}", run.point, run.batch, run.nth);
        let first = run_child(dir.path(), run.pair, &target, Some(&fp));
        let mut replay = End::Finished;
        let tally = by_point.entry(run.point).or_default();
        tally.0 += 1;
        if first == End::Killed {
            killed += 1;
            tally.1 += 1;
            if run.kill_replay {
                replay = run_child(dir.path(), run.pair, &target, Some(&fp));
                if replay == End::Killed {
                    replay_killed += 1;
                }
            }
        }
        assert_eq!(
            run_child(dir.path(), run.pair, &target, None),
            End::Finished
        );
        let got = run.pair.read(&target);
        let equal = got == reference[&run.pair.name()];
        eprintln!(
            "crash run {k}: {:?} {fp} first={first:?} replay={replay:?} equal={equal}",
            run.pair
        );
        if !equal {
            mismatched.push(format!(
                "{run:?}: got {got:#?}\nexpected {:#?}",
                reference[&run.pair.name()]
            ));
        }
    }
    for (point, (n, k)) in &by_point {
        eprintln!("crash matrix: {point}: {n} runs, {k} killed there");
    }
    eprintln!(
        "crash matrix: {} runs, {killed} killed, {replay_killed} killed again in the replay, {} equal to the uninterrupted run, {} not",
        runs.len(),
        runs.len() - mismatched.len(),
        mismatched.len()
    );
    assert!(killed > 0, "no run reached its failpoint");
    if full {
        // Every point of every pair is reached by some batch.
        let never: Vec<&&str> = by_point
            .iter()
            .filter(|(_, (_, k))| *k == 0)
            .map(|(p, _)| p)
            .collect();
        assert!(never.is_empty(), "failpoints never reached: {never:?}");
    }
    assert!(mismatched.is_empty(), "{}", mismatched.join("\n\n"));
}

/// The file sink's rows, read through its manifest (what a reader sees).
fn file_rows(out: &Path) -> Vec<String> {
    let mut rows = Vec::new();
    for f in weir::sink::file::committed_files(out).unwrap() {
        for line in std::fs::read_to_string(&f).unwrap().lines() {
            if !line.trim().is_empty() {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                rows.push(v.to_string());
            }
        }
    }
    rows
}

#[cfg(feature = "kafka")]
mod kafka {
    pub(crate) use crate::kafka::{admin, bootstrap};

    /// Every committed record's `key|value` in the topic (`read_committed`).
    pub(crate) fn committed_values(topic: &str) -> Vec<String> {
        crate::kafka::read_records(topic, "read_committed")
            .into_iter()
            .map(|o| format!("{}|{}", o.key.unwrap_or_default(), o.value))
            .collect()
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use weir::sink::postgres::client::{Client, NoTls};

    pub fn url() -> String {
        std::env::var("WEIR_POSTGRES_URL").expect(
            "WEIR_POSTGRES_URL is not set: run `bash scripts/test.sh`, which starts PostgreSQL",
        )
    }

    /// The table's rows as JSON (`row_to_json`).
    pub fn rows(table: &str) -> Vec<String> {
        let mut c = Client::connect(&url(), NoTls).unwrap();
        c.query(
            &format!("SELECT row_to_json(t)::text FROM \"{table}\" t"),
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect()
    }
}

#[cfg(feature = "redis")]
mod redis {
    use std::collections::BTreeMap;

    use weir::sink::redis::client::{self, Commands};

    pub fn url() -> String {
        std::env::var("WEIR_REDIS_URL")
            .expect("WEIR_REDIS_URL is not set: run `bash scripts/test.sh`, which starts Redis")
    }

    /// Every row hash under the prefix (hashes with the result's `n` field),
    /// as its key and fields.
    pub fn rows(prefix: &str) -> Vec<String> {
        let mut c = client::Client::open(url().as_str())
            .unwrap()
            .get_connection()
            .unwrap();
        let keys: Vec<String> = c.keys(format!("{prefix}*")).unwrap();
        let mut out = Vec::new();
        for k in keys {
            let t: String = client::cmd("TYPE").arg(&k).query(&mut c).unwrap();
            if t != "hash" {
                continue;
            }
            let fields: BTreeMap<String, String> = c.hgetall(&k).unwrap();
            if fields.contains_key("n") {
                out.push(format!(
                    "{}={}",
                    &k[prefix.len()..],
                    serde_json::to_string(&fields).unwrap()
                ));
            }
        }
        out
    }
}
