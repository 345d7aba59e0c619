//! The Streaming page and its JSON API, over real HTTP on 127.0.0.1.

use std::io::{Read, Write};

use serde_json::json;
use weir::plan::{DataType, Field};
use weir::sink::MemorySink;
use weir::source::MemoryStream;
use weir::ui::UiServer;
use weir::Session;

fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
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
