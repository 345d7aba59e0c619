//! Restarts and crashes: a query stopped or killed mid-stream and started
//! again on its checkpoint produces exactly the output of an uninterrupted run.

use std::fs;
use std::path::Path;
use std::sync::{Arc, Mutex};

use weir::functions::{count_star, sum, window};
use weir::plan::{DataType, Field, OutputMode};
use weir::source::{FileFormat, FileSource};
use weir::{Session, SessionConfig, StreamingQuery, WeirError};

use crate::common::rows_json;

type Collected = Arc<Mutex<Vec<(i64, Vec<String>)>>>;

fn fields() -> Vec<Field> {
    vec![
        Field::new("ts", DataType::Timestamp),
        Field::new("key", DataType::String),
        Field::new("value", DataType::Int64),
    ]
}

const FILES: &[&str] = &[
    r#"{"ts":"2024-01-01T12:02:00Z","key":"a","value":1}
{"ts":"2024-01-01T12:07:00Z","key":"b","value":2}"#,
    r#"{"ts":"2024-01-01T12:12:00Z","key":"a","value":4}
{"ts":"2024-01-01T12:01:00Z","key":"b","value":5}"#,
    r#"{"ts":"2024-01-01T12:26:00Z","key":"a","value":7}"#,
    r#"{"ts":"2024-01-01T12:05:00Z","key":"a","value":8}
{"ts":"2024-01-01T12:13:00Z","key":"b","value":9}"#,
    r#"{"ts":"2024-01-01T12:45:00Z","key":"c","value":12}"#,
    r#"{"ts":"2024-01-01T13:30:00Z","key":"c","value":13}"#,
];

fn write_file(dir: &Path, i: usize) {
    fs::create_dir_all(dir).unwrap();
    // Written aside and renamed in, as a producer should, so no half file is read.
    let tmp = dir.join(format!(".f{i:02}.tmp"));
    fs::write(&tmp, FILES[i]).unwrap();
    fs::rename(&tmp, dir.join(format!("f{i:02}.json"))).unwrap();
}

fn session() -> Session {
    session_on(MEMORY)
}

const MEMORY: &str = "memory";

/// A session whose state store is `provider` (`memory` or `rocksdb`).
fn session_on(provider: &str) -> Session {
    let mut conf = SessionConfig {
        fsync_checkpoint: true,
        // Two workers on any machine: a batch's offsets/N is then written
        // beside its computation, not before it (the kill tests' timing).
        worker_threads: 2,
        ..SessionConfig::default()
    };
    conf.set("spark.sql.streaming.stateStore.providerClass", provider)
        .unwrap();
    Session::with_config(conf)
}

/// Windowed count+sum over the file source, append mode, one file per batch,
/// collecting (batch id, sorted rows) through foreach_batch.
fn start(input: &Path, chk: &Path, out: Collected) -> Result<StreamingQuery, WeirError> {
    start_on(MEMORY, input, chk, out)
}

/// [`start`] on the `provider` state store.
fn start_on(
    provider: &str,
    input: &Path,
    chk: &Path,
    out: Collected,
) -> Result<StreamingQuery, WeirError> {
    // The input directory exists before the query starts (as Spark requires).
    std::fs::create_dir_all(input).unwrap();
    session_on(provider)
        .read_stream(FileSource::new(input, FileFormat::Json, fields()).max_files_per_trigger(1))
        .with_watermark("ts", "10 minutes")
        .group_by(vec![
            window("ts", "10 minutes"),
            weir::functions::col("key"),
        ])
        .agg(vec![count_star("n"), sum("value", "total")])
        .write_stream()
        .output_mode(OutputMode::Append)
        .checkpoint_location(chk.to_str().unwrap())
        .foreach_batch(move |id, batches| {
            let mut rows: Vec<String> = rows_json(batches).iter().map(|r| r.to_string()).collect();
            rows.sort();
            let mut o = out.lock().unwrap();
            o.retain(|(b, _)| *b != id); // a re-run batch replaces what it wrote
            o.push((id, rows));
            Ok(())
        })
        .start()
}

/// Starts the query, feeds files `files` one at a time (each fully processed,
/// with the no-data batches it makes due), then stops it.
fn run_files(input: &Path, chk: &Path, out: &Collected, files: std::ops::Range<usize>) {
    run_files_on(MEMORY, input, chk, out, files)
}

/// [`run_files`] on the `provider` state store.
fn run_files_on(
    provider: &str,
    input: &Path,
    chk: &Path,
    out: &Collected,
    files: std::ops::Range<usize>,
) {
    let q = start_on(provider, input, chk, out.clone()).unwrap();
    q.process_all_available().unwrap();
    for i in files {
        write_file(input, i);
        q.process_all_available().unwrap();
    }
    q.stop().unwrap();
    assert!(q.exception().is_none());
}

fn uninterrupted() -> Vec<(i64, Vec<String>)> {
    let dir = tempfile::tempdir().unwrap();
    let out: Collected = Arc::default();
    run_files(
        &dir.path().join("in"),
        &dir.path().join("chk"),
        &out,
        0..FILES.len(),
    );
    let v = out.lock().unwrap().clone();
    v
}

#[test]
fn stop_and_restart_equals_an_uninterrupted_run() {
    let expected = uninterrupted();
    assert!(
        expected.iter().any(|(_, rows)| !rows.is_empty()),
        "the reference run emitted nothing: {expected:?}"
    );
    let dir = tempfile::tempdir().unwrap();
    let (input, chk) = (dir.path().join("in"), dir.path().join("chk"));
    let out: Collected = Arc::default();
    run_files(&input, &chk, &out, 0..3);
    run_files(&input, &chk, &out, 3..FILES.len());
    assert_eq!(*out.lock().unwrap(), expected);
}

/// Stop and restart on the RocksDB state store.
#[cfg(feature = "rocksdb")]
#[test]
fn stop_and_restart_equals_an_uninterrupted_run_on_rocksdb() {
    let expected = uninterrupted();
    let dir = tempfile::tempdir().unwrap();
    let (input, chk) = (dir.path().join("in"), dir.path().join("chk"));
    let out: Collected = Arc::default();
    run_files_on("rocksdb", &input, &chk, &out, 0..3);
    run_files_on("rocksdb", &input, &chk, &out, 3..FILES.len());
    assert_eq!(*out.lock().unwrap(), expected);
}

#[test]
fn a_crash_after_the_state_commit_reruns_the_batch_exactly() {
    let expected = uninterrupted();
    let dir = tempfile::tempdir().unwrap();
    let (input, chk) = (dir.path().join("in"), dir.path().join("chk"));
    let out: Collected = Arc::default();
    run_files(&input, &chk, &out, 0..FILES.len());
    // Simulate a kill between the state commit and the commit log: the last
    // batch's offsets and state are on disk, its commits/ entry is not.
    let last = expected.last().unwrap().0;
    fs::remove_file(chk.join("commits").join(last.to_string())).unwrap();
    let before = out.lock().unwrap().clone();
    run_files(&input, &chk, &out, 0..0);
    assert_eq!(*out.lock().unwrap(), expected);
    assert_eq!(before, expected);
}

#[test]
fn a_crash_right_after_the_offsets_log_reruns_with_the_logged_offsets() {
    let expected = uninterrupted();
    let dir = tempfile::tempdir().unwrap();
    let (input, chk) = (dir.path().join("in"), dir.path().join("chk"));
    let out: Collected = Arc::default();
    run_files(&input, &chk, &out, 0..FILES.len());
    // Kill right after offsets/N: no sink output, no state version, no commit.
    let last = expected.last().unwrap().0;
    fs::remove_file(chk.join("commits").join(last.to_string())).unwrap();
    let state = chk.join("state/0/0");
    let _ = fs::remove_file(state.join(format!("{}.delta", last + 1)));
    let _ = fs::remove_file(state.join(format!("{}.snapshot", last + 1)));
    out.lock().unwrap().retain(|(b, _)| *b != last);
    run_files(&input, &chk, &out, 0..0);
    assert_eq!(*out.lock().unwrap(), expected);
}

#[test]
fn a_changed_query_on_an_old_checkpoint_is_refused_with_what_changed() {
    let dir = tempfile::tempdir().unwrap();
    let (input, chk) = (dir.path().join("in"), dir.path().join("chk"));
    let out: Collected = Arc::default();
    run_files(&input, &chk, &out, 0..1);
    let err = session()
        .read_stream(FileSource::new(&input, FileFormat::Json, fields()))
        .with_watermark("ts", "10 minutes")
        .group_by(vec![window("ts", "5 minutes")])
        .agg(vec![count_star("n")])
        .write_stream()
        .checkpoint_location(chk.to_str().unwrap())
        .foreach_batch(|_, _| Ok(()))
        .start()
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("different query"), "{msg}");
    assert!(
        msg.contains("aggregate"),
        "names the changed operation: {msg}"
    );
}

#[test]
fn a_damaged_checkpoint_is_a_clear_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let (input, chk) = (dir.path().join("in"), dir.path().join("chk"));
    let out: Collected = Arc::default();
    run_files(&input, &chk, &out, 0..2);
    let last = fs::read_dir(chk.join("offsets"))
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i64>().ok())
        .max()
        .unwrap();
    fs::write(chk.join("offsets").join(last.to_string()), "garbage").unwrap();
    let err = start(&input, &chk, out.clone()).unwrap_err().to_string();
    assert!(err.contains(&format!("offsets/{last}")), "{err}");
    assert!(
        err.contains("damaged") || err.contains("not a weir"),
        "{err}"
    );
    fs::write(chk.join("metadata"), "{not json").unwrap();
    let err = start(&input, &chk, out).unwrap_err().to_string();
    assert!(err.contains("metadata") && err.contains("damaged"), "{err}");
}

/// The child side of the kill test: runs the query over the files with a
/// failpoint set, and dies (abort) between the state commit and the commit log.
fn crash_child_if_asked(provider: &str) -> bool {
    let Ok(dir) = std::env::var("WEIR_CRASH_TEST_DIR") else {
        return false;
    };
    let dir = std::path::PathBuf::from(dir);
    let out: Collected = Arc::default();
    run_files_on(
        provider,
        &dir.join("in"),
        &dir.join("chk"),
        &out,
        0..FILES.len(),
    );
    true
}

#[test]
fn a_killed_process_between_state_commit_and_commit_log_recovers_exactly() {
    killed_process_recovers(
        MEMORY,
        "recovery::a_killed_process_between_state_commit_and_commit_log_recovers_exactly",
    );
}

/// The kill test on the RocksDB state store: its instance is a cache of the
/// last committed version, rebuilt from the checkpoint when it is not.
#[cfg(feature = "rocksdb")]
#[test]
fn a_killed_process_recovers_exactly_on_rocksdb() {
    killed_process_recovers(
        "rocksdb",
        "recovery::a_killed_process_recovers_exactly_on_rocksdb",
    );
}

/// A batch reads and computes while its `offsets/N` is written, but writes
/// nothing before that is durable: a process killed right after the log
/// (its state partitions would have committed meanwhile had they not
/// waited for it) has written no state version for the batch, and the
/// restart re-runs it exactly. Killed at every batch in turn: whether a
/// state partition would have got ahead of the log is a matter of timing.
#[test]
fn a_process_killed_right_after_its_offsets_log_wrote_no_state_and_recovers_exactly() {
    let name = "recovery::a_process_killed_right_after_its_offsets_log_wrote_no_state_and_recovers_exactly";
    if crash_child_if_asked(MEMORY) {
        return; // (not reached when the failpoint fires)
    }
    let expected = uninterrupted();
    for (victim, _) in &expected {
        killed_process_recovers_at(MEMORY, name, "after_offsets", *victim, &expected);
    }
}

/// The state files of version `version` under `chk` (any operator or
/// partition, deltas and snapshots).
fn state_files_of_version(chk: &Path, version: i64) -> Vec<std::path::PathBuf> {
    fn walk(dir: &Path, names: &[String], found: &mut Vec<std::path::PathBuf>) {
        for e in fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, names, found);
            } else if names.iter().any(|n| e.file_name().to_str() == Some(n)) {
                found.push(p);
            }
        }
    }
    let names = [format!("{version}.delta"), format!("{version}.snapshot")];
    let mut found = Vec::new();
    walk(&chk.join("state"), &names, &mut found);
    found
}

/// Runs the query in a child process (this test binary, test `name`) that
/// dies between a state commit and the commit log, then restarts it here.
fn killed_process_recovers(provider: &str, name: &str) {
    if crash_child_if_asked(provider) {
        return; // (not reached when the failpoint fires)
    }
    // Kill the process while it commits the batch that emits the first windows.
    let expected = uninterrupted();
    let victim = expected
        .iter()
        .find(|(_, rows)| !rows.is_empty())
        .unwrap()
        .0;
    killed_process_recovers_at(provider, name, "after_state_commit", victim, &expected)
}

/// Runs the query in a child process (this test binary, test `name`, which
/// starts with [`crash_child_if_asked`]) that dies at failpoint `point` of
/// batch `victim`, then restarts it here: the output from the victim on is
/// the uninterrupted run's (`expected`).
fn killed_process_recovers_at(
    provider: &str,
    name: &str,
    point: &str,
    victim: i64,
    expected: &[(i64, Vec<String>)],
) {
    let dir = tempfile::tempdir().unwrap();
    crate::common::run_child_killed_at_failpoint(
        name,
        &[
            ("WEIR_CRASH_TEST_DIR", dir.path().display().to_string()),
            ("WEIR_FAILPOINT", format!("{point}:{victim}")),
        ],
    );
    let chk = dir.path().join("chk");
    assert!(chk.join("offsets").join(victim.to_string()).exists());
    assert!(
        !chk.join("commits").join(victim.to_string()).exists(),
        "killed before the commit log"
    );
    let state = state_files_of_version(&chk, victim + 1);
    if point == "after_offsets" {
        assert!(
            state.is_empty(),
            "written before offsets/{victim}: {state:?}"
        );
    } else {
        assert!(
            !state.is_empty(),
            "no state version {} written before {point}",
            victim + 1
        );
    }
    // Restart (in this process) and finish: batches from the victim on are
    // re-run from the logged offsets and the restored state.
    let written = fs::read_dir(dir.path().join("in")).unwrap().count();
    let out: Collected = Arc::default();
    run_files_on(
        provider,
        &dir.path().join("in"),
        &chk,
        &out,
        written..FILES.len(),
    );
    let got = out.lock().unwrap().clone();
    let tail: Vec<_> = expected
        .iter()
        .filter(|(b, _)| *b >= victim)
        .cloned()
        .collect();
    assert_eq!(got, tail);
}
