//! The Streaming page and its JSON API, over real HTTP on 127.0.0.1.

use std::io::{Read, Write};

use serde_json::json;
use weir::plan::{DataType, Field};
use weir::sink::MemorySink;
use weir::source::MemoryStream;
use weir::ui::UiServer;
use weir::Session;

fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    get_as(addr, path, Some(&format!("localhost:{}", addr.port())))
}

/// A GET with this `Host` header (None: an HTTP/1.0 request without one).
fn get_as(addr: std::net::SocketAddr, path: &str, host: Option<&str>) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    match host {
        Some(host) => write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        ),
        None => write!(s, "GET {path} HTTP/1.0\r\n\r\n"),
    }
    .unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).unwrap();
    let code = buf.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = buf
        .split_once("\r\n\r\n")
        .map(|b| b.1.to_string())
        .unwrap_or_default();
    (code, body)
}

#[test]
fn the_streaming_page_and_api_show_each_query() {
    let session = Session::new();
    let ui = UiServer::start(&session, "127.0.0.1:0").unwrap();
    let stream = MemoryStream::new(&[Field::new("k", DataType::String)]);
    let q = session
        .read_stream(stream.clone())
        .write_stream()
        .query_name("shown")
        .sink(MemorySink::new(""))
        .start()
        .unwrap();
    stream
        .add_json(&[json!({"k": "a"}), json!({"k": "b"})])
        .unwrap();
    q.process_all_available().unwrap();
    let (code, page) = get(ui.addr(), "/StreamingQuery/");
    assert_eq!(code, 200);
    assert!(page.contains("Structured Streaming") && page.contains("Input Rate"));
    let (code, body) = get(ui.addr(), "/api/v1/streaming/queries");
    assert_eq!(code, 200);
    // The body may be chunked; find the JSON object.
    let json_text = &body[body.find('{').unwrap()..=body.rfind('}').unwrap()];
    let v: serde_json::Value = serde_json::from_str(json_text).unwrap();
    assert_eq!(v["queries"][0]["name"], "shown");
    assert_eq!(v["queries"][0]["lastProgress"]["numInputRows"], 2);
    let (code, body) = get(
        ui.addr(),
        &format!("/api/v1/streaming/queries/{}/progress", q.run_id()),
    );
    assert_eq!(code, 200);
    assert!(body.contains("\"batchId\":0"), "{body}");
    assert_eq!(
        get(ui.addr(), "/api/v1/streaming/queries/nope/progress").0,
        404
    );
    q.stop().unwrap();
}

#[test]
fn the_ui_answers_only_requests_that_name_it_dns_rebinding() {
    let session = Session::new();
    let ui = UiServer::start(&session, "127.0.0.1:0").unwrap();
    let (addr, port) = (ui.addr(), ui.addr().port());
    let api = "/api/v1/streaming/queries";
    for ok in [
        format!("localhost:{port}"),
        format!("LocalHost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
    ] {
        assert_eq!(get_as(addr, api, Some(&ok)).0, 200, "{ok}");
    }
    // A page of evil.example whose name now resolves to 127.0.0.1 sends its
    // own name: no data for it, on any path.
    for bad in [
        format!("evil.example:{port}"),
        format!("localhost.evil.example:{port}"),
        format!("127.0.0.1.nip.io:{port}"),
        "evil.example".to_string(),
        format!("localhost:{}", port.wrapping_add(1).max(1)),
        "localhost".to_string(),
    ] {
        let (code, body) = get_as(addr, api, Some(&bad));
        assert_eq!(code, 403, "{bad:?}: {body}");
        assert!(!body.contains("queries\""), "{body}");
        assert_eq!(get_as(addr, "/StreamingQuery/", Some(&bad)).0, 403);
    }
    let (code, body) = get_as(addr, api, None);
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("weir.ui.allowedHosts"), "{body}");
}

#[test]
fn names_the_session_allows_are_answered() {
    let session = Session::builder()
        .config(
            "weir.ui.allowedHosts",
            " stats.internal , proxy.internal:8443",
        )
        .build()
        .unwrap();
    let ui = UiServer::start(&session, "127.0.0.1:0").unwrap();
    let (addr, port) = (ui.addr(), ui.addr().port());
    let api = "/api/v1/streaming/queries";
    assert_eq!(
        get_as(addr, api, Some(&format!("stats.internal:{port}"))).0,
        200
    );
    assert_eq!(get_as(addr, api, Some("proxy.internal:8443")).0, 200);
    assert_eq!(get_as(addr, api, Some(&format!("localhost:{port}"))).0, 200);
    if port != 8443 {
        assert_eq!(
            get_as(addr, api, Some(&format!("proxy.internal:{port}"))).0,
            403
        );
    }
    assert_eq!(
        get_as(addr, api, Some(&format!("other.internal:{port}"))).0,
        403
    );
    // `*` turns the check off (e.g. behind a proxy that checks names).
    let open = Session::builder()
        .config("weir.ui.allowedHosts", "*")
        .build()
        .unwrap();
    let ui = UiServer::start(&open, "127.0.0.1:0").unwrap();
    assert_eq!(get_as(ui.addr(), api, Some("anything.example")).0, 200);
}

#[test]
fn spark_ui_enabled_false_starts_no_server_and_spark_ui_port_is_used() {
    let off = Session::builder()
        .config("spark.ui.enabled", "false")
        .build()
        .unwrap();
    assert!(UiServer::start_if_enabled(&off).unwrap().is_none());
    let err = UiServer::start_default(&off).unwrap_err();
    assert!(err.to_string().contains("spark.ui.enabled"), "{err}");
    assert!(Session::builder()
        .config("spark.ui.enabled", "maybe")
        .build()
        .is_err());
    // A free port, then the UI on it (or, if taken meanwhile, the next ones).
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let on = Session::builder()
        .config("spark.ui.enabled", "true")
        .config("spark.ui.port", &free.to_string())
        .build()
        .unwrap();
    let ui = UiServer::start_if_enabled(&on).unwrap().unwrap();
    let port = ui.addr().port();
    assert!(port >= free && port <= free.saturating_add(16), "{port}");
    assert_eq!(get(ui.addr(), "/api/v1/streaming/queries").0, 200);
}

/// Chromium (`WEIR_CHROMIUM`, else `chromium` on the PATH), headless: the
/// page's DOM once its scripts ran against the server.
fn rendered_dom(url: &str) -> String {
    let bin = std::env::var("WEIR_CHROMIUM").unwrap_or_else(|_| "chromium".into());
    dump_dom(&bin, url, std::time::Duration::from_secs(60))
}

/// `bin --headless --dump-dom url`, killed (with the processes it started)
/// and the test failed when it has not ended within `limit`: as root in a
/// container Chromium can hang (a small /dev/shm, no D-Bus), which must not
/// hang the test run.
fn dump_dom(bin: &str, url: &str, limit: std::time::Duration) -> String {
    use std::io::Read;
    let profile = tempfile::tempdir().unwrap();
    let mut child = crate::common::TestChild::spawn_group(
        std::process::Command::new(bin)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--virtual-time-budget=5000",
                &format!("--user-data-dir={}", profile.path().display()),
                "--dump-dom",
                url,
            ])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped()),
    )
    .unwrap_or_else(|e| {
        panic!(
            "cannot run `{bin}` ({e}): the Streaming page's browser test needs Chromium. \
             Install Debian's package (`apt-get install -y chromium`; `bash scripts/setup.sh` \
             does it) or point WEIR_CHROMIUM at a Chromium binary"
        )
    });
    // Read while it runs (a full pipe would stall it); a reader still
    // blocked at the deadline (a process holding the pipe) is left behind.
    let read = |pipe: Option<Box<dyn Read + Send>>| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut out = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut out);
            }
            let _ = tx.send(out);
        });
        rx
    };
    let c = child.child_mut();
    let stdout = read(c.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let stderr = read(c.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let status = child.wait_within(
        limit,
        &format!(
            "`{bin} --headless --dump-dom {url}` hung; check that Chromium starts here \
             (e.g. `{bin} --headless --no-sandbox --disable-dev-shm-usage --dump-dom about:blank`)"
        ),
    );
    let collect = |rx: std::sync::mpsc::Receiver<Vec<u8>>| {
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .unwrap_or_default()
    };
    let (out, err) = (collect(stdout), collect(stderr));
    assert!(
        status.success(),
        "{bin}: {status}: {}",
        String::from_utf8_lossy(&err)
    );
    String::from_utf8(out).unwrap()
}

/// A screenshot of the page at `url` into `png` (for notes and reviews:
/// the tests that take one do so when `WEIR_UI_SCREENSHOTS` names a
/// directory).
fn screenshot(url: &str, png: &std::path::Path) {
    let bin = std::env::var("WEIR_CHROMIUM").unwrap_or_else(|_| "chromium".into());
    let profile = tempfile::tempdir().unwrap();
    let mut child = crate::common::TestChild::spawn_group(
        std::process::Command::new(&bin)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--hide-scrollbars",
                "--virtual-time-budget=5000",
                "--window-size=1400,1900",
                &format!("--user-data-dir={}", profile.path().display()),
                &format!("--screenshot={}", png.display()),
                url,
            ])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null()),
    )
    .unwrap_or_else(|e| panic!("cannot run `{bin}` ({e})"));
    let status = child.wait_within(
        std::time::Duration::from_secs(60),
        &format!("`{bin} --headless --screenshot` hung"),
    );
    assert!(status.success() && png.exists(), "{bin}: {status}");
}

#[test]
#[should_panic(expected = "--dump-dom http://127.0.0.1:9/` hung")]
fn a_browser_that_hangs_fails_the_test_at_its_deadline() {
    // A "browser" that never ends (exec: the shell is the process waited for).
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("hanging-chromium");
    std::fs::write(&bin, "#!/bin/sh\nexec sleep 60\n").unwrap();
    let mut perms = std::fs::metadata(&bin).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&bin, perms).unwrap();
    let start = std::time::Instant::now();
    let r = std::panic::catch_unwind(|| {
        dump_dom(
            bin.to_str().unwrap(),
            "http://127.0.0.1:9/",
            std::time::Duration::from_millis(300),
        )
    });
    assert!(start.elapsed() < std::time::Duration::from_secs(20));
    std::panic::resume_unwind(r.unwrap_err());
}

/// The part of `dom` from `start` up to the next `end` (or the end).
fn section<'a>(dom: &'a str, start: &str, end: &str) -> &'a str {
    let from = dom
        .find(start)
        .unwrap_or_else(|| panic!("no `{start}` in the page:\n{dom}"));
    let rest = &dom[from + start.len()..];
    &rest[..rest.find(end).unwrap_or(rest.len())]
}

#[test]
fn the_streaming_page_draws_charts_the_batch_table_and_a_batch_in_chromium() {
    use weir::functions::{col, count_star, window};
    let session = Session::new();
    let ui = UiServer::start(&session, "127.0.0.1:0").unwrap();
    let fields = crate::common::fields();
    let stream = MemoryStream::new(&fields);
    let q = session
        .read_stream(stream.clone())
        .with_watermark("ts", "10 seconds")
        .group_by(vec![window("ts", "10 seconds"), col("key")])
        .agg(vec![count_star("n")])
        .write_stream()
        .output_mode(weir::plan::OutputMode::Update)
        .query_name("charted")
        .sink(MemorySink::new(""))
        .start()
        .unwrap();
    for (i, ts) in ["12:00:01", "12:00:15", "12:00:40", "12:01:10"]
        .iter()
        .enumerate()
    {
        stream
            .add_json(&[
                json!({"ts": format!("2024-01-01T{ts}Z"), "key": format!("k{i}"), "value": i}),
            ])
            .unwrap();
        q.process_all_available().unwrap();
    }
    q.stop().unwrap();
    let ps = q.recent_progress();
    assert!(ps.len() >= 4, "{}", ps.len());
    // A failed query shows with its error.
    let bad = MemoryStream::new(&fields);
    let chk = tempfile::tempdir().unwrap();
    let failing = session
        .read_stream(bad.clone())
        .write_stream()
        .query_name("broken")
        .foreach_batch(|_, _| Err(weir::WeirError::Config("the sink said no".into())))
        .checkpoint_location(chk.path().to_str().unwrap())
        .start()
        .unwrap();
    bad.add_json(&[json!({"ts": "2024-01-01T12:00:00Z", "key": "a", "value": 1})])
        .unwrap();
    assert!(failing
        .await_termination(Some(std::time::Duration::from_secs(30)))
        .is_err());

    let shown = &ps[1];
    let dom = rendered_dom(&format!(
        "http://localhost:{}/StreamingQuery/#q={}&batch={}",
        ui.addr().port(),
        q.run_id(),
        shown.batch_id
    ));
    let n = ps.len();
    let charts = section(&dom, "id=\"charts\"", "Completed batches");
    // A timeline per chart: a point per batch, time and value axes labelled.
    let input = section(charts, "data-chart=\"Input Rate\"", "data-chart=");
    assert_eq!(input.matches("<circle class=\"pt\"").count(), n, "{input}");
    let first = ps[0].timestamp[11..19].to_string();
    assert!(
        input.contains(&format!("text-anchor=\"start\">{first}")),
        "time axis: {input}"
    );
    assert!(input.matches("class=\"ytick\"").count() >= 3, "{input}");
    assert!(
        input.contains("<svg class=\"hist\""),
        "a histogram: {input}"
    );
    assert!(
        input.contains(&format!("batch {} · ", ps[n - 1].batch_id)),
        "hover label: {input}"
    );
    // Operation durations: stacked, six phases a batch.
    let ops = section(charts, "data-chart=\"Operation Duration\"", "data-chart=");
    assert_eq!(ops.matches("<rect class=\"pt\"").count(), n * 6, "{ops}");
    assert!(
        ops.contains("addBatch") && ops.contains("walCommit"),
        "{ops}"
    );
    // The watermark gap once there is a watermark (batch 0's is the epoch: none).
    let with_wm = ps
        .iter()
        .filter(|p| {
            p.event_time
                .get("watermark")
                .is_some_and(|w| crate::common::iso_ms(w) > 0)
        })
        .count();
    assert!(with_wm >= 3 && with_wm < n, "{with_wm} of {n}");
    let gap = section(charts, "data-chart=\"Global Watermark Gap\"", "data-chart=");
    assert_eq!(gap.matches("class=\"pt\"").count(), with_wm, "{gap}");
    for c in [
        "Process Rate",
        "Input Rows",
        "Batch Duration",
        "Aggregated Number Of Total State Rows",
        "Aggregated State Memory Used In Bytes",
        "Aggregated Number Of Rows Dropped By Watermark",
    ] {
        let part = section(charts, &format!("data-chart=\"{c}\""), "data-chart=");
        assert_eq!(part.matches("class=\"pt\"").count(), n, "{c}: {part}");
    }
    // No late-rows side output: no chart of it; update mode: no "why" panel.
    assert!(
        !charts.contains("Late Rows Routed To Side Output"),
        "{charts}"
    );
    assert_eq!(section(&dom, "<div id=\"why\">", "</div>"), "", "{dom}");
    // The batch table, newest first, and the batch opened by the URL.
    let table = section(&dom, "id=\"batches\"", "</table>");
    assert_eq!(table.matches("class=\"pick batch").count(), n, "{table}");
    assert!(
        table.find(&format!("data-batch=\"{}\"", ps[n - 1].batch_id))
            < table.find(&format!("data-batch=\"{}\"", ps[0].batch_id))
    );
    let detail = section(&dom, "id=\"detail-json\"", "</pre>");
    assert!(
        detail.contains(&format!("\"batchId\": {}", shown.batch_id)),
        "{detail}"
    );
    assert!(detail.contains(&shown.run_id), "{detail}");
    // Completed and failed queries.
    let completed = section(&dom, "id=\"completed\"", "</table>");
    assert!(
        completed.contains("charted") && completed.contains("FINISHED"),
        "{completed}"
    );
    let failed = section(&dom, "id=\"failed\"", "</table>");
    assert!(
        failed.contains("broken") && failed.contains("the sink said no"),
        "{failed}"
    );
}

#[test]
fn the_streaming_page_says_why_no_output_yet_and_charts_late_rows_in_chromium() {
    use weir::functions::{col, count_star, window};
    let session = Session::new();
    let ui = UiServer::start(&session, "127.0.0.1:0").unwrap();
    let stream = MemoryStream::new(&crate::common::fields());
    let late = MemorySink::new("");
    let late_table = late.table();
    let q = session
        .read_stream(stream.clone())
        .with_watermark("ts", "2 minutes")
        .group_by(vec![window("ts", "5 minutes"), col("key")])
        .agg(vec![count_star("n")])
        .write_stream()
        .output_mode(weir::plan::OutputMode::Append)
        .query_name("held")
        .sink(MemorySink::new(""))
        .late_rows_to(late)
        .start()
        .unwrap();
    let ev =
        |ts: &str, key: &str| json!({"ts": format!("2024-01-01T{ts}Z"), "key": key, "value": 1});
    // Max event time 10:04: the watermark becomes 10:02 (a no-data batch
    // runs with it), window [10:00, 10:05) stays open.
    stream
        .add_json(&[ev("10:01:00", "a"), ev("10:04:00", "b")])
        .unwrap();
    q.process_all_available().unwrap();
    // A row behind the watermark (its window ended 09:55) goes aside; an
    // on-time one leaves the watermark where it is.
    stream
        .add_json(&[ev("09:50:00", "late"), ev("10:03:00", "a")])
        .unwrap();
    q.process_all_available().unwrap();
    let ps = q.recent_progress();
    let n = ps.len();
    let last = ps.last().unwrap();
    assert_eq!(
        last.event_time["watermark"], "2024-01-01T10:02:00.000Z",
        "the test's premise"
    );
    assert_eq!(
        late_table
            .batches()
            .iter()
            .flat_map(|(_, b)| b.iter().map(|b| b.num_rows()))
            .sum::<usize>(),
        1
    );
    assert_eq!(
        last.state_operators[0].custom_metrics["numLateRowsToSideOutput"],
        1
    );
    assert_eq!(last.state_operators[0].num_rows_dropped_by_watermark, 1);

    let url = format!(
        "http://localhost:{}/StreamingQuery/#q={}",
        ui.addr().port(),
        q.run_id()
    );
    let dom = rendered_dom(&url);
    if let Ok(dir) = std::env::var("WEIR_UI_SCREENSHOTS") {
        screenshot(
            &url,
            &std::path::Path::new(&dir).join("streaming-why-no-output.png"),
        );
    }
    q.stop().unwrap();
    let why = section(&dom, "id=\"why\"", "id=\"charts\"");
    assert!(why.contains("Why no output yet?"), "{why}");
    let next = section(why, "id=\"why-next\">", "</p>");
    assert_eq!(
        next,
        "Window [2024-01-01 10:00:00, 2024-01-01 10:05:00) closes when the watermark reaches \
         2024-01-01 10:05:00; the watermark is 2024-01-01 10:02:00, held by source MemoryStream \
         (column ts, max event time 2024-01-01 10:04:00, delay 2 min)."
    );
    assert!(
        !why.contains("id=\"why-then\""),
        "the watermark will not move: {why}"
    );
    let sources = section(why, "id=\"why-sources\"", "</table>");
    assert!(
        sources.contains("<td>MemoryStream</td><td>ts</td><td>2 min</td><td>2024-01-01 10:04:00</td><td>2024-01-01 10:02:00</td><td>holds the query's watermark</td>"),
        "{sources}"
    );
    // The late rows chart: a point per batch, the late row in the last.
    let charts = section(&dom, "id=\"charts\"", "Completed batches");
    let late = section(
        charts,
        "data-chart=\"Late Rows Routed To Side Output\"",
        "data-chart=",
    );
    assert_eq!(late.matches("<circle class=\"pt\"").count(), n, "{late}");
    let label = |p: &weir::StreamingQueryProgress, v: i64| {
        format!("batch {} · {} · {v} rows", p.batch_id, &p.timestamp[11..19])
    };
    assert!(late.contains(&label(last, 1)), "{late}");
    for p in &ps[..n - 1] {
        assert!(late.contains(&label(p, 0)), "{late}");
    }
    // Next to it, the rows the watermark dropped.
    let dropped = section(
        charts,
        "data-chart=\"Aggregated Number Of Rows Dropped By Watermark\"",
        "data-chart=",
    );
    assert!(dropped.contains(&label(last, 1)), "{dropped}");
}
