//! Spark's further aggregate functions on streams (approx_count_distinct,
//! first, last, stddev/variance, collect_list/collect_set): results micro-batch by micro-batch in
//! update, append and complete mode, across a restart from the checkpoint
//! (memory and RocksDB state stores), over 1 and 3 state partitions, read
//! back with `weir::state::read`, and declared with `stream_query!`.

use serde_json::{json, Value};
use weir::functions::{
    approx_count_distinct, approx_count_distinct_rsd, col, collect_list, collect_set, first, last,
    last_ignore_nulls, stddev, var_pop, window,
};
use weir::plan::OutputMode;
use weir::sink::MemorySink;
use weir::source::MemoryStream;
use weir::{Session, SessionConfig};

use crate::common::{fields, iso, rows_json};

/// A session on state store `provider` with `partitions` state partitions
/// (unset: an existing checkpoint keeps its count); batches run when asked.
fn session_with(provider: &str, partitions: Option<usize>) -> Session {
    let mut conf = SessionConfig {
        fsync_checkpoint: false,
        polling_delay: std::time::Duration::from_secs(3600),
        ..SessionConfig::default()
    };
    conf.set("spark.sql.streaming.stateStore.providerClass", provider)
        .unwrap();
    if let Some(p) = partitions {
        conf.set("spark.sql.shuffle.partitions", &p.to_string())
            .unwrap();
    }
    conf.set("weir.workerThreads", "2").unwrap();
    Session::with_config(conf)
}

/// One event: minutes after 12:00, a key, a value (the "user").
fn event(minute: i64, key: &str, value: Option<i64>) -> Value {
    json!({
        "ts": iso(1_704_110_400_000_000 + minute * 60_000_000),
        "key": key,
        "value": value,
    })
}

/// Three micro-batches of events; the third moves the watermark (10
/// minutes behind the latest event) past the first two 10-minute windows.
fn inputs() -> Vec<Vec<Value>> {
    vec![
        vec![
            event(1, "a", Some(1)),
            event(2, "a", Some(3)),
            event(3, "b", Some(5)),
            event(4, "a", None),
        ],
        vec![
            event(5, "a", Some(3)),
            event(6, "b", Some(7)),
            event(12, "a", Some(10)),
        ],
        vec![event(30, "a", Some(20))],
    ]
}

/// The micro-batches a run emitted: (batch id, rows), empty ones left out.
type Batches = Vec<(i64, Vec<Value>)>;

/// A run of a query over inputs (see [`run`]).
type Runner =
    fn(OutputMode, &str, Option<usize>, &[Vec<Value>], &[Vec<Value>], &std::path::Path) -> Batches;

/// Runs `inputs` one micro-batch each through 10-minute windows per key
/// with the new aggregates, on checkpoint `chk`; `before` are rows a run
/// on `chk` already read (added first, without running a batch).
fn run(
    mode: OutputMode,
    provider: &str,
    partitions: Option<usize>,
    before: &[Vec<Value>],
    inputs: &[Vec<Value>],
    chk: &std::path::Path,
) -> Batches {
    let aggs = vec![
        approx_count_distinct("value", "users"),
        first("value", "first"),
        last("value", "last"),
        last_ignore_nulls("value", "last_seen"),
        stddev("value", "sd"),
        var_pop("value", "vp"),
    ];
    run_aggs(aggs, mode, provider, partitions, before, inputs, chk)
}

/// [`run`] with the aggregates `aggs`.
fn run_aggs(
    aggs: Vec<weir::plan::AggSpec>,
    mode: OutputMode,
    provider: &str,
    partitions: Option<usize>,
    before: &[Vec<Value>],
    inputs: &[Vec<Value>],
    chk: &std::path::Path,
) -> Batches {
    let s = session_with(provider, partitions);
    let stream = MemoryStream::new(&fields());
    for input in before {
        stream.add_json(input).unwrap();
    }
    let d = s
        .read_stream(stream.clone())
        .with_watermark("ts", "10 minutes")
        .group_by(vec![window("ts", "10 minutes"), col("key")])
        .agg(aggs);
    let sink = MemorySink::new("");
    let table = sink.table();
    let q = d
        .write_stream()
        .output_mode(mode)
        .sink(sink)
        .checkpoint_location(chk.to_str().unwrap())
        .start()
        .unwrap();
    q.process_all_available().unwrap();
    for input in inputs {
        stream.add_json(input).unwrap();
        q.process_all_available().unwrap();
    }
    q.stop().unwrap();
    assert!(q.exception().is_none(), "{:?}", q.exception());
    let mut out: Batches = table
        .batches()
        .into_iter()
        .map(|(id, b)| (id, list_rows_json(&b).into_iter().map(rounded).collect()))
        .filter(|(_, rows): &(i64, Vec<Value>)| !rows.is_empty())
        .collect();
    out.sort_by_key(|(id, _)| *id);
    out
}

/// Floats rounded to 12 digits (the expected values are written as decimals).
fn rounded(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.into_iter().map(|(k, v)| (k, rounded(v))).collect()),
        Value::Number(n) if n.is_f64() => {
            json!((n.as_f64().unwrap() * 1e12).round() / 1e12)
        }
        v => v,
    }
}

/// An output row: the window starting `start` minutes after 12:00, the key
/// and the aggregates.
#[allow(clippy::too_many_arguments)]
fn row(
    start: i64,
    key: &str,
    users: i64,
    first: i64,
    last: Option<i64>,
    last_seen: i64,
    sd: Option<f64>,
    vp: f64,
) -> Value {
    let at = |m: i64| iso(1_704_110_400_000_000 + m * 60_000_000);
    rounded(json!({
        "window": { "start": at(start), "end": at(start + 10) },
        "key": key,
        "users": users,
        "first": first,
        "last": last,
        "last_seen": last_seen,
        "sd": sd,
        "vp": vp,
    }))
}

/// The groups as each batch leaves them (Spark's results: `stddev` of one
/// value is null, `var_pop` 0.0; `last` counts the null row, `last(.., true)`
/// skips it; `first`/`last` in arrival order; exact distinct counts this small).
fn group_states() -> [Vec<Value>; 3] {
    let a0 = row(0, "a", 2, 1, None, 3, Some(2f64.sqrt()), 1.0);
    let b0 = row(0, "b", 1, 5, Some(5), 5, None, 0.0);
    // a: 1, 3, null, 3 (mean 7/3, squared deviations 8/3); b: 5, 7.
    let a1 = row(
        0,
        "a",
        2,
        1,
        Some(3),
        3,
        Some((4.0f64 / 3.0).sqrt()),
        8.0 / 9.0,
    );
    let b1 = row(0, "b", 2, 5, Some(7), 7, Some(2f64.sqrt()), 1.0);
    let a10 = row(10, "a", 1, 10, Some(10), 10, None, 0.0);
    let a30 = row(30, "a", 1, 20, Some(20), 20, None, 0.0);
    [vec![a0, b0], vec![a1, b1, a10.clone()], vec![a30]]
}

#[test]
fn update_mode_emits_the_changed_groups_batch_by_batch() {
    let chk = tempfile::tempdir().unwrap();
    let [b0, b1, b2] = group_states();
    let got = run(
        OutputMode::Update,
        "memory",
        Some(1),
        &[],
        &inputs(),
        chk.path(),
    );
    // Each data batch moves the watermark, so a batch without data
    // follows it (Spark's no-data batch; it evicts, emitting nothing here).
    assert_eq!(got, vec![(0, b0), (2, b1), (4, b2)]);
}

#[test]
fn append_mode_emits_each_window_once_when_the_watermark_closes_it() {
    let chk = tempfile::tempdir().unwrap();
    let [_, b1, _] = group_states();
    let got = run(
        OutputMode::Append,
        "memory",
        Some(1),
        &[],
        &inputs(),
        chk.path(),
    );
    // The third input (batch 4) moves the watermark to 12:20; the batch
    // after it (with no new data) closes [12:00, 12:10) and [12:10, 12:20).
    assert_eq!(got, vec![(5, b1)]);
}

#[test]
fn complete_mode_emits_every_group_every_batch() {
    let chk = tempfile::tempdir().unwrap();
    let [b0, b1, b2] = group_states();
    let got = run(
        OutputMode::Complete,
        "memory",
        Some(1),
        &[],
        &inputs(),
        chk.path(),
    );
    let mut all = b1.clone();
    all.extend(b2);
    assert_eq!(got, vec![(0, b0), (1, b1), (2, all)]);
}

/// A run stopped after two batches and restarted on its checkpoint emits
/// what one uninterrupted run emits: the sketches, first/last and moments
/// come back from the state store.
fn restart_equals_one_run(provider: &str) {
    restart_equals_one_run_of(run, &inputs(), provider)
}

/// The runs of [`restart_equals_one_run`] by `run` (a [`run`] or
/// [`run_collect`]) over `input`.
fn restart_equals_one_run_of(run: Runner, input: &[Vec<Value>], provider: &str) {
    for mode in [OutputMode::Update, OutputMode::Append, OutputMode::Complete] {
        let whole = tempfile::tempdir().unwrap();
        let expected = run(mode, provider, Some(3), &[], input, whole.path());
        let chk = tempfile::tempdir().unwrap();
        let mut got = run(mode, provider, Some(3), &[], &input[..2], chk.path());
        got.extend(run(
            mode,
            provider,
            None,
            &input[..2],
            &input[2..],
            chk.path(),
        ));
        assert_eq!(got, expected, "{mode:?} on {provider}");
    }
}

#[test]
fn a_restart_from_the_checkpoint_continues_every_aggregate_on_memory() {
    restart_equals_one_run("memory");
}

#[cfg(feature = "rocksdb")]
#[test]
fn a_restart_from_the_checkpoint_continues_every_aggregate_on_rocksdb() {
    restart_equals_one_run("rocksdb");
}

#[test]
fn one_and_three_state_partitions_give_the_same_batches() {
    for mode in [OutputMode::Update, OutputMode::Append, OutputMode::Complete] {
        let (c1, c3) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let one = run(mode, "memory", Some(1), &[], &inputs(), c1.path());
        let three = run(mode, "memory", Some(3), &[], &inputs(), c3.path());
        assert_eq!(one, three, "{mode:?}");
    }
}

/// Sessions that a later event bridges merge their accumulators in
/// session (event-time) order: `first` is the earlier session's, `last`
/// the later one's, the sketches and moments add up; append mode emits the
/// merged session once the watermark passes its end.
#[test]
fn merged_session_windows_merge_every_aggregate() {
    let chk = tempfile::tempdir().unwrap();
    let s = session_with("memory", Some(3));
    let stream = MemoryStream::new(&fields());
    let sink = MemorySink::new("");
    let table = sink.table();
    let q = s
        .read_stream(stream.clone())
        .with_watermark("ts", "10 minutes")
        .group_by(vec![
            weir::functions::session_window("ts", "5 minutes"),
            col("key"),
        ])
        .agg(vec![
            approx_count_distinct("value", "users"),
            first("value", "first"),
            last("value", "last"),
            stddev("value", "sd"),
            var_pop("value", "vp"),
        ])
        .write_stream()
        .output_mode(OutputMode::Append)
        .sink(sink)
        .checkpoint_location(chk.path().to_str().unwrap())
        .start()
        .unwrap();
    // Two sessions, [12:01, 12:06) and [12:09, 12:14); then 12:05 bridges them.
    for input in [
        vec![event(1, "a", Some(1)), event(9, "a", Some(3))],
        vec![event(5, "a", Some(2))],
        vec![event(40, "b", Some(9))],
    ] {
        stream.add_json(&input).unwrap();
        q.process_all_available().unwrap();
    }
    q.stop().unwrap();
    let rows: Vec<Value> = table
        .batches()
        .into_iter()
        .flat_map(|(_, b)| rows_json(&b))
        .map(rounded)
        .collect();
    let at = |m: i64| iso(1_704_110_400_000_000 + m * 60_000_000);
    assert_eq!(
        rows,
        vec![rounded(json!({
            "session_window": { "start": at(1), "end": at(14) },
            "key": "a",
            "users": 3,
            "first": 1,
            "last": 3,
            "sd": 1.0,
            "vp": 2.0 / 3.0,
        }))]
    );
}

/// The keys of [`distinct_users`]: enough to fall in every one of 3 state
/// partitions.
const USER_KEYS: i64 = 6;

/// New users per key in each batch of [`distinct_users`].
const NEW_USERS: i64 = 12_000;

/// Runs `approx_count_distinct` (default rsd and 0.01) per key over three
/// batches: in batch `k` key `g` of the [`USER_KEYS`] gets the users
/// `k * NEW_USERS .. (k + 1) * NEW_USERS` (as ids `user * 6 + g`) plus
/// repeats of its first 1000, keys interleaved row by row, so each batch's
/// 78,000 rows make three tasks whose sketches of every key are merged.
/// Returns each batch's (key, estimate, fine estimate), by key.
fn distinct_users(partitions: usize) -> Vec<Vec<(String, i64, i64)>> {
    let chk = tempfile::tempdir().unwrap();
    let s = session_with("memory", Some(partitions));
    let stream = MemoryStream::new(&fields());
    let sink = MemorySink::new("");
    let table = sink.table();
    let q = s
        .read_stream(stream.clone())
        .group_by(vec![col("key")])
        .agg(vec![
            approx_count_distinct("value", "users"),
            approx_count_distinct_rsd("value", 0.01, "users_fine").unwrap(),
        ])
        .write_stream()
        .output_mode(OutputMode::Update)
        .sink(sink)
        .checkpoint_location(chk.path().to_str().unwrap())
        .start()
        .unwrap();
    let mut out = Vec::new();
    for k in 0..3i64 {
        let rows: Vec<Value> = (k * NEW_USERS..(k + 1) * NEW_USERS)
            .chain(0..1000)
            .flat_map(|u| {
                (0..USER_KEYS)
                    .map(move |g| event(u % 60, &format!("k{g}"), Some(u * USER_KEYS + g)))
            })
            .collect();
        assert!(rows.len() > 2 * 32 * 1024, "the batch makes 3 tasks");
        stream.add_json(&rows).unwrap();
        q.process_all_available().unwrap();
        let last = q.last_progress().unwrap().batch_id;
        let batch = table.batches().into_iter().find(|(id, _)| *id == last);
        let mut rows: Vec<(String, i64, i64)> = rows_json(&batch.expect("the batch's output").1)
            .iter()
            .map(|r| {
                (
                    r["key"].as_str().unwrap().to_string(),
                    r["users"].as_i64().unwrap(),
                    r["users_fine"].as_i64().unwrap(),
                )
            })
            .collect();
        rows.sort();
        out.push(rows);
    }
    q.stop().unwrap();
    out
}

#[test]
fn approx_count_distinct_stays_within_its_error_and_merges_across_batches_and_partitions() {
    let one = distinct_users(1);
    for (k, rows) in one.iter().enumerate() {
        assert_eq!(rows.len(), USER_KEYS as usize, "batch {k}: {rows:?}");
        let n = (NEW_USERS * (k as i64 + 1)) as f64;
        let err = |e: i64| (e as f64 - n).abs() / n;
        for (key, users, fine) in rows {
            assert!(
                err(*users) <= 3.0 * 0.05,
                "batch {k}, {key}: {users} for {n}"
            );
            assert!(err(*fine) <= 3.0 * 0.01, "batch {k}, {key}: {fine} for {n}");
        }
    }
    // Merging sketches is their union: any split gives the same sketch.
    assert_eq!(distinct_users(3), one);
}

#[test]
fn the_state_reads_back_as_the_query_emits_it() {
    let chk = tempfile::tempdir().unwrap();
    let got = run(
        OutputMode::Update,
        "memory",
        Some(3),
        &[],
        &inputs()[..2],
        chk.path(),
    );
    let state = weir::state::read::read(chk.path().to_str().unwrap(), 0, None).unwrap();
    let store = state.store("default").unwrap();
    let mut values: Vec<Value> = Vec::new();
    for b in &store.batches {
        let key = b.column_by_name("key").unwrap();
        let value = b.column_by_name("value").unwrap();
        let flat = |a: &std::sync::Arc<dyn weir::arrow::array::Array>| {
            let s = weir::arrow::array::AsArray::as_struct(a.as_ref());
            let fields: Vec<_> = s.fields().iter().map(|f| f.as_ref().clone()).collect();
            (fields, s.columns().to_vec())
        };
        let (mut f, mut c) = flat(key);
        let (vf, vc) = flat(value);
        f.extend(vf);
        c.extend(vc);
        let batch = weir::arrow::record_batch::RecordBatch::try_new(
            std::sync::Arc::new(weir::arrow::datatypes::Schema::new(f)),
            c,
        )
        .unwrap();
        values.extend(rows_json(&[batch]).into_iter().map(rounded));
    }
    values.sort_by_key(|v| v.to_string());
    let mut expected = got[1].1.clone();
    expected.sort_by_key(|v| v.to_string());
    assert_eq!(values, expected);
}

/// The builder refuses at `start()` what `stream_query!` refuses at
/// compile time, with the same message and help; a bad rsd is refused when
/// the aggregate is built.
#[test]
fn the_builder_refuses_the_same_types_and_arguments() {
    let s = session_with("memory", Some(1));
    let stream = MemoryStream::new(&fields());
    let started = s
        .read_stream(stream)
        .group_by(vec![col("key")])
        .agg(vec![stddev("key", "sd"), first("value", "f")])
        .write_stream()
        .output_mode(OutputMode::Complete)
        .sink(MemorySink::new(""))
        .start();
    let Err(weir::WeirError::Invalid(v)) = started else {
        panic!("stddev of a string column started");
    };
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(
        v[0].message,
        "stddev_samp(key) is not defined on string columns"
    );
    assert_eq!(
        v[0].help.as_deref(),
        Some("stddev and variance (stddev_samp, stddev_pop, var_samp, var_pop) take int32, int64 or float64 columns")
    );
    let err = approx_count_distinct_rsd("value", 0.5, "u").unwrap_err();
    assert!(
        err.to_string()
            .contains("must be between 0.01 and 0.39 (got 0.5)"),
        "{err}"
    );
}

weir::stream_query! {
    /// Distinct users, first and last page and the spread of load times per page.
    query PageStats {
        source: memory,
        schema: Visit { user: String, page: String, ms: i64 },
        group_by: [page],
        aggregate: {
            users: approx_count_distinct(user),
            fine: approx_count_distinct(user, 0.01),
            first_user: first(user),
            last_user: last_value(user, true),
            spread: stddev(ms),
            var: variance(ms),
        },
        output_mode: complete,
        sink: memory(name = "page_stats"),
    }
}

#[test]
fn stream_query_declares_the_new_aggregates_with_typed_results() {
    use weir::Row;
    assert!(weir::plan::check(&PageStats::plan()).is_empty());
    let session = Session::new();
    let stream = MemoryStream::of::<Visit>();
    let q = PageStats::writer_from(&session, Box::new(stream.clone()))
        .unwrap()
        .start()
        .unwrap();
    let visit = |user: &str, page: &str, ms| Visit {
        user: user.into(),
        page: page.into(),
        ms,
    };
    stream
        .add_rows(&[
            visit("ann", "/", 10),
            visit("bob", "/", 30),
            visit("ann", "/", 20),
            visit("cy", "/about", 5),
        ])
        .unwrap();
    q.process_all_available().unwrap();
    let table = session.memory_table("page_stats").unwrap();
    q.stop().unwrap();
    let mut rows: Vec<PageStatsRow> = table
        .rows()
        .iter()
        .flat_map(|b| PageStatsRow::from_batch(b).unwrap())
        .collect();
    rows.sort_by(|a, b| a.page.cmp(&b.page));
    assert_eq!(
        rows,
        vec![
            PageStatsRow {
                page: "/".into(),
                users: 2,
                fine: 2,
                first_user: Some("ann".into()),
                last_user: Some("ann".into()),
                spread: Some(10.0),
                var: Some(100.0),
            },
            PageStatsRow {
                page: "/about".into(),
                users: 1,
                fine: 1,
                first_user: Some("cy".into()),
                last_user: Some("cy".into()),
                spread: None,
                var: None,
            },
        ]
    );
}

/// Rows as JSON, array columns as JSON arrays (`common::rows_json` prints
/// the other types).
fn list_rows_json(batches: &[weir::arrow::record_batch::RecordBatch]) -> Vec<Value> {
    use weir::arrow::array::{Array, AsArray};
    use weir::arrow::datatypes::DataType as ArrowType;
    let mut out = rows_json(batches);
    let mut at = 0;
    for b in batches {
        for i in 0..b.num_rows() {
            for (f, c) in b.schema().fields().iter().zip(b.columns()) {
                if !matches!(f.data_type(), ArrowType::List(_)) || c.is_null(i) {
                    continue;
                }
                let items = c.as_list::<i32>().value(i);
                let items: Vec<Value> = (0..items.len())
                    .map(|j| crate::common::cell_json(items.as_ref(), j))
                    .collect();
                out[at][f.name()] = Value::Array(items);
            }
            at += 1;
        }
    }
    out
}

/// The collect inputs: [`inputs`] and a key `c` whose only value is null.
fn collect_inputs() -> Vec<Vec<Value>> {
    let mut i = inputs();
    i[0].push(event(7, "c", None));
    i
}

/// Runs `collect_list` and `collect_set` of `value` per 10-minute window
/// and key over [`collect_inputs`] (see [`run`]).
fn run_collect(
    mode: OutputMode,
    provider: &str,
    partitions: Option<usize>,
    before: &[Vec<Value>],
    inputs: &[Vec<Value>],
    chk: &std::path::Path,
) -> Batches {
    let aggs = vec![
        collect_list("value", "values"),
        collect_set("value", "distinct"),
    ];
    run_aggs(aggs, mode, provider, partitions, before, inputs, chk)
}

/// A collect output row: the window starting `start` minutes after 12:00,
/// the key, the list and the set.
fn collected(start: i64, key: &str, values: &[i64], distinct: &[i64]) -> Value {
    let at = |m: i64| iso(1_704_110_400_000_000 + m * 60_000_000);
    json!({
        "window": { "start": at(start), "end": at(start + 10) },
        "key": key,
        "values": values,
        "distinct": distinct,
    })
}

/// The collected groups as each batch leaves them: nulls skipped (a group
/// of nulls is an empty array), lists in arrival order, sets in first
/// arrival order.
fn collected_states() -> [Vec<Value>; 3] {
    [
        vec![
            collected(0, "a", &[1, 3], &[1, 3]),
            collected(0, "b", &[5], &[5]),
            collected(0, "c", &[], &[]),
        ],
        vec![
            collected(0, "a", &[1, 3, 3], &[1, 3]),
            collected(0, "b", &[5, 7], &[5, 7]),
            collected(10, "a", &[10], &[10]),
        ],
        vec![collected(30, "a", &[20], &[20])],
    ]
}

#[test]
fn collect_list_and_collect_set_emit_arrays_batch_by_batch_in_every_mode() {
    let [b0, b1, b2] = collected_states();
    let (c0, c1, c2) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let input = collect_inputs();
    let update = run_collect(
        OutputMode::Update,
        "memory",
        Some(1),
        &[],
        &input,
        c0.path(),
    );
    assert_eq!(
        update,
        vec![(0, b0.clone()), (2, b1.clone()), (4, b2.clone())]
    );
    let append = run_collect(
        OutputMode::Append,
        "memory",
        Some(1),
        &[],
        &input,
        c1.path(),
    );
    let mut closed = b1.clone();
    closed.insert(2, b0[2].clone());
    assert_eq!(append, vec![(5, closed.clone())]);
    let complete = run_collect(
        OutputMode::Complete,
        "memory",
        Some(1),
        &[],
        &input,
        c2.path(),
    );
    let mut all = closed;
    all.extend(b2);
    assert_eq!(complete[2], (2, all));
}

/// A run stopped after two batches and restarted on its checkpoint emits
/// what one uninterrupted run emits: the arrays come back from the state
/// store.
fn collect_restart_equals_one_run(provider: &str) {
    restart_equals_one_run_of(run_collect, &collect_inputs(), provider)
}

#[test]
fn a_restart_continues_collect_list_and_collect_set_on_memory() {
    collect_restart_equals_one_run("memory");
}

#[cfg(feature = "rocksdb")]
#[test]
fn a_restart_continues_collect_list_and_collect_set_on_rocksdb() {
    collect_restart_equals_one_run("rocksdb");
}

/// One and three state partitions collect the same values (compared as
/// sorted arrays: Spark promises no order) for many keys over many
/// batches, and the same arrays in arrival order.
#[test]
fn one_and_three_state_partitions_collect_the_same_values() {
    let input: Vec<Vec<Value>> = (0..4)
        .map(|b| {
            (0..300)
                .map(|i| {
                    let v = (b * 300 + i) % 97;
                    event(b * 5 + i % 5, &format!("k{}", i % 23), Some(v))
                })
                .collect()
        })
        .collect();
    let sorted = |batches: Batches| -> Vec<Vec<Value>> {
        batches
            .into_iter()
            .map(|(_, rows)| {
                let mut rows: Vec<Value> = rows
                    .into_iter()
                    .map(|mut r| {
                        for c in ["values", "distinct"] {
                            let mut a = r[c].as_array().unwrap().clone();
                            a.sort_by_key(|v| v.as_i64());
                            r[c] = Value::Array(a);
                        }
                        r
                    })
                    .collect();
                rows.sort_by_key(|r| r.to_string());
                rows
            })
            .collect()
    };
    for mode in [OutputMode::Update, OutputMode::Complete] {
        let (c1, c3) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let one = run_collect(mode, "memory", Some(1), &[], &input, c1.path());
        let three = run_collect(mode, "memory", Some(3), &[], &input, c3.path());
        assert!(!one.is_empty());
        assert_eq!(sorted(one.clone()), sorted(three.clone()), "{mode:?}");
        assert_eq!(one, three, "{mode:?}: arrival order");
    }
}

/// A group passing the bound (10,000 values by default) fails the query
/// with a message naming the aggregate, the group and what to do; the
/// other groups and a group at the bound are fine.
#[test]
fn a_group_past_the_collect_bound_fails_the_query_naming_it() {
    let chk = tempfile::tempdir().unwrap();
    let s = session_with("memory", Some(2));
    let stream = MemoryStream::new(&fields());
    let q = s
        .read_stream(stream.clone())
        .group_by(vec![col("key")])
        .agg(vec![
            collect_set("value", "distinct"),
            collect_list("value", "values"),
        ])
        .write_stream()
        .output_mode(OutputMode::Update)
        .sink(MemorySink::new(""))
        .checkpoint_location(chk.path().to_str().unwrap())
        .start()
        .unwrap();
    let rows = |key: &str, n: i64| -> Vec<Value> {
        (0..n).map(|i| event(i % 60, key, Some(i % 7))).collect()
    };
    stream.add_json(&rows("full", 10_000)).unwrap();
    q.process_all_available().unwrap();
    stream.add_json(&rows("other", 10)).unwrap();
    stream.add_json(&rows("full", 1)).unwrap();
    let err = q.process_all_available().unwrap_err().to_string();
    for part in [
        "collect_list(value) AS values",
        "key=full",
        "collect_list keeps at most 10000 values per group",
        "spark.sql.streaming.weir.collectMaxValues",
    ] {
        assert!(err.contains(part), "{part:?} not in {err}");
    }
    assert!(q.exception().is_some());
}

/// The state of collected arrays reads back with `weir::state::read` as
/// the query emits it.
#[test]
fn collected_state_reads_back_as_the_query_emits_it() {
    let chk = tempfile::tempdir().unwrap();
    let input = collect_inputs();
    let got = run_collect(
        OutputMode::Update,
        "memory",
        Some(3),
        &[],
        &input[..2],
        chk.path(),
    );
    let state = weir::state::read::read(chk.path().to_str().unwrap(), 0, None).unwrap();
    let store = state.store("default").unwrap();
    let mut values: Vec<Value> = Vec::new();
    for b in &store.batches {
        let mut f = Vec::new();
        let mut c = Vec::new();
        for part in ["key", "value"] {
            let s =
                weir::arrow::array::AsArray::as_struct(b.column_by_name(part).unwrap().as_ref());
            f.extend(s.fields().iter().map(|f| f.as_ref().clone()));
            c.extend(s.columns().iter().cloned());
        }
        let batch = weir::arrow::record_batch::RecordBatch::try_new(
            std::sync::Arc::new(weir::arrow::datatypes::Schema::new(f)),
            c,
        )
        .unwrap();
        values.extend(list_rows_json(&[batch]));
    }
    values.sort_by_key(|v| v.to_string());
    // The state holds every group: batch 1's and c's from batch 0.
    let [b0, b1, _] = collected_states();
    let mut expected = b1;
    expected.push(b0[2].clone());
    expected.sort_by_key(|v| v.to_string());
    assert_eq!(got[1].1.len(), 3);
    assert_eq!(values, expected);
}

weir::stream_query! {
    /// Every page a user visited, in order, and the distinct ones.
    query UserPaths {
        source: memory,
        schema: Click { user: String, page: String, ms: Option<i64> },
        group_by: [user],
        aggregate: {
            pages: collect_list(page),
            distinct_pages: collect_set(page),
            times: array_agg(ms),
        },
        output_mode: complete,
        sink: memory(name = "user_paths"),
    }
}

#[test]
fn stream_query_collects_into_vec_fields() {
    use weir::Row;
    assert!(weir::plan::check(&UserPaths::plan()).is_empty());
    let session = Session::new();
    let stream = MemoryStream::of::<Click>();
    let q = UserPaths::writer_from(&session, Box::new(stream.clone()))
        .unwrap()
        .start()
        .unwrap();
    let click = |user: &str, page: &str, ms| Click {
        user: user.into(),
        page: page.into(),
        ms,
    };
    stream
        .add_rows(&[
            click("ann", "/", Some(10)),
            click("bob", "/", None),
            click("ann", "/about", None),
            click("ann", "/", Some(30)),
        ])
        .unwrap();
    q.process_all_available().unwrap();
    let table = session.memory_table("user_paths").unwrap();
    q.stop().unwrap();
    let mut rows: Vec<UserPathsRow> = table
        .rows()
        .iter()
        .flat_map(|b| UserPathsRow::from_batch(b).unwrap())
        .collect();
    rows.sort_by(|a, b| a.user.cmp(&b.user));
    // Typed: `pages: Vec<String>`, `times: Vec<i64>` (never null).
    let pages: &Vec<String> = &rows[0].pages;
    assert_eq!(pages, &["/", "/about", "/"]);
    assert_eq!(
        rows,
        vec![
            UserPathsRow {
                user: "ann".into(),
                pages: vec!["/".into(), "/about".into(), "/".into()],
                distinct_pages: vec!["/".into(), "/about".into()],
                times: vec![10, 30],
            },
            UserPathsRow {
                user: "bob".into(),
                pages: vec!["/".into()],
                distinct_pages: vec!["/".into()],
                times: vec![],
            },
        ]
    );
}

/// Sessions that a later event bridges concatenate their lists in session
/// order (the earlier session's values first) and union their sets.
#[test]
fn merged_session_windows_concatenate_collected_values() {
    let chk = tempfile::tempdir().unwrap();
    let s = session_with("memory", Some(3));
    let stream = MemoryStream::new(&fields());
    let sink = MemorySink::new("");
    let table = sink.table();
    let q = s
        .read_stream(stream.clone())
        .with_watermark("ts", "10 minutes")
        .group_by(vec![
            weir::functions::session_window("ts", "5 minutes"),
            col("key"),
        ])
        .agg(vec![
            collect_list("value", "values"),
            collect_set("value", "distinct"),
        ])
        .write_stream()
        .output_mode(OutputMode::Append)
        .sink(sink)
        .checkpoint_location(chk.path().to_str().unwrap())
        .start()
        .unwrap();
    // Two sessions, [12:01, 12:06) and [12:09, 12:14); then 12:05 bridges them.
    for input in [
        vec![event(1, "a", Some(1)), event(9, "a", Some(3))],
        vec![event(5, "a", Some(1)), event(10, "a", None)],
        vec![event(40, "b", Some(9))],
    ] {
        stream.add_json(&input).unwrap();
        q.process_all_available().unwrap();
    }
    q.stop().unwrap();
    let rows: Vec<Value> = table
        .batches()
        .into_iter()
        .flat_map(|(_, b)| list_rows_json(&b))
        .collect();
    let at = |m: i64| iso(1_704_110_400_000_000 + m * 60_000_000);
    assert_eq!(
        rows,
        vec![json!({
            "session_window": { "start": at(1), "end": at(15) },
            "key": "a",
            "values": [1, 1, 3],
            "distinct": [1, 3],
        })]
    );
}

/// `spark.sql.streaming.weir.collectMaxValues` bounds what one group may
/// collect, in a windowed aggregation and in session windows alike.
#[test]
fn the_session_setting_bounds_what_a_group_collects() {
    for session_windows in [false, true] {
        let chk = tempfile::tempdir().unwrap();
        let s = session_with("memory", Some(2));
        let mut conf = s.conf().clone();
        conf.set("spark.sql.streaming.weir.collectMaxValues", "3")
            .unwrap();
        let s = Session::with_config(conf);
        let stream = MemoryStream::new(&fields());
        let key = if session_windows {
            weir::functions::session_window("ts", "5 minutes")
        } else {
            window("ts", "1 hour")
        };
        let q = s
            .read_stream(stream.clone())
            .with_watermark("ts", "1 hour")
            .group_by(vec![key, col("key")])
            .agg(vec![collect_list("value", "values")])
            .write_stream()
            .output_mode(OutputMode::Append)
            .sink(MemorySink::new(""))
            .checkpoint_location(chk.path().to_str().unwrap())
            .start()
            .unwrap();
        let three: Vec<Value> = (0..3).map(|i| event(i, "k", Some(i))).collect();
        stream.add_json(&three).unwrap();
        q.process_all_available()
            .unwrap_or_else(|e| panic!("three values fit a bound of 3: {e}"));
        stream.add_json(&[event(3, "k", Some(3))]).unwrap();
        let err = q.process_all_available().unwrap_err().to_string();
        for part in [
            "collect_list keeps at most 3 values",
            "spark.sql.streaming.weir.collectMaxValues",
        ] {
            assert!(
                err.contains(part),
                "{part:?} not in {err} (session windows: {session_windows})"
            );
        }
    }
}

/// A later batch's event at the same instant as a stored session's start
/// arrived later: first/last and collect_list keep arrival order.
#[test]
fn a_later_event_at_a_stored_sessions_start_time_comes_after_it() {
    let chk = tempfile::tempdir().unwrap();
    let s = session_with("memory", Some(1));
    let stream = MemoryStream::new(&fields());
    let sink = MemorySink::new("");
    let table = sink.table();
    let q = s
        .read_stream(stream.clone())
        .with_watermark("ts", "10 minutes")
        .group_by(vec![
            weir::functions::session_window("ts", "5 minutes"),
            col("key"),
        ])
        .agg(vec![
            first("value", "first"),
            last("value", "last"),
            collect_list("value", "values"),
        ])
        .write_stream()
        .output_mode(OutputMode::Append)
        .sink(sink)
        .checkpoint_location(chk.path().to_str().unwrap())
        .start()
        .unwrap();
    for input in [
        vec![event(1, "a", Some(1))],
        vec![event(1, "a", Some(2))],
        vec![event(40, "b", Some(9))],
    ] {
        stream.add_json(&input).unwrap();
        q.process_all_available().unwrap();
    }
    q.stop().unwrap();
    let rows: Vec<Value> = table
        .batches()
        .into_iter()
        .flat_map(|(_, b)| list_rows_json(&b))
        .collect();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["first"], json!(1), "{rows:?}");
    assert_eq!(rows[0]["last"], json!(2), "{rows:?}");
    assert_eq!(rows[0]["values"], json!([1, 2]), "{rows:?}");
}
