//! The PostgreSQL and Redis sinks against real servers (features `postgres`
//! and `redis`): upserts in update mode, replacement in complete mode, a
//! replayed batch written once, a server that is down failing the query
//! with a clear error, names that need quoting or escaping, a held lock
//! failing a batch within the lock timeout, and a batch larger than a chunk.
//!
//! The servers come from `WEIR_POSTGRES_URL` and `WEIR_REDIS_URL`; start
//! throwaway ones with `eval "$(bash scripts/services.sh start)"`. A test
//! whose variable is unset fails (it does not skip) and says so.

use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::json;
use weir::functions::{col, count_star, window};
use weir::plan::{DataType, Field, OutputMode};
use weir::sink::BoxSink;
use weir::source::{FileFormat, FileSource, MemoryStream};
use weir::{Session, SessionConfig, StreamingQuery};

fn env_url(var: &str, what: &str) -> String {
    match std::env::var(var) {
        Ok(v) if !v.trim().is_empty() => v,
        _ => panic!(
            "{var} is not set: these tests need a real {what} server. Start throwaway ones with \
             `eval \"$(bash scripts/services.sh start)\"` (it installs PostgreSQL and redis-server \
             from Debian's packages if missing and prints the export lines), then run the tests again"
        ),
    }
}

/// A name no earlier run or parallel test used.
fn unique(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "weir_{tag}_{}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        nanos % 1_000_000_000
    )
}

fn session() -> Session {
    Session::with_config(SessionConfig {
        fsync_checkpoint: false,
        ..SessionConfig::default()
    })
}

fn clicks() -> Vec<Field> {
    vec![
        Field::new("ts", DataType::Timestamp),
        Field::new("page", DataType::String),
    ]
}

fn click(ts: &str, page: &str) -> serde_json::Value {
    json!({"ts": format!("2024-01-01T{ts}Z"), "page": page})
}

/// Page views per 1-minute window, update mode (the seed's job).
fn page_views(chk: &Path, sink: BoxSink) -> (MemoryStream, StreamingQuery) {
    let stream = MemoryStream::new(&clicks());
    let q = session()
        .read_stream(stream.clone())
        .with_watermark("ts", "10 minutes")
        .group_by(vec![window("ts", "1 minute"), col("page")])
        .agg(vec![count_star("views")])
        .write_stream()
        .output_mode(OutputMode::Update)
        .sink(sink)
        .checkpoint_location(chk.to_str().unwrap())
        .start()
        .unwrap();
    (stream, q)
}

/// The page with the most views so far, complete mode (its result can lose a
/// row, so replacement shows).
fn top_page(chk: &Path, sink: BoxSink) -> (MemoryStream, StreamingQuery) {
    let stream = MemoryStream::new(&clicks());
    let q = session()
        .read_stream(stream.clone())
        .group_by(vec![col("page")])
        .agg(vec![count_star("views")])
        .order_by(vec![("views", true)])
        .limit(1)
        .write_stream()
        .output_mode(OutputMode::Complete)
        .sink(sink)
        .checkpoint_location(chk.to_str().unwrap())
        .start()
        .unwrap();
    (stream, q)
}

const FILES: &[&str] = &[
    "{\"ts\":\"2024-01-01T12:00:10Z\",\"page\":\"/home\"}\n{\"ts\":\"2024-01-01T12:00:20Z\",\"page\":\"/about\"}",
    "{\"ts\":\"2024-01-01T12:00:30Z\",\"page\":\"/home\"}",
    "{\"ts\":\"2024-01-01T12:01:10Z\",\"page\":\"/cart\"}\n{\"ts\":\"2024-01-01T12:01:20Z\",\"page\":\"/home\"}",
];

fn write_file(dir: &Path, i: usize) {
    fs::create_dir_all(dir).unwrap();
    let tmp = dir.join(format!(".f{i}.tmp"));
    fs::write(&tmp, FILES[i]).unwrap();
    fs::rename(&tmp, dir.join(format!("f{i}.json"))).unwrap();
}

/// Every click as it comes (append mode, no state): a plain insert per row,
/// which a replay would duplicate without the sink's batch-id guard. One file
/// per batch; returns the id of the last batch.
fn run_clicks(
    input: &Path,
    chk: &Path,
    sink: impl Fn() -> BoxSink,
    files: std::ops::Range<usize>,
) -> Vec<i64> {
    // The input directory exists before the query starts (as Spark requires).
    fs::create_dir_all(input).unwrap();
    let q = session()
        .read_stream(FileSource::new(input, FileFormat::Json, clicks()).max_files_per_trigger(1))
        .write_stream()
        .output_mode(OutputMode::Append)
        .sink(sink())
        .checkpoint_location(chk.to_str().unwrap())
        .start()
        .unwrap();
    q.process_all_available().unwrap();
    for i in files {
        write_file(input, i);
        q.process_all_available().unwrap();
    }
    let batches = q
        .recent_progress()
        .iter()
        .filter(|p| p.num_input_rows > 0)
        .map(|p| p.batch_id)
        .collect();
    q.stop().unwrap();
    assert!(q.exception().is_none(), "{:?}", q.exception());
    batches
}

/// Deletes `commits/N` of the last batch (a crash after the sink wrote it but
/// before the commit log), restarts, and checks that the batch re-ran.
fn replay_last_batch(input: &Path, chk: &Path, sink: impl Fn() -> BoxSink, last: i64) {
    fs::remove_file(chk.join("commits").join(last.to_string())).unwrap();
    let q = session()
        .read_stream(FileSource::new(input, FileFormat::Json, clicks()).max_files_per_trigger(1))
        .write_stream()
        .output_mode(OutputMode::Append)
        .sink(sink())
        .checkpoint_location(chk.to_str().unwrap())
        .start()
        .unwrap();
    q.process_all_available().unwrap();
    let rerun = q.recent_progress();
    q.stop().unwrap();
    assert!(q.exception().is_none(), "{:?}", q.exception());
    assert_eq!(rerun.first().map(|p| p.batch_id), Some(last), "{rerun:?}");
    assert!(
        rerun[0].num_input_rows > 0,
        "the re-run batch read its rows again"
    );
}

/// Every row as it comes (append mode, no state) from a memory stream of
/// `fields`.
fn rows_as_they_come(
    chk: &Path,
    fields: &[Field],
    sink: BoxSink,
) -> (MemoryStream, StreamingQuery) {
    let stream = MemoryStream::new(fields);
    let q = session()
        .read_stream(stream.clone())
        .write_stream()
        .output_mode(OutputMode::Append)
        .sink(sink)
        .checkpoint_location(chk.to_str().unwrap())
        .start()
        .unwrap();
    (stream, q)
}

/// A port on 127.0.0.1 that nothing listens on.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Starts a query whose sink cannot reach its server, feeds it a row, and
/// returns the error `await_termination` gives.
fn error_of_a_query_with(sink: BoxSink) -> String {
    let chk = tempfile::tempdir().unwrap();
    let (stream, q) = page_views(chk.path(), sink);
    stream.add_json(&[click("12:00:10", "/home")]).unwrap();
    let err = q
        .await_termination(Some(Duration::from_secs(60)))
        .expect_err("the query fails");
    assert!(!q.is_active());
    err.to_string()
}

#[cfg(feature = "postgres")]
mod postgres {
    use weir::sink::postgres::client::{Client, NoTls};
    use weir::sink::PostgresSink;

    use super::*;

    fn url() -> String {
        env_url("WEIR_POSTGRES_URL", "PostgreSQL")
    }

    fn client() -> Client {
        Client::connect(&url(), NoTls).unwrap()
    }

    /// `(window start HH:MM, page, views)` ordered.
    fn page_view_rows(c: &mut Client, table: &str) -> Vec<(String, String, i64)> {
        c.query(
            &format!(
                "SELECT to_char(window_start AT TIME ZONE 'UTC', 'HH24:MI'), \
                 to_char(window_end AT TIME ZONE 'UTC', 'HH24:MI'), page, views \
                 FROM {table} ORDER BY 1, 3"
            ),
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| {
            let (start, end): (String, String) = (r.get(0), r.get(1));
            assert_eq!(
                end,
                format!(
                    "{}:{:02}",
                    &start[..2],
                    start[3..].parse::<u32>().unwrap() + 1
                )
            );
            (start, r.get(2), r.get(3))
        })
        .collect()
    }

    fn recorded_batch(c: &mut Client, table: &str) -> Option<i64> {
        c.query_opt(
            "SELECT batch_id FROM weir_sink_commits WHERE sink = $1",
            &[&table],
        )
        .unwrap()
        .map(|r| r.get(0))
    }

    /// The URL with `application_name` set, so a test can find the sink's session.
    fn url_named(name: &str) -> String {
        let u = url();
        if !u.contains("://") {
            format!("{u} application_name={name}")
        } else if u.contains('?') {
            format!("{u}&application_name={name}")
        } else {
            format!("{u}?application_name={name}")
        }
    }

    weir::stream_query! {
        /// Page views to PostgreSQL, declared: the server from the environment.
        query PgPageViews {
            source: memory,
            schema: PgClick { ts: Timestamp, page: String },
            watermark: ts delay "10 minutes",
            group_by: [window(ts, "1 minute"), page],
            aggregate: { views: count() },
            output_mode: update,
            sink: postgres(url = env("WEIR_POSTGRES_URL"), table = "weir_dsl_page_views", key = [window, page], create_table = true),
            checkpoint: "target/weir-dsl-pg",
        }
    }

    /// `sink: postgres(...)` in `stream_query!` upserts one row per key.
    #[test]
    fn postgres_declared_sink_upserts_one_row_per_key() {
        let table = "weir_dsl_page_views";
        let mut c = client();
        c.batch_execute(&format!(
            "DROP TABLE IF EXISTS {table}; DELETE FROM weir_sink_commits WHERE sink = '{table}'"
        ))
        .or_else(|_| c.batch_execute(&format!("DROP TABLE IF EXISTS {table}")))
        .unwrap();
        let chk = tempfile::tempdir().unwrap();
        let stream = MemoryStream::new(&clicks());
        let q = PgPageViews::writer_from(&session(), Box::new(stream.clone()))
            .unwrap()
            .checkpoint_location(chk.path().to_str().unwrap())
            .start()
            .unwrap();
        stream
            .add_json(&[click("12:00:10", "/home"), click("12:00:20", "/home")])
            .unwrap();
        q.process_all_available().unwrap();
        stream
            .add_json(&[click("12:00:30", "/home"), click("12:01:05", "/cart")])
            .unwrap();
        q.process_all_available().unwrap();
        q.stop().unwrap();
        assert_eq!(
            page_view_rows(&mut c, table),
            [
                ("12:00".to_string(), "/home".to_string(), 3),
                ("12:01".to_string(), "/cart".to_string(), 1)
            ]
        );
    }

    #[test]
    fn postgres_update_mode_upserts_one_row_per_key() {
        let table = unique("pv_update");
        let chk = tempfile::tempdir().unwrap();
        let sink = PostgresSink::new(url_named(&table), &table)
            .key_columns(vec!["window", "page"])
            .create_table(true);
        let (stream, q) = page_views(chk.path(), sink.into());
        stream
            .add_json(&[
                click("12:00:10", "/home"),
                click("12:00:20", "/home"),
                click("12:00:30", "/about"),
            ])
            .unwrap();
        q.process_all_available().unwrap();
        let mut c = client();
        assert_eq!(
            page_view_rows(&mut c, &table),
            vec![
                ("12:00".into(), "/about".into(), 1),
                ("12:00".into(), "/home".into(), 2)
            ]
        );
        // The server ends the sink's session: the next batch reconnects.
        let killed: i64 = c
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE application_name = $1",
                &[&table],
            )
            .unwrap()
            .get(0);
        assert_eq!(killed, 1);
        stream
            .add_json(&[click("12:00:40", "/home"), click("12:01:05", "/home")])
            .unwrap();
        q.process_all_available().unwrap();
        assert_eq!(
            page_view_rows(&mut c, &table),
            vec![
                ("12:00".into(), "/about".into(), 1),
                ("12:00".into(), "/home".into(), 3),
                ("12:01".into(), "/home".into(), 1)
            ]
        );
        let last = q.last_progress().unwrap().batch_id;
        q.stop().unwrap();
        assert!(q.exception().is_none(), "{:?}", q.exception());
        // The primary key the sink made is the key columns.
        let pk: Vec<String> = c
            .query(
                "SELECT a.attname::text FROM pg_index i JOIN pg_attribute a \
                 ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) \
                 WHERE i.indrelid = $1::text::regclass AND i.indisprimary ORDER BY a.attnum",
                &[&table],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(pk, ["window_start", "window_end", "page"]);
        assert!(recorded_batch(&mut c, &table).is_some_and(|b| b <= last && b >= 1));
        c.batch_execute(&format!("DROP TABLE {table}")).unwrap();
    }

    #[test]
    fn postgres_complete_mode_replaces_the_table() {
        let table = unique("pv_top");
        let mut c = client();
        // An existing table, with a row no result has.
        c.batch_execute(&format!(
            "CREATE TABLE {table} (page text PRIMARY KEY, views bigint NOT NULL, \
             note text DEFAULT 'kept default'); INSERT INTO {table} (page, views) VALUES ('/stale', 99)"
        ))
        .unwrap();
        let chk = tempfile::tempdir().unwrap();
        let sink = PostgresSink::new(url(), &table).key_columns(vec!["page"]);
        let (stream, q) = top_page(chk.path(), sink.into());
        let rows = |c: &mut Client| -> Vec<(String, i64, String)> {
            c.query(
                &format!("SELECT page, views, note FROM {table} ORDER BY page"),
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect()
        };
        stream
            .add_json(&[
                click("12:00:10", "/home"),
                click("12:00:20", "/home"),
                click("12:00:30", "/about"),
            ])
            .unwrap();
        q.process_all_available().unwrap();
        assert_eq!(
            rows(&mut c),
            vec![("/home".into(), 2, "kept default".into())]
        );
        stream
            .add_json(&[
                click("12:01:10", "/about"),
                click("12:01:20", "/about"),
                click("12:01:30", "/cart"),
            ])
            .unwrap();
        q.process_all_available().unwrap();
        assert_eq!(
            rows(&mut c),
            vec![("/about".into(), 3, "kept default".into())]
        );
        q.stop().unwrap();
        assert!(q.exception().is_none(), "{:?}", q.exception());
        c.batch_execute(&format!("DROP TABLE {table}")).unwrap();
    }

    #[test]
    fn postgres_a_replayed_batch_writes_nothing_twice() {
        let table = unique("clicks");
        let dir = tempfile::tempdir().unwrap();
        let (input, chk) = (dir.path().join("in"), dir.path().join("chk"));
        let sink = || -> BoxSink { PostgresSink::new(url(), &table).create_table(true).into() };
        let batches = run_clicks(&input, &chk, sink, 0..FILES.len());
        assert_eq!(batches.len(), FILES.len());
        let last = *batches.last().unwrap();
        let mut c = client();
        let rows = |c: &mut Client| -> Vec<(String, String)> {
            c.query(
                &format!(
                    "SELECT to_char(ts AT TIME ZONE 'UTC', 'HH24:MI:SS'), page FROM {table} ORDER BY 1"
                ),
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect()
        };
        let expected: Vec<(String, String)> = [
            ("12:00:10", "/home"),
            ("12:00:20", "/about"),
            ("12:00:30", "/home"),
            ("12:01:10", "/cart"),
            ("12:01:20", "/home"),
        ]
        .iter()
        .map(|(t, p)| (t.to_string(), p.to_string()))
        .collect();
        assert_eq!(rows(&mut c), expected);
        assert_eq!(recorded_batch(&mut c, &table), Some(last));
        replay_last_batch(&input, &chk, sink, last);
        assert_eq!(
            rows(&mut c),
            expected,
            "the replayed batch was written twice"
        );
        assert_eq!(recorded_batch(&mut c, &table), Some(last));
        c.batch_execute(&format!("DROP TABLE {table}")).unwrap();
    }

    #[test]
    fn postgres_schema_mismatch_names_the_column() {
        let mut c = client();
        let missing = unique("pv_missing");
        let wrong = unique("pv_wrong");
        c.batch_execute(&format!(
            "CREATE TABLE {missing} (window_start timestamptz, window_end timestamptz, page text, \
             PRIMARY KEY (window_start, window_end, page)); \
             CREATE TABLE {wrong} (window_start timestamptz, window_end timestamptz, page integer, \
             views bigint, PRIMARY KEY (window_start, window_end, page))"
        ))
        .unwrap();
        let err = |table: &str| {
            let chk = tempfile::tempdir().unwrap();
            let sink = PostgresSink::new(url(), table).key_columns(vec!["window", "page"]);
            let (stream, q) = page_views(chk.path(), sink.into());
            stream.add_json(&[click("12:00:10", "/home")]).unwrap();
            q.await_termination(Some(Duration::from_secs(60)))
                .expect_err("the query fails")
                .to_string()
        };
        let e = err(&missing);
        assert!(e.contains("has no column `views`"), "{e}");
        assert!(e.contains(&missing), "{e}");
        let e = err(&wrong);
        assert!(e.contains("\"page\" is of type integer"), "{e}");
        let e = err(&unique("pv_absent"));
        assert!(
            e.contains("does not exist") && e.contains("create_table(true)"),
            "{e}"
        );
        c.batch_execute(&format!("DROP TABLE {missing}; DROP TABLE {wrong}"))
            .unwrap();
    }

    /// A column whose name holds a `.` (or a `"`) is that column, not a
    /// field of a composite column.
    #[test]
    fn postgres_a_dotted_column_name_is_one_column() {
        let table = unique("dotted");
        let chk = tempfile::tempdir().unwrap();
        let fields = [
            Field::new("a.b", DataType::String),
            Field::new("say \"hi\"", DataType::Int64),
        ];
        let sink = PostgresSink::new(url(), &table).create_table(true);
        let (stream, q) = rows_as_they_come(chk.path(), &fields, sink.into());
        stream
            .add_json(&[
                json!({"a.b": "x", "say \"hi\"": 1}),
                json!({"a.b": "y.z", "say \"hi\"": 2}),
            ])
            .unwrap();
        q.process_all_available().unwrap();
        q.stop().unwrap();
        assert!(q.exception().is_none(), "{:?}", q.exception());
        let mut c = client();
        let rows: Vec<(String, i64)> = c
            .query(
                &format!("SELECT \"a.b\", \"say \"\"hi\"\"\" FROM {table} ORDER BY 2"),
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        assert_eq!(rows, [("x".to_string(), 1), ("y.z".to_string(), 2)]);
        c.batch_execute(&format!("DROP TABLE {table}")).unwrap();
    }

    /// A `weir_sink_commits` in a schema ahead on the connection's
    /// search_path does not capture the marker: it goes to the commit table
    /// in the target table's schema.
    #[test]
    fn postgres_the_search_path_does_not_capture_the_marker() {
        let table = unique("marked");
        let decoy = unique("decoy");
        let mut c = client();
        c.batch_execute(&format!(
            "CREATE SCHEMA {decoy}; CREATE TABLE {decoy}.weir_sink_commits (query_id text NOT NULL, \
             sink text NOT NULL, batch_id bigint NOT NULL, PRIMARY KEY (query_id, sink)); \
             CREATE TABLE public.{table} (ts timestamptz, page text)"
        ))
        .unwrap();
        let u = url();
        let path = format!("options=-c%20search_path%3D{decoy}%2Cpublic");
        let sink_url = if u.contains('?') {
            format!("{u}&{path}")
        } else {
            format!("{u}?{path}")
        };
        let dir = tempfile::tempdir().unwrap();
        let (input, chk) = (dir.path().join("in"), dir.path().join("chk"));
        let sink = || -> BoxSink { PostgresSink::new(&sink_url, &table).into() };
        let batches = run_clicks(&input, &chk, sink, 0..1);
        let last = *batches.last().unwrap();
        let in_decoy: i64 = c
            .query_one(
                &format!("SELECT count(*) FROM {decoy}.weir_sink_commits"),
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(in_decoy, 0, "the marker went to {decoy}.weir_sink_commits");
        let marked: Option<i64> = c
            .query_opt(
                "SELECT batch_id FROM public.weir_sink_commits WHERE sink = $1",
                &[&table],
            )
            .unwrap()
            .map(|r| r.get(0));
        assert_eq!(marked, Some(last));
        let rows: i64 = c
            .query_one(&format!("SELECT count(*) FROM public.{table}"), &[])
            .unwrap()
            .get(0);
        assert_eq!(rows, 2);
        c.batch_execute(&format!(
            "DROP SCHEMA {decoy} CASCADE; DROP TABLE public.{table}"
        ))
        .unwrap();
    }

    /// After an upgrade from a version that kept its markers in the commit
    /// table the search path finds (`public.weir_sink_commits`), a batch
    /// pending at the upgrade, for a target table in another schema, is not
    /// written again (append mode: a plain insert would duplicate it).
    #[test]
    fn postgres_a_marker_in_the_former_commit_table_still_guards_a_rerun() {
        let schema = unique("upgraded");
        let table = format!("{schema}.clicks");
        let mut c = client();
        c.batch_execute(&format!(
            "CREATE SCHEMA {schema}; CREATE TABLE {table} (ts timestamptz, page text); \
             CREATE TABLE IF NOT EXISTS public.weir_sink_commits (query_id text NOT NULL, \
             sink text NOT NULL, batch_id bigint NOT NULL, PRIMARY KEY (query_id, sink))"
        ))
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (input, chk) = (dir.path().join("in"), dir.path().join("chk"));
        let sink = || -> BoxSink { PostgresSink::new(url(), &table).into() };
        let batches = run_clicks(&input, &chk, sink, 0..2);
        let last = *batches.last().unwrap();
        let count = |c: &mut Client| -> i64 {
            c.query_one(&format!("SELECT count(*) FROM {table}"), &[])
                .unwrap()
                .get(0)
        };
        assert_eq!(count(&mut c), 3);
        // As the earlier version left it: the marker (batch `last`) in the
        // commit table of the search path, none in the target's schema.
        let moved = c
            .execute(
                &format!(
                    "WITH m AS (DELETE FROM {schema}.weir_sink_commits WHERE sink = $1 \
                     RETURNING *) INSERT INTO public.weir_sink_commits SELECT * FROM m"
                ),
                &[&table],
            )
            .unwrap();
        assert_eq!(moved, 1);
        replay_last_batch(&input, &chk, sink, last);
        assert_eq!(
            count(&mut c),
            3,
            "the batch pending at the upgrade was written again"
        );
        let carried: Option<i64> = c
            .query_opt(
                &format!("SELECT batch_id FROM {schema}.weir_sink_commits WHERE sink = $1"),
                &[&table],
            )
            .unwrap()
            .map(|r| r.get(0));
        assert_eq!(carried, Some(last), "the marker was carried over");
        c.batch_execute(&format!(
            "DROP SCHEMA {schema} CASCADE; DELETE FROM public.weir_sink_commits WHERE sink = '{table}'"
        ))
        .unwrap();
    }

    /// Another session holding the marker row (`SELECT ... FOR UPDATE`)
    /// fails the batch with the server's lock-timeout error within the bound,
    /// instead of hanging the query.
    #[test]
    fn postgres_a_held_lock_fails_the_batch_within_the_lock_timeout() {
        let table = unique("locked");
        let chk = tempfile::tempdir().unwrap();
        let sink = PostgresSink::new(url(), &table)
            .key_columns(vec!["window", "page"])
            .create_table(true)
            .lock_timeout(Duration::from_millis(500));
        let (stream, q) = page_views(chk.path(), sink.into());
        stream.add_json(&[click("12:00:10", "/home")]).unwrap();
        q.process_all_available().unwrap();
        let mut holder = client();
        let mut tx = holder.transaction().unwrap();
        let locked = tx
            .query(
                "SELECT batch_id FROM weir_sink_commits WHERE sink = $1 FOR UPDATE",
                &[&table],
            )
            .unwrap();
        assert_eq!(locked.len(), 1);
        let started = std::time::Instant::now();
        stream.add_json(&[click("12:00:20", "/home")]).unwrap();
        let err = q
            .await_termination(Some(Duration::from_secs(30)))
            .expect_err("the batch fails instead of waiting for the lock")
            .to_string();
        let took = started.elapsed();
        assert!(took < Duration::from_secs(15), "failed only after {took:?}");
        assert!(err.contains("lock timeout"), "{err}");
        assert!(err.contains("lock_timeout"), "{err}");
        assert!(err.contains("nothing of it was committed"), "{err}");
        tx.rollback().unwrap();
        let mut c = client();
        assert_eq!(
            page_view_rows(&mut c, &table),
            [("12:00".to_string(), "/home".to_string(), 1)]
        );
        c.batch_execute(&format!("DROP TABLE {table}")).unwrap();
    }

    #[test]
    fn postgres_down_is_a_clear_error_from_the_query() {
        let port = closed_port();
        let sink = PostgresSink::new(format!("postgresql://postgres@127.0.0.1:{port}/weir"), "pv")
            .key_columns(vec!["window", "page"]);
        let e = error_of_a_query_with(sink.into());
        assert!(
            e.contains(&format!("cannot connect to PostgreSQL at 127.0.0.1:{port}")),
            "{e}"
        );
        assert!(e.contains("services.sh start"), "{e}");
    }
}

#[cfg(feature = "redis")]
mod redis {
    use std::collections::BTreeMap;

    use weir::sink::redis::client::{self, Commands, Connection};
    use weir::sink::RedisSink;

    use super::*;

    fn url() -> String {
        env_url("WEIR_REDIS_URL", "Redis")
    }

    fn conn() -> Connection {
        client::Client::open(url().as_str())
            .unwrap()
            .get_connection()
            .unwrap()
    }

    /// Every row hash under the prefix: key (without the prefix) -> fields.
    /// (The sink's own keys begin `<prefix>:\_`.)
    fn hashes(c: &mut Connection, prefix: &str) -> BTreeMap<String, BTreeMap<String, String>> {
        let keys: Vec<String> = c.keys(format!("{prefix}:*")).unwrap();
        keys.into_iter()
            .filter(|k| !k.starts_with(&format!("{prefix}:\\_")))
            .map(|k| {
                let fields: BTreeMap<String, String> = c.hgetall(&k).unwrap();
                (k[prefix.len() + 1..].to_string(), fields)
            })
            .collect()
    }

    fn fields_of(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn cleanup(c: &mut Connection, prefix: &str) {
        let mut keys: Vec<String> = c.keys(format!("{prefix}:*")).unwrap();
        keys.push(prefix.to_string());
        let _: () = c.del(keys).unwrap();
    }

    weir::stream_query! {
        /// Page views to Redis, declared: the server from the environment.
        query RedisPageViews {
            source: memory,
            schema: RedisClick { ts: Timestamp, page: String },
            watermark: ts delay "10 minutes",
            group_by: [window(ts, "1 minute"), page],
            aggregate: { views: count() },
            output_mode: update,
            sink: redis(url = env("WEIR_REDIS_URL"), key_prefix = "weir_dsl_pv", key = [window, page]),
            checkpoint: "target/weir-dsl-redis",
        }
    }

    /// `sink: redis(...)` in `stream_query!` writes one hash per key.
    #[test]
    fn redis_declared_sink_writes_one_hash_per_key() {
        let prefix = "weir_dsl_pv";
        let mut c = conn();
        cleanup(&mut c, prefix);
        let chk = tempfile::tempdir().unwrap();
        let stream = MemoryStream::new(&clicks());
        let q = RedisPageViews::writer_from(&session(), Box::new(stream.clone()))
            .unwrap()
            .checkpoint_location(chk.path().to_str().unwrap())
            .start()
            .unwrap();
        stream
            .add_json(&[
                click("12:00:10", "/home"),
                click("12:00:20", "/home"),
                click("12:01:30", "/about"),
            ])
            .unwrap();
        q.process_all_available().unwrap();
        q.stop().unwrap();
        let w0 = "2024-01-01T12:00:00Z/2024-01-01T12:01:00Z";
        let w1 = "2024-01-01T12:01:00Z/2024-01-01T12:02:00Z";
        assert_eq!(
            hashes(&mut c, prefix),
            BTreeMap::from([
                (format!("{w0}:/home"), fields_of(&[("views", "2")])),
                (format!("{w1}:/about"), fields_of(&[("views", "1")])),
            ])
        );
        cleanup(&mut c, prefix);
    }

    #[test]
    fn redis_update_mode_writes_one_hash_per_key() {
        let prefix = unique("pv");
        let chk = tempfile::tempdir().unwrap();
        let sink = RedisSink::new(url())
            .key_prefix(&prefix)
            .key_columns(vec!["window", "page"]);
        let (stream, q) = page_views(chk.path(), sink.into());
        stream
            .add_json(&[
                click("12:00:10", "/home"),
                click("12:00:20", "/home"),
                click("12:00:30", "/about"),
            ])
            .unwrap();
        q.process_all_available().unwrap();
        let mut c = conn();
        let w0 = "2024-01-01T12:00:00Z/2024-01-01T12:01:00Z";
        let w1 = "2024-01-01T12:01:00Z/2024-01-01T12:02:00Z";
        assert_eq!(
            hashes(&mut c, &prefix),
            BTreeMap::from([
                (format!("{w0}:/about"), fields_of(&[("views", "1")])),
                (format!("{w0}:/home"), fields_of(&[("views", "2")])),
            ])
        );
        // The server drops the sink's connection: the next batch reconnects.
        let clients: String = client::cmd("CLIENT").arg("LIST").query(&mut c).unwrap();
        let id = clients
            .lines()
            .find(|l| l.contains(&format!(" name=weir:{prefix} ")))
            .and_then(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
            .unwrap_or_else(|| panic!("no client named weir:{prefix} in {clients}"))
            .to_string();
        let _: () = client::cmd("CLIENT")
            .arg("KILL")
            .arg("ID")
            .arg(&id)
            .query(&mut c)
            .unwrap();
        stream
            .add_json(&[click("12:00:40", "/home"), click("12:01:05", "/home")])
            .unwrap();
        q.process_all_available().unwrap();
        assert_eq!(
            hashes(&mut c, &prefix),
            BTreeMap::from([
                (format!("{w0}:/about"), fields_of(&[("views", "1")])),
                (format!("{w0}:/home"), fields_of(&[("views", "3")])),
                (format!("{w1}:/home"), fields_of(&[("views", "1")])),
            ])
        );
        let last = q.last_progress().unwrap().batch_id;
        q.stop().unwrap();
        assert!(q.exception().is_none(), "{:?}", q.exception());
        let marks: BTreeMap<String, i64> = c.hgetall(format!("{prefix}:\\__weir_batch__")).unwrap();
        assert_eq!(marks.len(), 1);
        assert!(marks.values().all(|b| *b >= 1 && *b <= last), "{marks:?}");
        cleanup(&mut c, &prefix);
    }

    #[test]
    fn redis_key_fields_and_window_fields() {
        let prefix = unique("pv_fields");
        let chk = tempfile::tempdir().unwrap();
        let sink = RedisSink::new(url())
            .key_prefix(&prefix)
            .key_columns(vec!["page"])
            .key_fields(true);
        let (stream, q) = page_views(chk.path(), sink.into());
        stream.add_json(&[click("12:00:10", "/home")]).unwrap();
        q.process_all_available().unwrap();
        q.stop().unwrap();
        let mut c = conn();
        assert_eq!(
            hashes(&mut c, &prefix),
            BTreeMap::from([(
                "/home".to_string(),
                fields_of(&[
                    ("window_start", "2024-01-01T12:00:00Z"),
                    ("window_end", "2024-01-01T12:01:00Z"),
                    ("page", "/home"),
                    ("views", "1"),
                ])
            )])
        );
        cleanup(&mut c, &prefix);
    }

    #[test]
    fn redis_complete_mode_replaces() {
        let prefix = unique("top");
        let chk = tempfile::tempdir().unwrap();
        let sink = RedisSink::new(url())
            .key_prefix(&prefix)
            .key_columns(vec!["page"]);
        let (stream, q) = top_page(chk.path(), sink.into());
        stream
            .add_json(&[
                click("12:00:10", "/home"),
                click("12:00:20", "/home"),
                click("12:00:30", "/about"),
            ])
            .unwrap();
        q.process_all_available().unwrap();
        let mut c = conn();
        assert_eq!(
            hashes(&mut c, &prefix),
            BTreeMap::from([("/home".to_string(), fields_of(&[("views", "2")]))])
        );
        stream
            .add_json(&[
                click("12:01:10", "/about"),
                click("12:01:20", "/about"),
                click("12:01:30", "/cart"),
            ])
            .unwrap();
        q.process_all_available().unwrap();
        q.stop().unwrap();
        assert!(q.exception().is_none(), "{:?}", q.exception());
        assert_eq!(
            hashes(&mut c, &prefix),
            BTreeMap::from([("/about".to_string(), fields_of(&[("views", "3")]))])
        );
        cleanup(&mut c, &prefix);
    }

    #[test]
    fn redis_a_replayed_batch_writes_nothing_twice() {
        let prefix = unique("clicks");
        let dir = tempfile::tempdir().unwrap();
        let (input, chk) = (dir.path().join("in"), dir.path().join("chk"));
        // No key columns in append mode: RPUSH of JSON rows to the list
        // `prefix`, staged one row per request.
        let sink = || -> BoxSink {
            RedisSink::new(url())
                .key_prefix(&prefix)
                .chunk_rows(1)
                .into()
        };
        let batches = run_clicks(&input, &chk, sink, 0..FILES.len());
        let last = *batches.last().unwrap();
        let mut c = conn();
        let list = |c: &mut Connection| -> Vec<serde_json::Value> {
            let items: Vec<String> = c.lrange(&prefix, 0, -1).unwrap();
            items
                .iter()
                .map(|s| serde_json::from_str(s).unwrap())
                .collect()
        };
        let expected: Vec<serde_json::Value> = [
            ("12:00:10", "/home"),
            ("12:00:20", "/about"),
            ("12:00:30", "/home"),
            ("12:01:10", "/cart"),
            ("12:01:20", "/home"),
        ]
        .iter()
        .map(|(t, p)| click(t, p))
        .collect();
        assert_eq!(list(&mut c), expected);
        replay_last_batch(&input, &chk, sink, last);
        assert_eq!(
            list(&mut c),
            expected,
            "the replayed batch was written twice"
        );
        let marks: BTreeMap<String, i64> = c.hgetall(format!("{prefix}:\\__weir_batch__")).unwrap();
        assert_eq!(marks.into_values().collect::<Vec<_>>(), vec![last]);
        assert_eq!(staging_keys(&mut c, &prefix), Vec::<String>::new());
        cleanup(&mut c, &prefix);
    }

    /// The staging keys left under the prefix.
    fn staging_keys(c: &mut Connection, prefix: &str) -> Vec<String> {
        let keys: Vec<String> = c.keys(format!("{prefix}:*")).unwrap();
        keys.into_iter()
            .filter(|k| k.starts_with(&format!("{prefix}:\\__weir_stage__")))
            .collect()
    }

    /// `("a:b", "c")` and `("a", "b:c")` are two rows, and a key value equal
    /// to one of the sink's own names is just a row.
    #[test]
    fn redis_keys_that_look_alike_are_distinct_rows() {
        let prefix = unique("alike");
        let chk = tempfile::tempdir().unwrap();
        let fields = [
            Field::new("a", DataType::String),
            Field::new("b", DataType::String),
            Field::new("v", DataType::Int64),
        ];
        let sink = RedisSink::new(url())
            .key_prefix(&prefix)
            .key_columns(vec!["a", "b"]);
        let (stream, q) = rows_as_they_come(chk.path(), &fields, sink.into());
        stream
            .add_json(&[
                json!({"a": "a:b", "b": "c", "v": 1}),
                json!({"a": "a", "b": "b:c", "v": 2}),
                json!({"a": "x\\", "b": null, "v": 3}),
                json!({"a": "x", "b": "", "v": 4}),
            ])
            .unwrap();
        q.process_all_available().unwrap();
        q.stop().unwrap();
        assert!(q.exception().is_none(), "{:?}", q.exception());
        let mut c = conn();
        assert_eq!(
            hashes(&mut c, &prefix),
            BTreeMap::from([
                ("a\\:b:c".to_string(), fields_of(&[("v", "1")])),
                ("a:b\\:c".to_string(), fields_of(&[("v", "2")])),
                ("x\\\\:\\N".to_string(), fields_of(&[("v", "3")])),
                ("x:".to_string(), fields_of(&[("v", "4")])),
            ])
        );
        cleanup(&mut c, &prefix);

        // One key column whose values are the sink's (former) own names.
        let prefix = unique("own_names");
        let chk = tempfile::tempdir().unwrap();
        let sink = RedisSink::new(url())
            .key_prefix(&prefix)
            .key_columns(vec!["a"]);
        let (stream, q) = rows_as_they_come(chk.path(), &fields, sink.into());
        stream
            .add_json(&[
                json!({"a": "__weir_batch__", "b": "row", "v": 1}),
                json!({"a": "__weir_keys__", "b": "row", "v": 2}),
                json!({"a": "\\__weir_batch__", "b": "row", "v": 3}),
            ])
            .unwrap();
        q.process_all_available().unwrap();
        stream
            .add_json(&[json!({"a": "__weir_batch__", "b": "again", "v": 4})])
            .unwrap();
        q.process_all_available().unwrap();
        let last = q.last_progress().unwrap().batch_id;
        q.stop().unwrap();
        assert!(q.exception().is_none(), "{:?}", q.exception());
        assert_eq!(
            hashes(&mut c, &prefix),
            BTreeMap::from([
                (
                    "__weir_batch__".to_string(),
                    fields_of(&[("b", "again"), ("v", "4")])
                ),
                (
                    "__weir_keys__".to_string(),
                    fields_of(&[("b", "row"), ("v", "2")])
                ),
                (
                    "\\\\__weir_batch__".to_string(),
                    fields_of(&[("b", "row"), ("v", "3")])
                ),
            ])
        );
        let marks: BTreeMap<String, i64> = c.hgetall(format!("{prefix}:\\__weir_batch__")).unwrap();
        assert_eq!(marks.into_values().collect::<Vec<_>>(), vec![last]);
        cleanup(&mut c, &prefix);
    }

    /// A batch of more rows than a chunk is staged in chunks and lands whole;
    /// its re-run (a crash before `commits/N`) writes nothing.
    #[test]
    fn redis_a_batch_larger_than_a_chunk_is_written_whole_and_once() {
        let prefix = unique("chunked");
        let dir = tempfile::tempdir().unwrap();
        let (input, chk) = (dir.path().join("in"), dir.path().join("chk"));
        fs::create_dir_all(&input).unwrap();
        let rows: Vec<String> = (0..10)
            .map(|i| format!("{{\"ts\":\"2024-01-01T12:00:{i:02}Z\",\"page\":\"/p:{i}\"}}"))
            .collect();
        fs::write(input.join("big.json"), rows.join("\n")).unwrap();
        let sink = || -> BoxSink {
            RedisSink::new(url())
                .key_prefix(&prefix)
                .key_columns(vec!["page"])
                .chunk_rows(3)
                .into()
        };
        let batches = run_clicks(&input, &chk, sink, 0..0);
        assert_eq!(batches.len(), 1, "one batch of 10 rows");
        let last = batches[0];
        let mut c = conn();
        let expected: BTreeMap<String, BTreeMap<String, String>> = (0..10)
            .map(|i| {
                (
                    format!("/p\\:{i}"),
                    fields_of(&[("ts", &format!("2024-01-01T12:00:{i:02}Z"))]),
                )
            })
            .collect();
        assert_eq!(hashes(&mut c, &prefix), expected);
        assert_eq!(staging_keys(&mut c, &prefix), Vec::<String>::new());
        // A reader's change after the batch: a re-run that wrote would undo it.
        let _: () = c
            .hset(format!("{prefix}:/p\\:0"), "ts", "changed since")
            .unwrap();
        replay_last_batch(&input, &chk, sink, last);
        let mut after = expected.clone();
        after.insert("/p\\:0".into(), fields_of(&[("ts", "changed since")]));
        assert_eq!(hashes(&mut c, &prefix), after, "the re-run wrote");
        assert_eq!(staging_keys(&mut c, &prefix), Vec::<String>::new());
        let marks: BTreeMap<String, i64> = c.hgetall(format!("{prefix}:\\__weir_batch__")).unwrap();
        assert_eq!(marks.into_values().collect::<Vec<_>>(), vec![last]);
        cleanup(&mut c, &prefix);
    }

    /// Every key under the prefix (`<prefix>*`, what a reader scanning it
    /// finds), sorted.
    fn all_keys(c: &mut Connection, prefix: &str) -> Vec<String> {
        let mut keys: Vec<String> = c.keys(format!("{prefix}*")).unwrap();
        keys.sort();
        keys
    }

    /// A process killed (SIGKILL, the failpoint `redis_before_script`)
    /// after staging a batch and before its apply script leaves staged rows,
    /// hashes with the rows' fields; the re-run deletes them before staging
    /// the batch again, so afterwards a reader scanning the prefix finds the
    /// rows and the sink's marker, nothing else.
    #[test]
    fn redis_a_crash_before_the_script_leaves_no_staged_rows() {
        const CHILD: &str = "WEIR_TEST_REDIS_CRASH_CHILD";
        let sink = |prefix: String| {
            move || -> BoxSink {
                RedisSink::new(url())
                    .key_prefix(&prefix)
                    .key_columns(vec!["page"])
                    .chunk_rows(1)
                    .into()
            }
        };
        if let Ok(args) = std::env::var(CHILD) {
            let args: Vec<&str> = args.split('\n').collect();
            let (prefix, input, chk) = (args[0], Path::new(args[1]), Path::new(args[2]));
            run_clicks(input, chk, sink(prefix.to_string()), 0..1);
            panic!("the failpoint redis_before_script did not fire");
        }
        let prefix = unique("staged");
        let dir = tempfile::tempdir().unwrap();
        let (input, chk) = (dir.path().join("in"), dir.path().join("chk"));
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "external_sinks::redis::redis_a_crash_before_the_script_leaves_no_staged_rows",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(
                CHILD,
                format!("{prefix}\n{}\n{}", input.display(), chk.display()),
            )
            .env("WEIR_FAILPOINT", "redis_before_script:0")
            .output()
            .unwrap();
        {
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(
                out.status.signal(),
                Some(9),
                "the child was not killed at the failpoint: {}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let mut c = conn();
        let staged = staging_keys(&mut c, &prefix);
        assert!(
            staged.len() >= 3,
            "the killed batch left its staging: {staged:?}"
        );
        // Restarted: batch 0 again (staged anew under another name), then 1.
        run_clicks(&input, &chk, sink(prefix.clone()), 1..2);
        assert_eq!(
            all_keys(&mut c, &prefix),
            [
                format!("{prefix}:/about"),
                format!("{prefix}:/home"),
                format!("{prefix}:\\__weir_batch__"),
            ]
        );
        assert_eq!(
            hashes(&mut c, &prefix),
            BTreeMap::from([
                (
                    "/about".to_string(),
                    fields_of(&[("ts", "2024-01-01T12:00:20Z")])
                ),
                (
                    "/home".to_string(),
                    fields_of(&[("ts", "2024-01-01T12:00:30Z")])
                ),
            ])
        );
        cleanup(&mut c, &prefix);
    }

    /// After an upgrade, update mode replaces the hash an earlier version
    /// wrote for a key (at the key's former, unescaped name) instead of
    /// leaving it beside the new one: a reader sees one hash per group.
    #[test]
    fn redis_update_mode_replaces_hashes_at_the_former_key_names() {
        let prefix = unique("pv_upgraded");
        let w0 = "2024-01-01T12:00:00Z/2024-01-01T12:01:00Z";
        let mut c = conn();
        // As the earlier version left them: key parts unescaped.
        for page in ["/a:b", "x\\y", "/home"] {
            let _: () = c.hset(format!("{prefix}:{w0}:{page}"), "views", 5).unwrap();
        }
        let chk = tempfile::tempdir().unwrap();
        let sink = RedisSink::new(url())
            .key_prefix(&prefix)
            .key_columns(vec!["window", "page"]);
        let (stream, q) = page_views(chk.path(), sink.into());
        stream
            .add_json(&[
                click("12:00:10", "/a:b"),
                click("12:00:20", "x\\y"),
                click("12:00:30", "/home"),
            ])
            .unwrap();
        q.process_all_available().unwrap();
        q.stop().unwrap();
        assert!(q.exception().is_none(), "{:?}", q.exception());
        assert_eq!(
            hashes(&mut c, &prefix),
            BTreeMap::from([
                (format!("{w0}:/a\\:b"), fields_of(&[("views", "1")])),
                (format!("{w0}:/home"), fields_of(&[("views", "1")])),
                (format!("{w0}:x\\\\y"), fields_of(&[("views", "1")])),
            ])
        );
        cleanup(&mut c, &prefix);
    }

    /// A marker an earlier version wrote (at `<prefix>:__weir_batch__`)
    /// still makes the re-run of its batch write nothing after an upgrade.
    #[test]
    fn redis_a_marker_at_the_former_name_still_guards_a_rerun() {
        let prefix = unique("upgraded");
        let dir = tempfile::tempdir().unwrap();
        let (input, chk) = (dir.path().join("in"), dir.path().join("chk"));
        let sink = || -> BoxSink { RedisSink::new(url()).key_prefix(&prefix).into() };
        let batches = run_clicks(&input, &chk, sink, 0..2);
        let last = *batches.last().unwrap();
        let mut c = conn();
        // As the earlier version left it: the marker at the former name.
        let _: () = c
            .rename(
                format!("{prefix}:\\__weir_batch__"),
                format!("{prefix}:__weir_batch__"),
            )
            .unwrap();
        let before: Vec<String> = c.lrange(&prefix, 0, -1).unwrap();
        assert_eq!(before.len(), 3);
        replay_last_batch(&input, &chk, sink, last);
        let after: Vec<String> = c.lrange(&prefix, 0, -1).unwrap();
        assert_eq!(after, before, "the re-run wrote its batch again");
        cleanup(&mut c, &prefix);
    }

    #[test]
    fn redis_down_is_a_clear_error_from_the_query() {
        let port = closed_port();
        let sink = RedisSink::new(format!("redis://127.0.0.1:{port}/0"))
            .key_prefix("pv")
            .key_columns(vec!["window", "page"]);
        let e = error_of_a_query_with(sink.into());
        assert!(
            e.contains(&format!("cannot connect to Redis at 127.0.0.1:{port}")),
            "{e}"
        );
        assert!(e.contains("services.sh start"), "{e}");
    }
}
