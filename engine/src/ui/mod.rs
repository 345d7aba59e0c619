//! The Streaming page: an HTTP server (Spark UI's "Structured Streaming"
//! tab, on 127.0.0.1:4040 by default) and a JSON API over the same data.
//!
//! `GET /StreamingQuery/` lists active, completed and failed queries (with
//! the error) and, for the selected one, Spark's query statistics: timelines
//! with time and value axes, the value under the pointer, and a histogram
//! each, for input rate, process rate, input rows, batch duration, the
//! operation durations (stacked: latestOffset, getBatch, walCommit, addBatch,
//! commitOffsets, queryPlanning), the global watermark gap and the
//! aggregated state rows (total, updated), state memory, rows dropped by
//! the watermark and late rows routed to the side output; "Why no output
//! yet?" (append mode: the next window due to close, the watermark it
//! waits for, and the source holding the watermark back, from the
//! progress fields of [`crate::progress::held`]); then the table of recent
//! batches, a row opening that batch's progress JSON. The selection lives in the URL
//! (`#q=<runId>&batch=<id>`). One file, hand-drawn SVG, no external assets.
//!
//! - `GET /api/v1/streaming/queries`: every query of the session, with its
//!   status and last progress;
//! - `GET /api/v1/streaming/queries/<runId>/progress`: its recent progress;
//! - `GET /metrics`: every query's last progress in Prometheus' text format
//!   (see [`metrics`] for the series; `examples/grafana/weir.json` is a
//!   Grafana dashboard over them);
//! - `POST /api/v1/streaming/queries/<id>/stop`: stops a query gracefully,
//!   off unless `spark.sql.streaming.weir.adminToken` is set (see [`admin`]).
//!
//! Enabled with the `ui` feature; started by [`UiServer::start`] on an
//! address, or by [`UiServer::start_if_enabled`] as the session settings
//! say: `spark.ui.enabled` (default true; false: no server) and
//! `spark.ui.port` (default 4040, the first free port from it up).
//!
//! The server answers only requests whose `Host` header names it: its bound
//! address, `localhost`, `127.0.0.1` or `[::1]`, with its port, or a name the
//! session setting `weir.ui.allowedHosts` lists (comma-separated, `name` for
//! the server's port or `name:port`; `*` turns the check off). Anything
//! else gets 403: a web page whose DNS name was rebound to 127.0.0.1 cannot
//! read the JSON API, whose `exception` texts may quote records.

pub mod admin;
pub mod metrics;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Path, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};

use crate::error::{Result, WeirError};
use crate::session::Session;

const PAGE: &str = include_str!("page.html");

/// A running UI server; it stops when dropped.
pub struct UiServer {
    addr: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for UiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UiServer")
            .field("addr", &self.addr)
            .finish()
    }
}

fn query_json(q: &crate::StreamingQuery) -> Value {
    json!({
        "id": q.id(),
        "runId": q.run_id(),
        "name": q.name(),
        "isActive": q.is_active(),
        "status": q.status(),
        "exception": q.exception().map(|e| e.to_string()),
        "lastProgress": q.last_progress(),
        "outputMode": output_mode(q),
    })
}

/// The query's output mode (`append`, `update` or `complete`), as its
/// explain text states it (the progress JSON, as Spark's, has none).
fn output_mode(q: &crate::StreamingQuery) -> String {
    q.output_mode().spark_name().to_ascii_lowercase()
}

async fn queries(State(s): State<Session>) -> impl IntoResponse {
    let qs: Vec<Value> = s
        .inner
        .queries
        .lock()
        .unwrap()
        .iter()
        .map(query_json)
        .collect();
    axum::Json(json!({ "queries": qs }))
}

async fn progress(State(s): State<Session>, Path(run_id): Path<String>) -> Response {
    let found = s
        .inner
        .queries
        .lock()
        .unwrap()
        .iter()
        .find(|q| q.run_id() == run_id || q.id() == run_id)
        .cloned();
    match found {
        Some(q) => axum::Json(json!({ "query": query_json(&q), "progress": q.recent_progress() }))
            .into_response(),
        None => (
            StatusCode::NOT_FOUND,
            format!("no query with run id {run_id}"),
        )
            .into_response(),
    }
}

/// Which `Host` header values the server answers (see the module docs).
#[derive(Debug, Clone)]
pub struct HostCheck {
    port: u16,
    /// Host names (lowercase, IPv6 in brackets) accepted with `port`.
    names: Vec<String>,
    /// `name:port` pairs accepted as they are.
    exact: Vec<(String, u16)>,
    /// `*` was allowed: no check.
    any: bool,
}

/// Splits a `Host` value into its lowercase name (IPv6 in brackets, no
/// trailing dot) and port; `None` when it is not `name[:port]`.
fn split_host(host: &str) -> Option<(String, Option<u16>)> {
    let host = host.trim();
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (format!("[{v6}]"), port)
    } else {
        match host.split_once(':') {
            Some((n, p)) => (n.to_string(), Some(p)),
            None => (host.to_string(), None),
        }
    };
    let port = match port {
        Some(p) => Some(p.parse::<u16>().ok()?),
        None => None,
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    (!name.is_empty()).then_some((name, port))
}

impl HostCheck {
    /// The check for a server bound to `bound`, with the user's extra
    /// names (`weir.ui.allowedHosts` entries: `name`, `name:port` or `*`).
    pub fn new(bound: SocketAddr, allowed: &[String]) -> HostCheck {
        let bound_name = match bound.ip() {
            std::net::IpAddr::V4(ip) => ip.to_string(),
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        };
        let mut c = HostCheck {
            port: bound.port(),
            names: vec![
                "localhost".into(),
                "127.0.0.1".into(),
                "[::1]".into(),
                bound_name,
            ],
            exact: Vec::new(),
            any: false,
        };
        for a in allowed.iter().map(|a| a.trim()).filter(|a| !a.is_empty()) {
            if a == "*" {
                c.any = true;
                continue;
            }
            match split_host(a) {
                Some((n, Some(p))) => c.exact.push((n, p)),
                Some((n, None)) => c.names.push(n),
                None => tracing::warn!("weir.ui.allowedHosts: `{a}` is not a host name; ignored"),
            }
        }
        c
    }

    /// Whether a request with this `Host` header (None: none) is answered.
    /// A Host without a port means port 80.
    pub fn allows(&self, host: Option<&str>) -> bool {
        if self.any {
            return true;
        }
        let Some((name, port)) = host.and_then(split_host) else {
            return false;
        };
        let port = port.unwrap_or(80);
        (port == self.port && self.names.contains(&name))
            || self.exact.iter().any(|(n, p)| *n == name && *p == port)
    }
}

async fn check_host(State(check): State<Arc<HostCheck>>, req: Request, next: Next) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .map(|h| h.to_str().unwrap_or("\u{fffd}"));
    if check.allows(host) {
        return next.run(req).await;
    }
    (
        StatusCode::FORBIDDEN,
        format!(
            "Host {} is not allowed: the Streaming UI answers to localhost, 127.0.0.1, [::1] and its bound address on port {} (a defence against DNS rebinding). To reach it under another name, list it in the session setting `weir.ui.allowedHosts`.\n",
            host.map(|h| format!("`{h}`")).unwrap_or_else(|| "(none)".into()),
            check.port
        ),
    )
        .into_response()
}

async fn prometheus(State((s, m)): State<(Session, Arc<metrics::Metrics>)>) -> Response {
    let qs: Vec<crate::StreamingQuery> = s
        .inner
        .queries
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    (
        [
            (header::CONTENT_TYPE, prometheus::TEXT_FORMAT),
            (header::CACHE_CONTROL, "no-store"),
        ],
        m.render(&qs),
    )
        .into_response()
}

async fn page() -> impl IntoResponse {
    ([(header::CACHE_CONTROL, "no-store")], Html(PAGE))
}

impl UiServer {
    /// Serves the session's Streaming page on `addr` (port 0: any free port),
    /// whatever `spark.ui.enabled` says (an explicit request).
    pub fn start(session: &Session, addr: &str) -> Result<UiServer> {
        let listener = std::net::TcpListener::bind(addr)
            .map_err(|e| WeirError::Config(format!("the UI cannot listen on {addr}: {e}")))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| WeirError::io(addr, e))?;
        let local = listener.local_addr().map_err(|e| WeirError::io(addr, e))?;
        let hosts = Arc::new(HostCheck::new(local, &session.conf().ui_allowed_hosts));
        let metrics = Arc::new(metrics::Metrics::new()?);
        let scrape = Router::new()
            .route("/metrics", get(prometheus))
            .with_state((session.clone(), metrics));
        let app = Router::new()
            .route(
                "/",
                get(|| async { Redirect::temporary("/StreamingQuery/") }),
            )
            .route("/StreamingQuery/", get(page))
            .route("/api/v1/streaming/queries", get(queries))
            .route("/api/v1/streaming/queries/{run_id}/progress", get(progress))
            .route("/api/v1/streaming/queries/{id}/stop", post(admin::stop))
            .with_state(session.clone())
            .merge(scrape)
            .layer(axum::middleware::from_fn_with_state(hosts, check_host));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .map_err(|e| WeirError::Config(format!("cannot start the UI runtime: {e}")))?;
        let thread = std::thread::Builder::new()
            .name("weir-ui".into())
            .spawn(move || {
                rt.block_on(async move {
                    let Ok(l) = tokio::net::TcpListener::from_std(listener) else {
                        return;
                    };
                    let _ = axum::serve(l, app)
                        .with_graceful_shutdown(async move {
                            let _ = rx.await;
                        })
                        .await;
                })
            })
            .map_err(|e| WeirError::Config(format!("cannot start the UI thread: {e}")))?;
        Ok(UiServer {
            addr: local,
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    /// Serves on 127.0.0.1, on the first free port from `spark.ui.port`
    /// (default 4040) up, trying 17 ports as Spark's UI does. An error when
    /// the session has `spark.ui.enabled=false` (see
    /// [`UiServer::start_if_enabled`]).
    pub fn start_default(session: &Session) -> Result<UiServer> {
        if !session.conf().ui_enabled {
            return Err(WeirError::Config(
                "the Streaming UI is disabled (spark.ui.enabled=false)".into(),
            ));
        }
        let first = session.conf().ui_port;
        if first == 0 {
            return Self::start(session, "127.0.0.1:0");
        }
        let mut last = None;
        for port in (first..=first.saturating_add(16)).take(17) {
            match Self::start(session, &format!("127.0.0.1:{port}")) {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| WeirError::Config("no free port for the UI".into())))
    }

    /// [`UiServer::start_default`] when the session has
    /// `spark.ui.enabled=true` (the default); `None` when it is false.
    pub fn start_if_enabled(session: &Session) -> Result<Option<UiServer>> {
        if !session.conf().ui_enabled {
            return Ok(None);
        }
        Self::start_default(session).map(Some)
    }

    /// The address it serves on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The Streaming page's URL.
    pub fn url(&self) -> String {
        format!("http://{}/StreamingQuery/", self.addr)
    }
}

impl Drop for UiServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
