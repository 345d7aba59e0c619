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
