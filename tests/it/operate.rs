//! Operating a running query: Prometheus metrics, the stop endpoint,
//! and SIGTERM/SIGINT stopping a session's queries gracefully.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use weir::functions::{col, count_star, window};
use weir::plan::OutputMode;
use weir::sink::MemorySink;
use weir::source::{MemoryStream, RateMicroBatchSource};
use weir::ui::UiServer;
use weir::{Session, SessionConfig, StreamingQuery, Trigger};

use crate::common::{fields, iso_ms, TestChild};

/// One HTTP/1.1 request to the UI (Host: localhost:<port>); the status and body.
fn request(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost:{}\r\nConnection: close\r\nContent-Length: 0\r\n",
        addr.port()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).unwrap();
    let code = buf.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = buf
        .split_once("\r\n\r\n")
        .map(|b| b.1.to_string())
        .unwrap_or_default();
    (code, body)
}

fn json_body(body: &str) -> Value {
    let text = &body[body.find('{').unwrap()..=body.rfind('}').unwrap()];
    serde_json::from_str(text).unwrap()
}

/// Prometheus text exposition → (metric name, labels) → value.
type Series = Vec<(String, BTreeMap<String, String>, f64)>;

fn parse_exposition(text: &str) -> Series {
    let mut out = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (head, value) = line.rsplit_once(' ').unwrap();
        let value: f64 = value.parse().unwrap();
        let (name, labels) = match head.split_once('{') {
            None => (head.to_string(), BTreeMap::new()),
            Some((name, rest)) => {
                let mut labels = BTreeMap::new();
                let mut chars = rest.strip_suffix('}').unwrap().chars().peekable();
                loop {
                    let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
                    if key.is_empty() {
                        break;
                    }
                    assert_eq!(chars.next(), Some('"'), "{line}");
                    let mut v = String::new();
                    while let Some(c) = chars.next() {
                        match c {
                            '\\' => v.push(chars.next().unwrap()),
                            '"' => break,
                            c => v.push(c),
                        }
                    }
                    labels.insert(key.trim_start_matches(',').to_string(), v);
                    if chars.peek() == Some(&',') {
                        chars.next();
                    }
                }
                (name.to_string(), labels)
            }
        };
        out.push((name, labels, value));
    }
    out
}

/// The value of the one series `name` whose labels include `want`.
fn value(series: &Series, name: &str, want: &[(&str, &str)]) -> Option<f64> {
    let found: Vec<f64> = series
        .iter()
        .filter(|(n, l, _)| {
            n == name
                && want
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.2)
        .collect();
    assert!(found.len() <= 1, "{name} {want:?}: {found:?}");
    found.first().copied()
}

fn ev(ts: &str, key: &str) -> Value {
    json!({"ts": ts, "key": key, "value": 1})
}

/// A windowed count with a watermark over a memory stream.
fn windowed_counts(session: &Session, stream: &MemoryStream) -> StreamingQuery {
    session
        .read_stream(stream.clone())
        .with_watermark("ts", "10 seconds")
        .group_by(vec![window("ts", "10 seconds"), col("key")])
        .agg(vec![count_star("n")])
        .write_stream()
        .output_mode(OutputMode::Update)
        .query_name("counts")
        .sink(MemorySink::new(""))
        .start()
        .unwrap()
}

#[test]
fn metrics_show_each_querys_last_progress() {
    let session = crate::common::session();
    let ui = UiServer::start(&session, "127.0.0.1:0").unwrap();
    let stream = MemoryStream::new(&fields());
    let q = windowed_counts(&session, &stream);
    stream
        .add_json(&[
            ev("2024-01-01T12:00:01Z", "a"),
            ev("2024-01-01T12:00:02Z", "b"),
            ev("2024-01-01T12:00:35Z", "a"),
        ])
        .unwrap();
    q.process_all_available().unwrap();
    // One row late (behind the 12:00:25 watermark), one on time that
    // leaves the watermark where it is (so no no-data batch follows).
    stream
        .add_json(&[
            ev("2024-01-01T12:00:03Z", "a"),
            ev("2024-01-01T12:00:30Z", "c"),
        ])
        .unwrap();
    q.process_all_available().unwrap();
    let p = q.last_progress().unwrap();
    let (code, body) = request(ui.addr(), "GET", "/metrics", &[]);
    assert_eq!(code, 200, "{body}");
    assert_eq!(q.last_progress().unwrap(), p, "no batch ran meanwhile");
    let m = parse_exposition(&body);
    let ql = [("name", "counts"), ("id", q.id()), ("run_id", q.run_id())];
    let get = |name: &str, extra: &[(&str, &str)]| {
        let mut want = ql.to_vec();
        want.extend_from_slice(extra);
        value(&m, name, &want).unwrap_or_else(|| panic!("no {name} {extra:?} in:\n{body}"))
    };
    assert_eq!(get("weir_query_active", &[]), 1.0);
    assert_eq!(get("weir_query_failed", &[]), 0.0);
    assert_eq!(get("weir_query_latest_batch_id", &[]), p.batch_id as f64);
    assert_eq!(get("weir_query_input_rows", &[]), p.num_input_rows as f64);
    assert_eq!(
        get("weir_query_input_rows_per_second", &[]),
        p.input_rows_per_second
    );
    assert_eq!(
        get("weir_query_processed_rows_per_second", &[]),
        p.processed_rows_per_second
    );
    assert_eq!(
        get("weir_query_batch_duration_ms", &[]),
        p.duration_ms["triggerExecution"] as f64
    );
    for op in [
        "addBatch",
        "getBatch",
        "latestOffset",
        "walCommit",
        "commitOffsets",
        "queryPlanning",
        "triggerExecution",
    ] {
        assert_eq!(
            get("weir_query_operation_duration_ms", &[("operation", op)]),
            p.duration_ms[op] as f64,
            "{op}"
        );
    }
    assert_eq!(
        get("weir_query_last_progress_timestamp_ms", &[]),
        iso_ms(&p.timestamp) as f64
    );
    let wm = iso_ms(&p.event_time["watermark"]);
    assert_eq!(wm, iso_ms("2024-01-01T12:00:25Z"), "the test's premise");
    assert_eq!(get("weir_query_watermark_ms", &[]), wm as f64);
    assert_eq!(
        get("weir_query_output_rows", &[]),
        p.sink.num_output_rows as f64
    );
    assert_eq!(p.state_operators.len(), 1);
    let op = &p.state_operators[0];
    let ol = [
        ("operator", "0"),
        ("operator_name", op.operator_name.as_str()),
    ];
    assert_eq!(get("weir_state_rows_total", &ol), op.num_rows_total as f64);
    assert_eq!(
        get("weir_state_rows_updated", &ol),
        op.num_rows_updated as f64
    );
    assert_eq!(
        get("weir_state_rows_removed", &ol),
        op.num_rows_removed as f64
    );
    assert_eq!(
        get("weir_state_memory_used_bytes", &ol),
        op.memory_used_bytes as f64
    );
    assert_eq!(
        get("weir_state_rows_dropped_by_watermark", &ol),
        op.num_rows_dropped_by_watermark as f64
    );
    assert_eq!(op.num_rows_dropped_by_watermark, 1, "the late row");
    assert!(op.memory_used_bytes > 0 && op.num_rows_total > 0, "{op:?}");
    let src = &p.sources[0];
    assert_eq!(
        get(
            "weir_source_input_rows",
            &[("source", src.description.as_str()), ("source_index", "0")]
        ),
        src.num_input_rows as f64
    );
    // A memory stream's offsets are not per partition: no lag series.
    assert!(!body.contains("weir_source_lag_offsets{"), "{body}");
    // The page's JSON and the metrics agree on the query.
    let (_, api) = request(ui.addr(), "GET", "/api/v1/streaming/queries", &[]);
    assert_eq!(
        json_body(&api)["queries"][0]["lastProgress"]["batchId"],
        p.batch_id
    );
    // Once stopped, the query's series stay, inactive.
    q.stop().unwrap();
    let m = parse_exposition(&request(ui.addr(), "GET", "/metrics", &[]).1);
    assert_eq!(value(&m, "weir_query_active", &ql), Some(0.0));
    assert_eq!(
        value(&m, "weir_query_latest_batch_id", &ql),
        Some(p.batch_id as f64)
    );
}

/// The state operator's custom metrics (its next window close, its late
/// rows sent aside) and the source's watermark metrics are series too,
/// equal to the last progress.
#[test]
fn metrics_show_what_holds_output_back_and_the_late_rows_sent_aside() {
    let session = crate::common::session();
    let ui = UiServer::start(&session, "127.0.0.1:0").unwrap();
    let stream = MemoryStream::new(&fields());
    let q = session
        .read_stream(stream.clone())
        .with_watermark("ts", "10 seconds")
        .group_by(vec![window("ts", "10 seconds"), col("key")])
        .agg(vec![count_star("n")])
        .write_stream()
        .output_mode(OutputMode::Append)
        .query_name("held")
        .sink(MemorySink::new(""))
        .late_rows_to(MemorySink::new(""))
        .start()
        .unwrap();
    stream
        .add_json(&[
            ev("2024-01-01T12:00:01Z", "a"),
            ev("2024-01-01T12:00:35Z", "b"),
        ])
        .unwrap();
    q.process_all_available().unwrap();
    // Behind the 12:00:25 watermark: aside.
    stream
        .add_json(&[
            ev("2024-01-01T12:00:03Z", "a"),
            ev("2024-01-01T12:00:30Z", "c"),
        ])
        .unwrap();
    q.process_all_available().unwrap();
    let p = q.last_progress().unwrap();
    let m = parse_exposition(&request(ui.addr(), "GET", "/metrics", &[]).1);
    let ql = [("name", "held"), ("id", q.id()), ("run_id", q.run_id())];
    let get = |name: &str, extra: &[(&str, &str)]| {
        let mut want = ql.to_vec();
        want.extend_from_slice(extra);
        value(&m, name, &want).unwrap_or_else(|| panic!("no {name} {extra:?}"))
    };
    let op = &p.state_operators[0];
    let custom = |metric: &str| {
        get(
            "weir_state_custom_metric",
            &[
                ("operator", "0"),
                ("operator_name", "stateStoreSave"),
                ("metric", metric),
            ],
        )
    };
    assert_eq!(op.custom_metrics["numLateRowsToSideOutput"], 1);
    assert_eq!(custom("numLateRowsToSideOutput"), 1.0);
    // The open window [12:00:30, 12:00:40) closes when the watermark reaches 12:00:40.
    let close = iso_ms("2024-01-01T12:00:40Z");
    assert_eq!(op.custom_metrics["nextEvictionTimeMs"], close);
    assert_eq!(custom("nextEvictionTimeMs"), close as f64);
    assert_eq!(
        custom("nextEvictionWindowStartMs"),
        iso_ms("2024-01-01T12:00:30Z") as f64
    );
    let src = &p.sources[0];
    let source = |metric: &str| {
        get(
            "weir_source_metric",
            &[
                ("source", src.description.as_str()),
                ("source_index", "0"),
                ("metric", metric),
            ],
        )
    };
    let max = iso_ms("2024-01-01T12:00:35Z");
    assert_eq!(src.metrics["maxEventTimeMs"], max.to_string());
    assert_eq!(source("maxEventTimeMs"), max as f64);
    assert_eq!(source("watermarkMs"), (max - 10_000) as f64);
    assert_eq!(source("watermarkDelayMs"), 10_000.0);
    assert_eq!(source("holdsWatermark"), 1.0);
    assert_eq!(src.metrics["watermarkColumn"], "ts");
    q.stop().unwrap();
}

/// With two watermarked sources (a stream-stream join), each source's
/// progress metrics carry its watermark, and `holdsWatermark` marks the one
/// the query's watermark waits on: under the default `min` policy first the
/// source that has seen no row yet, then the one with the lower watermark.
#[test]
fn progress_names_the_source_holding_the_watermark_back() {
    use weir::plan::{DataType, Field, JoinType};
    let session = crate::common::session();
    let imps = MemoryStream::new(&[
        Field::new("imp_id", DataType::Int64),
        Field::new("imp_ts", DataType::Timestamp),
    ]);
    let clicks = MemoryStream::new(&[
        Field::new("click_id", DataType::Int64),
        Field::new("click_ts", DataType::Timestamp),
    ]);
    let q = session
        .read_stream(imps.clone())
        .with_watermark("imp_ts", "10 minutes")
        .join(
            session
                .read_stream(clicks.clone())
                .with_watermark("click_ts", "2 minutes"),
            weir::dataset::JoinOn::Expr(
                "click_id = imp_id AND click_ts >= imp_ts AND click_ts <= imp_ts + INTERVAL '5 minutes'"
                    .into(),
            ),
            JoinType::LeftOuter,
        )
        .write_stream()
        .output_mode(OutputMode::Append)
        .sink(MemorySink::new(""))
        .start()
        .unwrap();
    // The metrics of the source watermarked on `column`.
    let of = |p: &weir::StreamingQueryProgress, column: &str| -> BTreeMap<String, String> {
        let found: Vec<_> = p
            .sources
            .iter()
            .filter(|s| s.metrics.get("watermarkColumn").map(String::as_str) == Some(column))
            .collect();
        assert_eq!(found.len(), 1, "{column}: {:?}", p.sources);
        found[0].metrics.clone()
    };
    imps.add_json(&[json!({"imp_id": 1, "imp_ts": "2024-01-01T12:30:00Z"})])
        .unwrap();
    q.process_all_available().unwrap();
    let p = q.last_progress().unwrap();
    let (i, c) = (of(&p, "imp_ts"), of(&p, "click_ts"));
    assert_eq!(
        i["maxEventTimeMs"],
        iso_ms("2024-01-01T12:30:00Z").to_string()
    );
    assert_eq!(i["watermarkMs"], iso_ms("2024-01-01T12:20:00Z").to_string());
    assert_eq!(i["watermarkDelayMs"], "600000");
    assert_eq!(i["holdsWatermark"], "0");
    assert_eq!(c["holdsWatermark"], "1", "no click yet: {c:?}");
    assert!(!c.contains_key("maxEventTimeMs"), "{c:?}");
    assert_eq!(c["watermarkDelayMs"], "120000");
    // Clicks up to 12:27: their watermark 12:25 is above the impressions'.
    clicks
        .add_json(&[json!({"click_id": 1, "click_ts": "2024-01-01T12:27:00Z"})])
        .unwrap();
    q.process_all_available().unwrap();
    let p = q.last_progress().unwrap();
    let (i, c) = (of(&p, "imp_ts"), of(&p, "click_ts"));
    assert_eq!(
        c["maxEventTimeMs"],
        iso_ms("2024-01-01T12:27:00Z").to_string()
    );
    assert_eq!(c["watermarkMs"], iso_ms("2024-01-01T12:25:00Z").to_string());
    assert_eq!(
        (i["holdsWatermark"].as_str(), c["holdsWatermark"].as_str()),
        ("1", "0")
    );
    assert_eq!(
        p.event_time["watermark"], "2024-01-01T12:20:00.000Z",
        "the lower of the two"
    );
    q.stop().unwrap();
}

#[test]
fn metrics_answer_only_requests_that_name_the_server() {
    let session = Session::new();
    let ui = UiServer::start(&session, "127.0.0.1:0").unwrap();
    let mut s = std::net::TcpStream::connect(ui.addr()).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: evil.example:{}\r\nConnection: close\r\n\r\n",
        ui.addr().port()
    )
    .unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).unwrap();
    assert!(buf.starts_with("HTTP/1.1 403"), "{buf}");
    assert!(!buf.contains("weir_query"), "{buf}");
    let (code, body) = request(ui.addr(), "GET", "/metrics", &[]);
    assert_eq!(code, 200);
    // No query yet: HELP/TYPE lines at most, no series.
    assert!(parse_exposition(&body).is_empty(), "{body}");
}

/// A session whose UI's stop endpoint takes `token` (None: not configured).
fn admin_session(token: Option<&str>) -> Session {
    let b = Session::builder().config("weir.checkpoint.fsync", "false");
    match token {
        Some(t) => b.config("spark.sql.streaming.weir.adminToken", t),
        None => b,
    }
    .build()
    .unwrap()
}

/// A never-ending query (rate-micro-batch, a batch every 20 ms) with a checkpoint.
fn endless(session: &Session, chk: &Path) -> StreamingQuery {
    session
        .read_stream(RateMicroBatchSource::new(3))
        .write_stream()
        .query_name("endless")
        .trigger(Trigger::processing_time("20 milliseconds").unwrap())
        .sink(MemorySink::new(""))
        .checkpoint_location(chk.to_str().unwrap())
        .start()
        .unwrap()
}

fn stop_path(q: &StreamingQuery) -> String {
    format!("/api/v1/streaming/queries/{}/stop", q.id())
}

#[test]
fn the_stop_endpoint_is_off_without_an_admin_token() {
    let dir = tempfile::tempdir().unwrap();
    let session = admin_session(None);
    let ui = UiServer::start(&session, "127.0.0.1:0").unwrap();
    let q = endless(&session, &dir.path().join("chk"));
    for auth in [vec![], vec![("Authorization", "Bearer anything")]] {
        let (code, body) = request(ui.addr(), "POST", &stop_path(&q), &auth);
        assert_eq!(code, 403, "{body}");
        let err = json_body(&body)["error"].as_str().unwrap().to_string();
        assert!(err.contains("spark.sql.streaming.weir.adminToken"), "{err}");
    }
    std::thread::sleep(Duration::from_millis(100));
    assert!(q.is_active(), "refused: the query runs on");
    // An empty token is no token.
    let empty = admin_session(Some("  "));
    assert!(empty.conf().admin_token.is_none());
    q.stop().unwrap();
}

#[test]
fn the_stop_endpoint_refuses_a_wrong_token_and_an_unknown_query() {
    let dir = tempfile::tempdir().unwrap();
    let session = admin_session(Some("s3cret-token"));
    let ui = UiServer::start(&session, "127.0.0.1:0").unwrap();
    let q = endless(&session, &dir.path().join("chk"));
    for auth in [
        vec![],
        vec![("Authorization", "Bearer s3cret-tokem")],
        vec![("Authorization", "Bearer s3cret")],
        vec![("Authorization", "Basic s3cret-token")],
    ] {
        let (code, body) = request(ui.addr(), "POST", &stop_path(&q), &auth);
        assert_eq!(code, 403, "{auth:?}: {body}");
        assert!(json_body(&body)["error"].is_string(), "{body}");
    }
    // GET is not a way around it.
    assert_eq!(
        request(
            ui.addr(),
            "GET",
            &stop_path(&q),
            &[("Authorization", "Bearer s3cret-token")]
        )
        .0,
        405
    );
    let (code, body) = request(
        ui.addr(),
        "POST",
        "/api/v1/streaming/queries/no-such-query/stop",
        &[("Authorization", "Bearer s3cret-token")],
    );
    assert_eq!(code, 404, "{body}");
    assert!(json_body(&body)["error"]
        .as_str()
        .unwrap()
        .contains("no-such-query"));
    // The Host check comes first: the right token under a rebound name is refused.
    let mut s = std::net::TcpStream::connect(ui.addr()).unwrap();
    write!(
        s,
        "POST {} HTTP/1.1\r\nHost: evil.example:{}\r\nAuthorization: Bearer s3cret-token\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
        stop_path(&q),
        ui.addr().port()
    )
    .unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).unwrap();
    assert!(buf.starts_with("HTTP/1.1 403"), "{buf}");
    assert!(buf.contains("weir.ui.allowedHosts"), "{buf}");
    // Without a token an unknown id is refused the same as a known one.
    assert_eq!(
        request(ui.addr(), "POST", "/api/v1/streaming/queries/x/stop", &[]).0,
        403
    );
    std::thread::sleep(Duration::from_millis(100));
    assert!(q.is_active());
    q.stop().unwrap();
}

/// Every `offsets/N` of a checkpoint has its `commits/N`; the batch ids.
fn committed_batches(chk: &Path) -> Vec<i64> {
    let ids = |d: &str| -> Vec<i64> {
        let mut v: Vec<i64> = std::fs::read_dir(chk.join(d))
            .unwrap()
            .filter_map(|e| e.unwrap().file_name().to_str()?.parse().ok())
            .collect();
        v.sort();
        v
    };
    let (offsets, commits) = (ids("offsets"), ids("commits"));
    assert_eq!(
        offsets, commits,
        "a batch was planned but not committed: not a clean stop"
    );
    offsets
}

#[test]
fn the_stop_endpoint_with_the_token_stops_the_query_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk");
    let session = admin_session(Some("s3cret-token"));
    let ui = UiServer::start(&session, "127.0.0.1:0").unwrap();
    let q = endless(&session, &chk);
    let deadline = Instant::now() + Duration::from_secs(30);
    while q.last_progress().is_none_or(|p| p.batch_id < 2) {
        assert!(Instant::now() < deadline, "no batches");
        std::thread::sleep(Duration::from_millis(10));
    }
    // By run id too; the answer comes once the query has ended.
    let (code, body) = request(
        ui.addr(),
        "POST",
        &format!("/api/v1/streaming/queries/{}/stop", q.run_id()),
        &[("Authorization", "Bearer s3cret-token")],
    );
    assert_eq!(code, 200, "{body}");
    let v = json_body(&body);
    assert_eq!(v["isActive"], false);
    assert_eq!(v["id"], q.id());
    assert_eq!(v["exception"], Value::Null);
    assert!(!q.is_active());
    assert!(q.exception().is_none(), "stopped, not failed");
    assert!(q.await_termination(Some(Duration::ZERO)).unwrap());
    let batches = committed_batches(&chk);
    assert_eq!(
        batches.last().copied(),
        Some(q.last_progress().unwrap().batch_id)
    );
    // Stopping a stopped query answers the same.
    let (code, body) = request(
        ui.addr(),
        "POST",
        &stop_path(&q),
        &[("Authorization", "Bearer s3cret-token")],
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(json_body(&body)["isActive"], false);
}

#[test]
fn stop_settings_are_read_and_checked() {
    let s = Session::builder()
        .config("spark.sql.streaming.stopTimeout", "2500")
        .config("spark.sql.streaming.weir.stopOnSignal", "false")
        .build()
        .unwrap();
    assert_eq!(s.conf().stop_timeout, Duration::from_millis(2500));
    assert!(!s.conf().stop_on_signal);
    let s = Session::builder()
        .config("spark.sql.streaming.stopTimeout", "30s")
        .build()
        .unwrap();
    assert_eq!(s.conf().stop_timeout, Duration::from_secs(30));
    // A session with stopOnSignal (the default) has the handling installed.
    let _on = Session::new();
    assert!(weir::signals::installed());
    let d = SessionConfig::default();
    assert!(d.stop_on_signal && d.stop_timeout.is_zero() && d.admin_token.is_none());
    assert!(Session::builder()
        .config("spark.sql.streaming.stopTimeout", "soon")
        .build()
        .is_err());
    assert!(Session::builder()
        .config("spark.sql.streaming.weir.stopOnSignal", "maybe")
        .build()
        .is_err());
    // The token never shows in a debug print.
    let s = admin_session(Some("s3cret-token"));
    assert!(!format!("{:?}", s.conf()).contains("s3cret"));
}

/// The signal test's query: rate-micro-batch (5 rows a batch, a batch every
/// 40 ms, each taking ~25 ms) into `out.txt` as `batch value` lines, a
/// batch's lines in one write.
fn numbered(session: &Session, dir: &Path) -> StreamingQuery {
    let out = dir.join("out.txt");
    session
        .read_stream(RateMicroBatchSource::new(5))
        .write_stream()
        .query_name("numbered")
        .trigger(Trigger::processing_time("40 milliseconds").unwrap())
        .foreach_batch(move |batch_id, batches| {
            use weir::arrow::array::AsArray;
            use weir::arrow::datatypes::Int64Type;
            let mut lines = String::new();
            for b in batches {
                let idx = b.schema().index_of("value").unwrap();
                for v in b.column(idx).as_primitive::<Int64Type>().values() {
                    lines.push_str(&format!("{batch_id} {v}\n"));
                }
            }
            std::thread::sleep(Duration::from_millis(25));
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&out)
                .map_err(|e| weir::WeirError::io(&out, e))?;
            f.write_all(lines.as_bytes())
                .map_err(|e| weir::WeirError::io(&out, e))?;
            Ok(())
        })
        .checkpoint_location(dir.join("chk").to_str().unwrap())
        .start()
        .unwrap()
}

/// `(batch, value)` lines of `out.txt` (complete lines: the child may be
/// writing the next).
fn output(dir: &Path) -> Vec<(i64, i64)> {
    std::fs::read_to_string(dir.join("out.txt"))
        .unwrap_or_default()
        .split_inclusive('\n')
        .filter_map(|l| l.strip_suffix('\n'))
        .map(|l| {
            let (b, v) = l.split_once(' ').unwrap();
            (b.parse().unwrap(), v.parse().unwrap())
        })
        .collect()
}

fn signal_child_stops_gracefully(signal: &str, test: &str) {
    if let Ok(dir) = std::env::var("WEIR_OPERATE_SIGNAL_CHILD") {
        let session = crate::common::session();
        let q = numbered(&session, Path::new(&dir));
        // The signal ends the query as a stop: Ok, not an error.
        assert!(q.await_termination(None).unwrap());
        assert!(q.exception().is_none());
        std::fs::write(Path::new(&dir).join("child-done"), "").unwrap();
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut child = TestChild::of_test(
        test,
        &[(
            "WEIR_OPERATE_SIGNAL_CHILD",
            dir.path().display().to_string(),
        )],
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while output(dir.path()).last().is_none_or(|l| l.0 < 4) {
        assert!(Instant::now() < deadline, "the child ran no batches");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.signal(signal);
    let status = child.wait_within(
        Duration::from_secs(60),
        &format!("the child signalled {signal}"),
    );
    assert_eq!(status.code(), Some(0), "{signal}: {status}");
    assert!(
        dir.path().join("child-done").exists(),
        "await_termination returned Ok"
    );
    let chk = dir.path().join("chk");
    let before = committed_batches(&chk);
    let last = *before.last().unwrap();
    let first_run = output(dir.path());
    assert_eq!(
        first_run.last().unwrap().0,
        last,
        "the last batch's output is there"
    );
    // A restart resumes after the last committed batch.
    let session = crate::common::session();
    let q = numbered(&session, dir.path());
    let deadline = Instant::now() + Duration::from_secs(60);
    while q.last_progress().is_none_or(|p| p.batch_id < last + 3) {
        assert!(Instant::now() < deadline, "the restart ran no batches");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(q.recent_progress()[0].batch_id, last + 1);
    q.stop().unwrap();
    let rows = output(dir.path());
    // (A batch's values come in the source's partitions' order: Spark's
    // `numPartitions` defaults to the worker threads.)
    let mut values: Vec<i64> = rows.iter().map(|r| r.1).collect();
    values.sort_unstable();
    let n = values.len() as i64;
    assert_eq!(
        values,
        (0..n).collect::<Vec<_>>(),
        "every value once: no batch re-run, none skipped"
    );
    for (b, v) in rows {
        assert_eq!(b, v / 5, "value {v} came in its own batch");
    }
    committed_batches(&chk);
}

#[test]
fn sigterm_stops_the_queries_gracefully_and_a_restart_resumes_exactly() {
    signal_child_stops_gracefully(
        "TERM",
        "operate::sigterm_stops_the_queries_gracefully_and_a_restart_resumes_exactly",
    );
}

#[test]
fn sigint_stops_the_queries_gracefully_and_a_restart_resumes_exactly() {
    signal_child_stops_gracefully(
        "INT",
        "operate::sigint_stops_the_queries_gracefully_and_a_restart_resumes_exactly",
    );
}

/// Kafka lag: with `maxOffsetsPerTrigger` the one batch reads at most 4 of
/// the 14 records of two partitions; `/metrics` shows the rest as the lag.
#[cfg(feature = "kafka")]
#[test]
fn metrics_show_the_kafka_sources_lag() {
    use weir::source::kafka::rdkafka;
    use weir::source::{KafkaSource, StartingOffsets};

    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let topic = format!("weir-it-lag-{}-{nanos:x}", std::process::id());
    crate::kafka::admin().create_topic(&topic, 2).unwrap();
    let p: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", crate::kafka::bootstrap())
        .create()
        .unwrap();
    for (part, n) in [(0, 10), (1, 4)] {
        for i in 0..n {
            let v = format!("r{i}");
            p.send(
                BaseRecord::<str, str>::to(&topic)
                    .partition(part)
                    .payload(&v),
            )
            .map_err(|(e, _)| e)
            .unwrap();
        }
    }
    p.flush(Duration::from_secs(30)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let session = crate::common::session();
    let ui = UiServer::start(&session, "127.0.0.1:0").unwrap();
    let q = session
        .read_stream(
            KafkaSource::new(&crate::kafka::bootstrap())
                .subscribe(&topic)
                .starting_offsets(StartingOffsets::Earliest)
                .option("maxOffsetsPerTrigger", "4"),
        )
        .write_stream()
        .query_name("lagging")
        .trigger(Trigger::Once)
        .sink(MemorySink::new(""))
        .checkpoint_location(dir.path().join("chk").to_str().unwrap())
        .start()
        .unwrap();
    assert!(q.await_termination(Some(Duration::from_secs(120))).unwrap());
    let last = q.last_progress().unwrap();
    let read = last.num_input_rows;
    assert!((1..=4).contains(&read), "{read}");
    let src = &last.sources[0];
    let m = parse_exposition(&request(ui.addr(), "GET", "/metrics", &[]).1);
    let sl = [
        ("name", "lagging"),
        ("source", src.description.as_str()),
        ("source_index", "0"),
    ];
    assert_eq!(
        value(&m, "weir_source_lag_offsets", &sl),
        Some((14 - read) as f64)
    );
    let mut max = sl.to_vec();
    max.push(("metric", "maxOffsetsBehindLatest"));
    assert_eq!(
        value(&m, "weir_source_metric", &max),
        Some(
            src.metrics["maxOffsetsBehindLatest"]
                .parse::<f64>()
                .unwrap()
        )
    );
}

/// A child (this binary, test `test`) whose query's first batch takes 20 s;
/// the parent sends `signals` once the batch started, `gap` apart, and
/// gets the child's exit status and how long it took to end after the first.
fn slow_batch_child(
    test: &str,
    stop_timeout: Option<&str>,
    signals: &[&str],
    gap: Duration,
) -> Option<(std::process::ExitStatus, Duration)> {
    if let Ok(dir) = std::env::var("WEIR_OPERATE_SLOW_CHILD") {
        let dir = Path::new(&dir).to_path_buf();
        let mut b = Session::builder().config("weir.checkpoint.fsync", "false");
        if let Ok(t) = std::env::var("WEIR_OPERATE_STOP_TIMEOUT") {
            b = b.config("spark.sql.streaming.stopTimeout", &t);
        }
        let started = dir.join("batch-started");
        let q = b
            .build()
            .unwrap()
            .read_stream(RateMicroBatchSource::new(1))
            .write_stream()
            .foreach_batch(move |_, _| {
                std::fs::write(&started, "").unwrap();
                std::thread::sleep(Duration::from_secs(20));
                Ok(())
            })
            .checkpoint_location(dir.join("chk").to_str().unwrap())
            .start()
            .unwrap();
        q.await_termination(None).unwrap();
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut envs = vec![("WEIR_OPERATE_SLOW_CHILD", dir.path().display().to_string())];
    if let Some(t) = stop_timeout {
        envs.push(("WEIR_OPERATE_STOP_TIMEOUT", t.to_string()));
    }
    let mut child = TestChild::of_test(test, &envs);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !dir.path().join("batch-started").exists() {
        assert!(Instant::now() < deadline, "the child's batch did not start");
        std::thread::sleep(Duration::from_millis(5));
    }
    let signalled = Instant::now();
    for (i, sig) in signals.iter().enumerate() {
        if i > 0 {
            std::thread::sleep(gap);
        }
        child.signal(sig);
    }
    // Killed past 15 s: the callers' checks of the status then fail.
    let status = child
        .wait_or_kill(Duration::from_secs(15).saturating_sub(signalled.elapsed()))
        .unwrap_or_else(|killed| killed);
    Some((status, signalled.elapsed()))
}

#[test]
fn a_query_still_running_after_the_stop_timeout_ends_the_process_as_the_signal_would() {
    let Some((status, took)) = slow_batch_child(
        "operate::a_query_still_running_after_the_stop_timeout_ends_the_process_as_the_signal_would",
        Some("300"),
        &["TERM"],
        Duration::ZERO,
    ) else {
        return;
    };
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(15), "{status}");
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(10),
        "{took:?}"
    );
}

#[test]
fn a_second_signal_while_stopping_ends_the_process_at_once() {
    let Some((status, took)) = slow_batch_child(
        "operate::a_second_signal_while_stopping_ends_the_process_at_once",
        None,
        &["TERM", "INT"],
        Duration::from_millis(300),
    ) else {
        return;
    };
    use std::os::unix::process::ExitStatusExt;
    // The first waits for the 20 s batch (no timeout); the second ends it.
    assert_eq!(status.signal(), Some(2), "{status}");
    assert!(took < Duration::from_secs(10), "{took:?}");
}

/// A child whose session has `conf` and runs a query when `with_query`,
/// then sleeps; SIGTERM once it is ready: its exit status.
fn term_child(
    test: &str,
    conf: &[(&str, &str)],
    with_query: bool,
) -> Option<std::process::ExitStatus> {
    if let Ok(dir) = std::env::var("WEIR_OPERATE_TERM_CHILD") {
        let dir = Path::new(&dir);
        let mut b = Session::builder().config("weir.checkpoint.fsync", "false");
        for (k, v) in conf {
            b = b.config(k, v);
        }
        let session = b.build().unwrap();
        let _q = with_query.then(|| endless(&session, &dir.join("chk")));
        std::fs::write(dir.join("ready"), "").unwrap();
        std::thread::sleep(Duration::from_secs(20));
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut child = TestChild::of_test(
        test,
        &[("WEIR_OPERATE_TERM_CHILD", dir.path().display().to_string())],
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while !dir.path().join("ready").exists() {
        assert!(Instant::now() < deadline, "the child did not start");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.signal("TERM");
    Some(child.wait_within(Duration::from_secs(10), "the child signalled TERM"))
}

#[test]
fn sigterm_with_no_active_query_ends_the_process_as_usual() {
    use std::os::unix::process::ExitStatusExt;
    if let Some(status) = term_child(
        "operate::sigterm_with_no_active_query_ends_the_process_as_usual",
        &[],
        false,
    ) {
        assert_eq!(status.signal(), Some(15), "{status}");
    }
}

#[test]
fn stop_on_signal_false_leaves_sigterm_alone() {
    use std::os::unix::process::ExitStatusExt;
    if let Some(status) = term_child(
        "operate::stop_on_signal_false_leaves_sigterm_alone",
        &[("spark.sql.streaming.weir.stopOnSignal", "false")],
        true,
    ) {
        assert_eq!(status.signal(), Some(15), "{status}");
    }
}
