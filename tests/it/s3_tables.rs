//! Static tables (the dimension side of stream-static joins) on S3: the
//! seed's `spark.read.parquet("s3://dim/users/")`, against the S3 API
//! server of `scripts/s3.sh` (`WEIR_S3_ENDPOINT`, see `s3.rs`).

use std::time::Duration;

use serde_json::json;
use weir::arrow::record_batch::RecordBatch;
use weir::plan::{DataType, Field, JoinType};
use weir::sink::MemorySink;
use weir::source::{FileFormat, MemoryStream};
use weir::storage::Storage;
use weir::StaticTable;

use crate::common::{rows_json, session};
use crate::s3::{endpoint, new_bucket, settings};

fn user_fields() -> Vec<Field> {
    vec![
        Field::new("user_id", DataType::String),
        Field::new("tier", DataType::String),
    ]
}

/// A Parquet file of users.
fn users_parquet(rows: &[(&str, &str)]) -> Vec<u8> {
    let batch = weir::row::batch_from_arrays(
        user_fields(),
        vec![
            <String as weir::ArrowValue>::to_array(rows.iter().map(|r| r.0.to_string()).collect()),
            <String as weir::ArrowValue>::to_array(rows.iter().map(|r| r.1.to_string()).collect()),
        ],
    )
    .unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(Vec::new(), batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.into_inner().unwrap()
}

/// The users table as two Parquet files and a `_SUCCESS` marker.
fn users_files() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        (
            "part-0.parquet",
            users_parquet(&[("u1", "gold"), ("u2", "silver")]),
        ),
        ("part-1.parquet", users_parquet(&[("u3", "bronze")])),
        ("_SUCCESS", Vec::new()),
    ]
}

fn page_views() -> MemoryStream {
    MemoryStream::new(&[
        Field::new("user_id", DataType::String),
        Field::new("page", DataType::String),
    ])
}

/// Runs `views` (one micro-batch each) through a left outer join with
/// `users`; the joined rows of each batch, sorted.
fn join_batches(users: StaticTable, views: &[Vec<serde_json::Value>]) -> Vec<Vec<String>> {
    join_batches_then(users, views, |_| {})
}

/// [`join_batches`], calling `between(i)` before batch `i` is added.
fn join_batches_then(
    users: StaticTable,
    views: &[Vec<serde_json::Value>],
    mut between: impl FnMut(usize),
) -> Vec<Vec<String>> {
    let events = page_views();
    let sink = MemorySink::new("");
    let table = sink.table();
    let q = session()
        .read_stream(events.clone())
        .join_static("users", users, ["user_id"], JoinType::LeftOuter)
        .write_stream()
        .sink(sink)
        .start()
        .unwrap();
    for (i, batch) in views.iter().enumerate() {
        between(i);
        events.add_json(batch).unwrap();
        q.process_all_available().unwrap();
    }
    q.stop().unwrap();
    table
        .batches()
        .iter()
        .map(|(_, b): &(_, Vec<RecordBatch>)| {
            let mut rows: Vec<String> = rows_json(b).iter().map(|r| r.to_string()).collect();
            rows.sort();
            rows
        })
        .collect()
}

fn s3_users(bucket: &str) -> StaticTable {
    StaticTable::files(
        format!("s3://{bucket}/dim/users/"),
        FileFormat::Parquet,
        user_fields(),
    )
    .with_s3_settings(settings())
}

fn views() -> Vec<Vec<serde_json::Value>> {
    vec![
        vec![
            json!({"user_id": "u1", "page": "/home"}),
            json!({"user_id": "u3", "page": "/cart"}),
            json!({"user_id": "nobody", "page": "/about"}),
        ],
        vec![json!({"user_id": "u2", "page": "/home"})],
    ]
}

#[test]
fn a_left_outer_join_with_an_s3_parquet_table_gives_the_local_tables_rows() {
    let b = new_bucket();
    let s3 = Storage::open(&format!("s3://{b}/dim/users"), &settings(), false).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in users_files() {
        s3.put(name, &bytes).unwrap();
        std::fs::write(dir.path().join(name), &bytes).unwrap();
    }
    let local = join_batches(
        StaticTable::files(dir.path(), FileFormat::Parquet, user_fields()),
        &views(),
    );
    let on_s3 = join_batches(s3_users(&b), &views());
    assert_eq!(on_s3, local);
    let row =
        |u: &str, p: &str, t: Option<&str>| json!({"user_id": u, "page": p, "tier": t}).to_string();
    let mut first = vec![
        row("u1", "/home", Some("gold")),
        row("u3", "/cart", Some("bronze")),
        row("nobody", "/about", None),
    ];
    first.sort();
    assert_eq!(
        on_s3,
        vec![first, vec![row("u2", "/home", Some("silver"))]],
        "both files of the prefix are read, `_SUCCESS` is not, unmatched views keep nulls"
    );
}

#[test]
fn a_refreshed_s3_table_picks_up_a_changed_object() {
    let b = new_bucket();
    let s3 = Storage::open(&format!("s3://{b}/dim/users"), &settings(), false).unwrap();
    for (name, bytes) in users_files() {
        s3.put(name, &bytes).unwrap();
    }
    let views = vec![
        vec![json!({"user_id": "u1", "page": "/home"})],
        vec![json!({"user_id": "u1", "page": "/cart"})],
        vec![json!({"user_id": "u4", "page": "/new"})],
    ];
    let got = join_batches_then(
        s3_users(&b).refresh_every(Duration::from_millis(200)),
        &views,
        |i| {
            if i == 1 {
                // u1 is upgraded (an object replaced) and u4 signs up (a
                // new object under the prefix).
                s3.put("part-0.parquet", &users_parquet(&[("u1", "platinum")]))
                    .unwrap();
                s3.put("part-2.parquet", &users_parquet(&[("u4", "gold")]))
                    .unwrap();
                std::thread::sleep(Duration::from_millis(300));
            }
        },
    );
    let row = |u: &str, p: &str, t: &str| json!({"user_id": u, "page": p, "tier": t}).to_string();
    assert_eq!(
        got,
        vec![
            vec![row("u1", "/home", "gold")],
            vec![row("u1", "/cart", "platinum")],
            vec![row("u4", "/new", "gold")],
        ]
    );
}

#[test]
fn json_and_csv_tables_and_a_single_object_are_read_from_s3() {
    let b = new_bucket();
    let s3 = Storage::open(&format!("s3://{b}/dim"), &settings(), false).unwrap();
    s3.put(
        "json/users.json",
        b"{\"user_id\":\"u1\",\"tier\":\"gold\"}\n{\"user_id\":\"u2\",\"tier\":\"silver\"}\n",
    )
    .unwrap();
    s3.put("csv/users.csv", b"user_id,tier\nu1,gold\nu2,silver\n")
        .unwrap();
    s3.put(
        "one.parquet",
        &users_parquet(&[("u1", "gold"), ("u2", "silver")]),
    )
    .unwrap();
    for (path, format) in [
        ("dim/json", FileFormat::Json),
        ("dim/csv/", FileFormat::Csv),
        ("dim/one.parquet", FileFormat::Parquet),
    ] {
        let t = StaticTable::files(format!("s3://{b}/{path}"), format, user_fields())
            .with_s3_settings(settings());
        assert_eq!(
            rows_json(&t.load().unwrap()),
            vec![
                json!({"user_id": "u1", "tier": "gold"}),
                json!({"user_id": "u2", "tier": "silver"}),
            ],
            "{path}"
        );
        assert_eq!(
            t.description(),
            format!(
                "{} files at s3://{b}/{}",
                format.extension(),
                path.trim_end_matches('/')
            )
        );
    }
}

/// Starts a query joined with `users`; the error it fails to start with.
fn start_error(users: StaticTable) -> String {
    let r = session()
        .read_stream(page_views())
        .join_static("users", users, ["user_id"], JoinType::LeftOuter)
        .write_stream()
        .sink(MemorySink::new(""))
        .start();
    match r {
        Ok(q) => {
            q.stop().unwrap();
            panic!("the query started")
        }
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_missing_bucket_or_prefix_is_an_error_when_the_query_starts() {
    let missing = format!("weir-missing-{}", crate::s3::unique());
    let err = start_error(s3_users(&missing));
    assert!(
        err.contains(&format!(
            "the bucket `{missing}` does not exist at {}",
            endpoint()
        )),
        "{err}"
    );
    let b = new_bucket();
    let err = start_error(s3_users(&b));
    assert!(
        err.contains(&format!(
            "there are no objects at s3://{b}/dim/users (endpoint {}): the prefix is empty or does not exist",
            endpoint()
        )),
        "{err}"
    );
    // Only `_SUCCESS` there: still no table.
    let s3 = Storage::open(&format!("s3://{b}/dim/users"), &settings(), false).unwrap();
    s3.put("_SUCCESS", b"").unwrap();
    let err = start_error(s3_users(&b));
    assert!(err.contains("there are no objects at"), "{err}");
}

/// A static table without S3 settings of its own reads S3 through the
/// session's `spark.hadoop.fs.s3a.*` settings: checked in a child process
/// with no `AWS_*` variable at all.
#[test]
fn a_static_table_uses_the_sessions_s3_settings() {
    const AWS: [&str; 6] = [
        "AWS_ENDPOINT_URL",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_ALLOW_HTTP",
    ];
    if let Ok(b) = std::env::var("WEIR_S3_TABLES_CHILD_BUCKET") {
        for k in AWS {
            assert!(std::env::var(k).is_err(), "{k} is set in the child");
        }
        let mut conf = weir::SessionConfig {
            fsync_checkpoint: false,
            ..weir::SessionConfig::default()
        };
        for (k, v) in [
            ("spark.hadoop.fs.s3a.endpoint", endpoint().as_str()),
            ("spark.hadoop.fs.s3a.access.key", "test"),
            ("spark.hadoop.fs.s3a.secret.key", "test"),
            ("spark.hadoop.fs.s3a.endpoint.region", "us-east-1"),
            ("weir.s3.allowHttp", "true"),
        ] {
            conf.set(k, v).unwrap();
        }
        let events = page_views();
        let sink = MemorySink::new("");
        let table = sink.table();
        let users = StaticTable::files(
            format!("s3://{b}/dim/users/"),
            FileFormat::Parquet,
            user_fields(),
        );
        let q = weir::Session::with_config(conf)
            .read_stream(events.clone())
            .join_static("users", users, ["user_id"], JoinType::LeftOuter)
            .write_stream()
            .sink(sink)
            .start()
            .unwrap();
        events
            .add_json(&[json!({"user_id": "u1", "page": "/home"})])
            .unwrap();
        q.process_all_available().unwrap();
        q.stop().unwrap();
        let rows: Vec<String> = table
            .batches()
            .iter()
            .flat_map(|(_, b)| rows_json(b))
            .map(|r| r.to_string())
            .collect();
        assert_eq!(
            rows,
            vec![json!({"user_id": "u1", "page": "/home", "tier": "gold"}).to_string()]
        );
        return;
    }
    let b = new_bucket();
    let s3 = Storage::open(&format!("s3://{b}/dim/users"), &settings(), false).unwrap();
    for (name, bytes) in users_files() {
        s3.put(name, &bytes).unwrap();
    }
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "s3_tables::a_static_table_uses_the_sessions_s3_settings",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("WEIR_S3_TABLES_CHILD_BUCKET", &b);
    for k in AWS {
        cmd.env_remove(k);
    }
    let status = crate::common::TestChild::spawn(&mut cmd)
        .wait_within(std::time::Duration::from_secs(120), "the child reading S3");
    assert!(status.success(), "the child failed: {status}");
}
