//! Property tests (proptest): round trips of what the checkpoint stores,
//! window assignment over the whole time range.
//!
//! Case counts are kept modest so CI stays fast; `PROPTEST_CASES=N` in the
//! environment runs more.

use std::collections::BTreeMap;
use std::path::Path;

use proptest::prelude::*;
use serde_json::Value;
use weir::checkpoint::{BatchLog, CommitEntry, OffsetEntry};
use weir::ops::window::{TimeSource, WindowAssigner};
use weir::state::{MemoryStateStore, StateStore};

/// Cases for the properties that write files.
const FILE_CASES: u32 = 64;
/// Cases for the RocksDB store (each opens a RocksDB instance per version).
const ROCKSDB_CASES: u32 = 16;
/// Cases for the pure ones.
const PURE_CASES: u32 = 256;

/// `PROPTEST_CASES` from the environment, else `default`.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One write of a batch.
#[derive(Debug, Clone)]
enum Op {
    Put(Vec<u8>, Vec<u8>),
    /// `update` to a new value whatever the old one: the same write, the key borrowed.
    Replace(Vec<u8>, Vec<u8>),
    /// `update`: the value appended to the key's old one (`fails`: the
    /// update's function fails instead, changing nothing).
    Update(Vec<u8>, Vec<u8>, bool),
    Remove(Vec<u8>),
}

/// A batch: its writes, and whether it commits (or aborts).
type Batch = (Vec<Op>, bool);

fn op() -> impl Strategy<Value = Op> {
    // Few distinct keys (the empty one included), so writes overwrite and
    // remove each other across versions.
    let key = prop::collection::vec(0u8..3, 0..3);
    prop_oneof![
        2 => (key.clone(), prop::collection::vec(any::<u8>(), 0..8)).prop_map(|(k, v)| Op::Put(k, v)),
        2 => (key.clone(), prop::collection::vec(any::<u8>(), 0..8)).prop_map(|(k, v)| Op::Replace(k, v)),
        2 => (key.clone(), prop::collection::vec(any::<u8>(), 0..4), prop::bool::weighted(0.2)).prop_map(|(k, v, fails)| Op::Update(k, v, fails)),
        1 => key.prop_map(Op::Remove),
    ]
}

fn batches() -> impl Strategy<Value = Vec<Batch>> {
    // Up to 25 batches: across the snapshot interval (10) twice.
    prop::collection::vec(
        (
            prop::collection::vec(op(), 0..8),
            prop::bool::weighted(0.85),
        ),
        1..25,
    )
}

fn contents(s: &dyn StateStore) -> BTreeMap<Vec<u8>, Vec<u8>> {
    s.iter()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// Runs `batches` on a store (committed ones as versions 1, 2, ...),
/// checking each batch's reads against a model, then reopens the store
/// (with `open`, and with `reopen` too) at every version retention keeps and
/// compares it with the model's history.
fn check_store(
    batches: &[Batch],
    retain: u64,
    open: &dyn Fn(&Path, u64, u64) -> Box<dyn StateStore>,
    reopen: &dyn Fn(&Path, u64, u64) -> Box<dyn StateStore>,
) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path(), 0, retain);
    let mut history = vec![BTreeMap::new()];
    for (ops, commits) in batches {
        let mut model = history.last().unwrap().clone();
        for op in ops {
            match op {
                Op::Put(k, v) => {
                    store.put(k.clone(), v.clone());
                    model.insert(k.clone(), v.clone());
                }
                Op::Replace(k, v) => {
                    let mut given_empty = true;
                    store
                        .update(k, &mut |_, out| {
                            given_empty &= out.is_empty();
                            out.extend_from_slice(v);
                            Ok(())
                        })
                        .unwrap();
                    prop_assert!(given_empty, "the updater's buffer was not empty");
                    model.insert(k.clone(), v.clone());
                }
                Op::Update(k, v, fails) => {
                    let expected_old = model.get(k).cloned();
                    let mut seen = None;
                    let mut given_empty = true;
                    let result = store.update(k, &mut |old, out| {
                        seen = Some(old.map(<[u8]>::to_vec));
                        given_empty &= out.is_empty();
                        out.extend_from_slice(old.unwrap_or_default());
                        out.extend_from_slice(v);
                        if *fails {
                            // What it wrote before failing is not kept.
                            return Err(weir::WeirError::Config("update refused".into()));
                        }
                        Ok(())
                    });
                    prop_assert_eq!(seen, Some(expected_old.clone()));
                    prop_assert!(given_empty, "the updater's buffer was not empty");
                    if *fails {
                        prop_assert!(result.is_err());
                    } else {
                        prop_assert!(result.is_ok());
                        let new = [expected_old.unwrap_or_default(), v.clone()].concat();
                        model.insert(k.clone(), new);
                    }
                }
                Op::Remove(k) => {
                    store.remove(k);
                    model.remove(k);
                }
            }
            prop_assert_eq!(store.len(), model.len());
        }
        for k in model.keys() {
            let got = store.get(k).map(|v| v.into_owned());
            prop_assert_eq!(got.as_ref(), model.get(k));
        }
        prop_assert_eq!(&contents(store.as_ref()), &model);
        if *commits {
            let version = history.len() as u64;
            store.commit(version).unwrap();
            history.push(model);
        } else {
            store.abort();
            prop_assert_eq!(&contents(store.as_ref()), history.last().unwrap());
        }
        prop_assert!(store.check().is_ok());
    }
    drop(store);
    let newest = history.len() as u64 - 1;
    // Every version within the retention (and version 0, empty) reopens as it was.
    for version in (0..=newest).filter(|v| *v == 0 || *v + retain >= newest) {
        let want = &history[version as usize];
        for o in [open, reopen] {
            let s = o(dir.path(), version, retain);
            prop_assert_eq!(s.len(), want.len(), "version {}", version);
            prop_assert_eq!(&contents(s.as_ref()), want, "version {}", version);
        }
    }
    Ok(())
}

fn memory(dir: &Path, version: u64, retain: u64) -> Box<dyn StateStore> {
    Box::new(MemoryStateStore::open(dir, version, retain, false).unwrap())
}

#[cfg(feature = "rocksdb")]
fn rocksdb(dir: &Path, version: u64, retain: u64) -> Box<dyn StateStore> {
    Box::new(weir::state::RocksDbStateStore::open(dir, version, retain, false).unwrap())
}

/// Any JSON value a source might log as its offset (no floats: JSON
/// numbers with fractions are not what offsets hold).
fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        ".*".prop_map(Value::from),
        Just(Value::from("-")),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(".*", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn offset_entry() -> impl Strategy<Value = OffsetEntry> {
    (
        any::<i64>(),
        any::<i64>(),
        prop::collection::vec(any::<Option<i64>>(), 0..4),
        prop::collection::vec(prop::option::of(json()), 0..4),
    )
        .prop_map(|(wm, ts, ops, sources)| OffsetEntry {
            batch_watermark_ms: wm,
            batch_timestamp_ms: ts,
            operator_watermarks_ms: ops,
            sources,
        })
}

fn commit_entry() -> impl Strategy<Value = CommitEntry> {
    (
        any::<i64>(),
        prop::collection::vec(any::<Option<i64>>(), 0..4),
    )
        .prop_map(|(wm, ops)| CommitEntry {
            next_batch_watermark_ms: wm,
            operator_watermarks_ms: ops,
        })
}

/// Timestamps over the whole range, often near its ends and near zero.
fn time() -> impl Strategy<Value = i64> {
    prop_oneof![
        any::<i64>(),
        i64::MIN..i64::MIN + 10_000,
        i64::MAX - 10_000..=i64::MAX,
        -10_000i64..10_000,
    ]
}

/// A window size and slide (slide <= size, as the plan requires), with at
/// most 64 windows per row: small, arbitrary and near `i64::MAX` sizes.
fn size_and_slide() -> impl Strategy<Value = (i64, i64)> {
    let size = prop_oneof![
        1i64..10_000,
        (1i64..=i64::MAX),
        (i64::MAX - 10_000..=i64::MAX),
    ];
    (size, 1i64..=64, 0i64..=1).prop_map(|(size, k, jitter)| {
        let slide = (size / k + jitter).clamp(1, size);
        (size, slide)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(FILE_CASES)))]

    /// The memory store's delta and snapshot files restore every retained
    /// version exactly.
    #[test]
    fn memory_state_round_trips_every_version(b in batches(), retain in 1u64..30) {
        check_store(&b, retain, &memory, &memory)?;
    }


    /// `offsets/N` and `commits/N` read back what was written, for any
    /// batch ids; `latest` is the highest.
    #[test]
    fn offsets_and_commit_logs_round_trip(
        entries in prop::collection::btree_map(
            prop_oneof![0i64..100, 0i64..=i64::MAX],
            (offset_entry(), commit_entry()),
            1..6,
        )
    ) {
        let dir = tempfile::tempdir().unwrap();
        let offsets = BatchLog::new(dir.path().join("offsets"), false);
        let commits = BatchLog::new(dir.path().join("commits"), false);
        std::fs::create_dir_all(dir.path().join("offsets")).unwrap();
        std::fs::create_dir_all(dir.path().join("commits")).unwrap();
        for (batch, (o, c)) in &entries {
            offsets.write_offsets(*batch, o).unwrap();
            commits.write_commit(*batch, c).unwrap();
        }
        for (batch, (o, c)) in &entries {
            prop_assert_eq!(offsets.read_offsets(*batch).unwrap(), Some(o.clone()));
            prop_assert_eq!(commits.read_commit(*batch).unwrap(), Some(c.clone()));
        }
        let newest = *entries.keys().next_back().unwrap();
        prop_assert_eq!(offsets.latest().unwrap(), Some(newest));
        prop_assert_eq!(commits.latest().unwrap(), Some(newest));
        if let Some(absent) = newest.checked_add(1) {
            prop_assert_eq!(offsets.read_offsets(absent).unwrap(), None);
            prop_assert_eq!(commits.read_commit(absent).unwrap(), None);
        }
    }
}

#[cfg(feature = "rocksdb")]
proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(ROCKSDB_CASES)))]

    /// The RocksDB store restores every retained version, from its cached
    /// instance or rebuilt from the files, and the memory store reads its
    /// files (one format).
    #[test]
    fn rocksdb_state_round_trips_every_version(b in batches(), retain in 1u64..30) {
        check_store(&b, retain, &rocksdb, &memory)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(PURE_CASES)))]

    /// Over the whole i64 range, no overflow (this runs in debug, where
    /// overflow panics): every assigned window `[start, start + size)` holds
    /// `t`, starts at a multiple of the slide and can be represented; a row
    /// gets every window that can be (the multiples of the slide in
    /// `(t - size, t]`: `size / slide` of them when the slide divides the
    /// size, `floor` or `ceil` of it otherwise) and the rows that lose one
    /// are counted.
    #[test]
    fn window_assignment_over_the_whole_time_range(
        t in time(),
        (size, slide) in size_and_slide(),
    ) {
        let w = WindowAssigner { source: TimeSource::Column(0), size_us: size, slide_us: slide };
        let starts: Vec<i64> = w.starts(t).collect();
        let (t128, size128, slide128) = (i128::from(t), i128::from(size), i128::from(slide));
        for s in &starts {
            let s = i128::from(*s);
            prop_assert!(s <= t128 && t128 < s + size128, "{} not in [{}, {})", t, s, s + size128);
            prop_assert_eq!((s + size128) - s, size128);
            prop_assert!(s + size128 <= i128::from(i64::MAX));
            prop_assert_eq!(s.rem_euclid(slide128), 0);
        }
        for pair in starts.windows(2) {
            prop_assert_eq!(i128::from(pair[1]) - i128::from(pair[0]), slide128);
        }
        // The multiples of the slide in (t - size, t].
        let all = t128.div_euclid(slide128) - (t128 - size128).div_euclid(slide128);
        let (floor, ceil) = (size128 / slide128, (size128 + slide128 - 1) / slide128);
        prop_assert!(all == floor || all == ceil);
        if size % slide == 0 {
            prop_assert_eq!(all, floor);
        }
        prop_assert_eq!(i128::from(w.max_windows_per_row()), ceil);
        let loses = w.loses_windows(t);
        if loses {
            prop_assert!((starts.len() as i128) < all);
        } else {
            prop_assert_eq!(starts.len() as i128, all);
            let last = *starts.last().unwrap();
            prop_assert_eq!(i128::from(w.last_window_end(t)), i128::from(last) + size128);
        }
        let a = w.assign_counted(&[Some(t), None]);
        prop_assert!(a.rows.iter().all(|r| *r == 0));
        prop_assert_eq!(&a.starts, &starts);
        prop_assert_eq!(a.rows_losing_windows, usize::from(loses));
    }

    /// Window sizes in milliseconds convert exactly or are an error.
    #[test]
    fn window_sizes_convert_exactly_or_fail(size_ms in any::<i64>(), slide_ms in any::<i64>()) {
        match WindowAssigner::from_ms(TimeSource::Column(0), size_ms, slide_ms) {
            Ok(w) => {
                prop_assert_eq!(i128::from(w.size_us), i128::from(size_ms) * 1000);
                prop_assert_eq!(i128::from(w.slide_us), i128::from(slide_ms) * 1000);
                prop_assert!(w.size_us > 0 && w.slide_us > 0);
            }
            Err(e) => prop_assert!(
                size_ms <= 0 || slide_ms <= 0
                    || size_ms.checked_mul(1000).is_none()
                    || slide_ms.checked_mul(1000).is_none(),
                "{}", e
            ),
        }
    }
}

/// A windowed count over timestamps at the very ends of the time range:
/// the query keeps running, the rows' representable windows are counted
/// and the rows losing a window are reported in the operator's metrics.
#[test]
fn a_windowed_count_at_the_ends_of_time_neither_panics_nor_stops() {
    use std::sync::Arc;
    use weir::arrow::array::{Array, TimestampMicrosecondArray};
    use weir::arrow::record_batch::RecordBatch;
    use weir::functions::{count_star, window};
    use weir::plan::{DataType, Field, OutputMode};
    use weir::sink::MemorySink;
    use weir::source::MemoryStream;

    let stream = MemoryStream::new(&[Field::new("ts", DataType::Timestamp)]);
    let sink = MemorySink::new("");
    let table = sink.table();
    let q = crate::common::session()
        .read_stream(stream.clone())
        .group_by(vec![window("ts", "10 seconds")])
        .agg(vec![count_star("n")])
        .write_stream()
        .output_mode(OutputMode::Update)
        .sink(sink)
        .start()
        .unwrap();
    let ts = TimestampMicrosecondArray::from(vec![i64::MIN, i64::MAX, 0, 5, i64::MIN + 10_000_000])
        .with_timezone("UTC");
    let batch = RecordBatch::try_new(
        weir::arrow::datatypes::SchemaRef::new(weir::arrow::datatypes::Schema::new(vec![
            weir::arrow::datatypes::Field::new("ts", ts.data_type().clone(), true),
        ])),
        vec![Arc::new(ts)],
    )
    .unwrap();
    stream.add_batch(batch).unwrap();
    q.process_all_available().unwrap();
    assert!(q.is_active(), "{:?}", q.exception());
    // [0, 10 s) holds 0 and 5; i64::MIN + 10 s is in a representable
    // window (10 s windows start at multiples of 10 000 000 µs); i64::MIN's
    // and i64::MAX's windows are not.
    let counts: Vec<i64> = table
        .rows()
        .iter()
        .flat_map(|b| {
            let n = b.column_by_name("n").unwrap();
            n.as_any()
                .downcast_ref::<weir::arrow::array::Int64Array>()
                .unwrap()
                .values()
                .to_vec()
        })
        .collect();
    let mut sorted = counts.clone();
    sorted.sort();
    assert_eq!(sorted, vec![1, 2], "{counts:?}");
    let p = q.last_progress().unwrap();
    assert_eq!(
        p.state_operators[0].custom_metrics["numRowsOutsideRepresentableWindows"],
        2
    );
    q.stop().unwrap();
}
