//! The Streaming page: an HTTP server (Spark UI's "Structured Streaming"
//! tab, on 127.0.0.1:4040 by default) with a page per query charting input
//! rate, process rate, batch duration, input rows and the watermark, and a
//! JSON API over the same data:
//!
//! - `GET /api/v1/streaming/queries`: every query of the session, with its
//!   status and last progress;
//! - `GET /api/v1/streaming/queries/<runId>/progress`: its recent progress.
//!
//! Enabled with the `ui` feature; started by [`UiServer::start`] (or the
//! session setting `spark.ui.enabled=true`, port `spark.ui.port`).

use std::net::SocketAddr;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
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
    })
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

async fn page() -> impl IntoResponse {
    ([(header::CACHE_CONTROL, "no-store")], Html(PAGE))
}

impl UiServer {
    /// Serves the session's Streaming page on `addr` (port 0: any free port).
    pub fn start(session: &Session, addr: &str) -> Result<UiServer> {
        let listener = std::net::TcpListener::bind(addr)
            .map_err(|e| WeirError::Config(format!("the UI cannot listen on {addr}: {e}")))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| WeirError::io(addr, e))?;
        let local = listener.local_addr().map_err(|e| WeirError::io(addr, e))?;
        let app = Router::new()
            .route(
                "/",
                get(|| async { Redirect::temporary("/StreamingQuery/") }),
            )
            .route("/StreamingQuery/", get(page))
            .route("/api/v1/streaming/queries", get(queries))
            .route("/api/v1/streaming/queries/{run_id}/progress", get(progress))
            .with_state(session.clone());
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

    /// Serves on the first free port from 4040 up (as Spark's UI does), on 127.0.0.1.
    pub fn start_default(session: &Session) -> Result<UiServer> {
        let mut last = None;
        for port in 4040..4057 {
            match Self::start(session, &format!("127.0.0.1:{port}")) {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| WeirError::Config("no free port for the UI".into())))
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
