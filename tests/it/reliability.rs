//! Reliability: the checkpoint, the file sink and the file source under
//! crashes, damage and hostile names (issue 10).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use weir::source::{FileFormat, FileSource};
use weir::{StreamingQuery, WeirError};

use crate::common::{fields, rows_json, session};

/// (batch id, rows as JSON) as a foreach_batch sink saw them.
type Seen = Arc<Mutex<Vec<(i64, Vec<serde_json::Value>)>>>;

/// One JSON file of `n` rows with values `first..first + n`.
fn add_file(dir: &Path, name: &str, first: i64, n: i64) {
    fs::create_dir_all(dir).unwrap();
    let text: Vec<String> = (first..first + n)
        .map(|v| format!(r#"{{"ts":"2024-01-01T12:00:00Z","key":"k{v}","value":{v}}}"#))
        .collect();
    let tmp = dir.join(format!(".{name}.writing"));
    fs::write(&tmp, text.join("\n")).unwrap();
    fs::rename(&tmp, dir.join(name)).unwrap();
}

/// A pass-through query over the file source in `input`, one file a batch.
fn start_files(input: &Path, chk: &Path, seen: Seen) -> Result<StreamingQuery, WeirError> {
    session()
        .read_stream(FileSource::new(input, FileFormat::Json, fields()).max_files_per_trigger(1))
        .write_stream()
        .checkpoint_location(chk.to_str().unwrap())
        .foreach_batch(move |id, batches| {
            let mut s = seen.lock().unwrap();
            s.retain(|(b, _)| *b != id);
            s.push((id, rows_json(batches)));
            Ok(())
        })
        .start()
}

/// Runs [`start_files`] until idle, then stops it.
fn run_files(input: &Path, chk: &Path, seen: &Seen) {
    let q = start_files(input, chk, seen.clone()).unwrap();
    q.process_all_available().unwrap();
    q.stop().unwrap();
    assert!(q.exception().is_none(), "{:?}", q.exception());
}

/// Every value the sink saw, by batch.
fn values(seen: &Seen) -> Vec<(i64, Vec<i64>)> {
    let mut v: Vec<(i64, Vec<i64>)> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|(b, rows)| {
            let mut vals: Vec<i64> = rows.iter().map(|r| r["value"].as_i64().unwrap()).collect();
            vals.sort();
            (*b, vals)
        })
        .collect();
    v.sort();
    v
}

/// Every file below `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().unwrap().is_dir() {
                out.extend(walk(&e.path()));
            } else {
                out.push(e.path());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_checkpoint_with_batches_but_no_metadata_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (input, chk) = (dir.path().join("in"), dir.path().join("chk"));
    let seen: Seen = Arc::default();
    add_file(&input, "a.json", 0, 2);
    run_files(&input, &chk, &seen);
    fs::remove_file(chk.join("metadata")).unwrap();
    add_file(&input, "b.json", 2, 2);
    let err = start_files(&input, &chk, seen.clone()).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains(&chk.join("metadata").display().to_string()),
        "names the missing file: {msg}"
    );
    assert!(msg.contains("query id"), "says why it matters: {msg}");
    assert!(
        msg.contains("new, empty checkpoint location") && msg.contains("backup"),
        "says what to do: {msg}"
    );
    assert!(
        !chk.join("metadata").exists(),
        "no new query id was written"
    );
    assert_eq!(values(&seen), vec![(0, vec![0, 1])], "nothing ran twice");
}

#[test]
fn stray_names_in_the_logs_do_not_stop_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (input, chk) = (dir.path().join("in"), dir.path().join("chk"));
    let seen: Seen = Arc::default();
    add_file(&input, "a.json", 0, 2);
    run_files(&input, &chk, &seen);
    add_file(&input, "b.json", 2, 2);
    run_files(&input, &chk, &seen);
    // Copies an editor, a sync tool or a person left behind.
    for log in ["offsets", "commits"] {
        for stray in ["07", "+7", "-1", "7.tmp", "00"] {
            fs::copy(chk.join(log).join("1"), chk.join(log).join(stray)).unwrap();
        }
    }
    add_file(&input, "c.json", 4, 1);
    run_files(&input, &chk, &seen);
    assert_eq!(
        values(&seen),
        vec![(0, vec![0, 1]), (1, vec![2, 3]), (2, vec![4])],
        "batch ids continue after the real last batch"
    );
    assert!(chk.join("commits").join("2").exists());
}

#[test]
fn leftover_temp_files_are_gone_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (input, chk) = (dir.path().join("in"), dir.path().join("chk"));
    let seen: Seen = Arc::default();
    add_file(&input, "a.json", 0, 2);
    run_files(&input, &chk, &seen);
    // What a kill between a temp file's write and its rename leaves.
    let uuid = "0123456789abcdef0123456789abcdef";
    let leftovers = [
        chk.join(format!("offsets/.1.{uuid}.tmp")),
        chk.join(format!("commits/.1.{uuid}.tmp")),
        chk.join(format!("sources/0/.1.{uuid}.tmp")),
        chk.join(format!(".metadata.{uuid}.tmp")),
    ];
    for p in &leftovers {
        fs::write(p, "half written").unwrap();
    }
    add_file(&input, "b.json", 2, 1);
    run_files(&input, &chk, &seen);
    for p in &leftovers {
        assert!(!p.exists(), "{} survived the restart", p.display());
    }
    let tmp: Vec<_> = walk(&chk)
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(tmp.is_empty(), "{tmp:?}");
    assert_eq!(values(&seen), vec![(0, vec![0, 1]), (1, vec![2])]);
}

/// Partition values that are invalid or ambiguous as raw directory names.
fn hostile_keys() -> Vec<String> {
    vec![
        "plain".into(),
        "a/b".into(),
        "../up".into(),
        "100%".into(),
        "%2F".into(),
        "k=v".into(),
        "12:00".into(),
        "nul\0byte".into(),
        "new\nline".into(),
        "x".repeat(300),
        format!("{}/", "é".repeat(150)),
        format!("{}y", "x".repeat(299)),
    ]
}

/// Writes `keys` (value = position) through a file sink of `format`
/// partitioned by `key`, one batch.
fn write_partitioned(format: FileFormat, out: &Path, chk: &Path, keys: &[String]) {
    let stream = weir::source::MemoryStream::new(&fields());
    let rows: Vec<serde_json::Value> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| serde_json::json!({"ts": "2024-01-01T12:00:00Z", "key": k, "value": i}))
        .collect();
    stream.add_json(&rows).unwrap();
    let q = session()
        .read_stream(stream)
        .write_stream()
        .sink(
            weir::sink::FileSink::new(out, format)
                .partition_by(vec!["key".into()])
                .fsync(false),
        )
        .checkpoint_location(chk.to_str().unwrap())
        .start()
        .unwrap();
    q.process_all_available().unwrap();
    q.stop().unwrap();
    assert!(q.exception().is_none(), "{:?}", q.exception());
}

/// Reads a file sink's output back with the file source: (key, value) rows.
fn read_back(format: FileFormat, out: &Path, chk: &Path) -> Vec<(Option<String>, i64)> {
    let seen: Seen = Arc::default();
    let s2 = seen.clone();
    let q = session()
        .read_stream(FileSource::new(out, format, fields()).header(true))
        .write_stream()
        .checkpoint_location(chk.to_str().unwrap())
        .foreach_batch(move |id, batches| {
            s2.lock().unwrap().push((id, rows_json(batches)));
            Ok(())
        })
        .start()
        .unwrap();
    q.process_all_available().unwrap();
    q.stop().unwrap();
    assert!(q.exception().is_none(), "{:?}", q.exception());
    let mut rows: Vec<(Option<String>, i64)> = seen
        .lock()
        .unwrap()
        .iter()
        .flat_map(|(_, r)| r.clone())
        .map(|r| {
            (
                r["key"].as_str().map(str::to_string),
                r["value"].as_i64().unwrap(),
            )
        })
        .collect();
    rows.sort_by_key(|r| r.1);
    rows
}

#[test]
fn hostile_partition_values_make_valid_directories_and_read_back_whole() {
    for format in [FileFormat::Json, FileFormat::Csv, FileFormat::Parquet] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let mut keys = hostile_keys();
        keys.push(String::new()); // empty: Hive's default partition, reads as null
        write_partitioned(format, &out, &dir.path().join("chk"), &keys);
        let committed = weir::sink::file::committed_files(&out).unwrap();
        assert_eq!(
            committed.len(),
            keys.len(),
            "{format:?}: one directory per value"
        );
        for f in &committed {
            let rel = f.strip_prefix(&out).unwrap();
            assert_eq!(
                rel.components().count(),
                2,
                "{format:?}: {rel:?} escaped one level"
            );
            for c in rel.components() {
                let name = c.as_os_str().to_string_lossy();
                assert!(name.len() <= 255, "{format:?}: {} bytes", name.len());
                assert!(!name.contains('\0') && name != ".." && name != ".");
            }
            assert!(f.is_file(), "{}", f.display());
        }
        let rows = read_back(format, &out, &dir.path().join("chk2"));
        let expected: Vec<(Option<String>, i64)> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| ((!k.is_empty()).then(|| k.clone()), i as i64))
            .collect();
        assert_eq!(rows, expected, "{format:?}");
    }
}

#[test]
fn the_file_source_reads_a_sink_directory_through_its_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let keys: Vec<String> = vec!["a".into(), "b/c".into()];
    write_partitioned(FileFormat::Json, &out, &dir.path().join("chk"), &keys);
    let committed = weir::sink::file::committed_files(&out).unwrap();
    // A killed batch's orphan next to a committed file, one at the top, and a
    // file still being written.
    let orphan = committed[0].with_file_name("part-00001-orphan.json");
    fs::copy(&committed[0], &orphan).unwrap();
    fs::copy(&committed[1], out.join("part-00001-orphan2.json")).unwrap();
    let in_progress = committed[0].with_file_name(".part-00001-x.json.inprogress");
    fs::copy(&committed[0], &in_progress).unwrap();
    let rows = read_back(FileFormat::Json, &out, &dir.path().join("chk2"));
    assert_eq!(
        rows,
        vec![(Some("a".into()), 0), (Some("b/c".into()), 1)],
        "only the manifest's files, once"
    );
    // The sink's next open removes what a killed run was writing.
    write_partitioned(FileFormat::Json, &out, &dir.path().join("chk3"), &keys);
    assert!(!in_progress.exists(), "{}", in_progress.display());
    assert!(orphan.exists(), "an orphan is left to the manifest to hide");
}

/// Files → file sink (JSON), one input file a batch, in `dir` (`in/`, `out/`,
/// `chk/`), until idle.
fn run_files_to_sink(dir: &Path) {
    let q = session()
        .read_stream(
            FileSource::new(dir.join("in"), FileFormat::Json, fields()).max_files_per_trigger(1),
        )
        .write_stream()
        .sink(weir::sink::FileSink::new(dir.join("out"), FileFormat::Json))
        .checkpoint_location(dir.join("chk").to_str().unwrap())
        .start()
        .unwrap();
    q.process_all_available().unwrap();
    q.stop().unwrap();
    assert!(q.exception().is_none(), "{:?}", q.exception());
}

/// Runs [`run_files_to_sink`] in a child process (this test binary, test
/// `name`) killed at `point` of batch 1, restarts it here, and checks every
/// input row reached the sink's manifest exactly once.
fn killed_at_recovers_exactly(point: &str, name: &str) {
    if let Ok(dir) = std::env::var("WEIR_RELIABILITY_CHILD_DIR") {
        run_files_to_sink(Path::new(&dir));
        return; // (not reached when the failpoint fires)
    }
    let dir = tempfile::tempdir().unwrap();
    for i in 0..3 {
        add_file(&dir.path().join("in"), &format!("f{i}.json"), i * 2, 2);
    }
    crate::common::run_child_killed_at_failpoint(
        name,
        &[
            (
                "WEIR_RELIABILITY_CHILD_DIR",
                dir.path().display().to_string(),
            ),
            ("WEIR_FAILPOINT", format!("{point}:1")),
        ],
    );
    run_files_to_sink(dir.path());
    if point == "file_sink_after_data" {
        let on_disk = walk(&dir.path().join("out"))
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .count();
        let committed = weir::sink::file::committed_files(&dir.path().join("out")).unwrap();
        assert_eq!(
            on_disk,
            committed.len() + 1,
            "the killed batch's orphan is there"
        );
    }
    let rows = read_back(
        FileFormat::Json,
        &dir.path().join("out"),
        &dir.path().join("chk2"),
    );
    let values: Vec<i64> = rows.iter().map(|r| r.1).collect();
    assert_eq!(values, (0..6).collect::<Vec<_>>(), "{point}: each row once");
}

#[test]
fn a_kill_after_a_sink_data_file_before_its_manifest_recovers_exactly() {
    killed_at_recovers_exactly(
        "file_sink_after_data",
        "reliability::a_kill_after_a_sink_data_file_before_its_manifest_recovers_exactly",
    );
}

#[test]
fn a_kill_after_the_sink_manifest_recovers_exactly() {
    killed_at_recovers_exactly(
        "file_sink_after_manifest",
        "reliability::a_kill_after_the_sink_manifest_recovers_exactly",
    );
}

#[test]
fn a_kill_after_the_source_log_before_the_offsets_recovers_exactly() {
    killed_at_recovers_exactly(
        "after_source_log",
        "reliability::a_kill_after_the_source_log_before_the_offsets_recovers_exactly",
    );
}
