//! `POST /api/v1/streaming/queries/{id}/stop`: stops a query gracefully from
//! outside the program (the running batch finishes and commits, then the
//! query ends, as [`StreamingQuery::stop`](crate::StreamingQuery::stop)).
//!
//! Off unless the session setting `spark.sql.streaming.weir.adminToken` is
//! set; then a request must carry `Authorization: Bearer <that token>`.
//! Answers (JSON):
//!
//! - 200 `{"id", "runId", "name", "isActive": false, "exception"}` once the
//!   query has ended (already ended: the same, nothing done);
//! - 403 `{"error": ...}` when no token is configured, or the request has
//!   no or another token;
//! - 404 `{"error": ...}` when no query of the session has this id or run id.
//!
//! A bearer token also keeps other web pages out: a browser sends no
//! `Authorization` header cross-origin without a CORS preflight, which the
//! server does not answer.

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::session::Session;

/// Compares in time independent of where the strings differ (only their
/// lengths show).
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn refuse(code: StatusCode, message: String) -> Response {
    (code, axum::Json(json!({ "error": message }))).into_response()
}

/// Why a request may not use the admin endpoints, or `None` when it may.
fn unauthorized(session: &Session, headers: &HeaderMap) -> Option<String> {
    let Some(token) = session.conf().admin_token.as_deref() else {
        return Some(
            "the admin endpoints are off: set the session setting `spark.sql.streaming.weir.adminToken` to a secret and send it as `Authorization: Bearer <token>`".into(),
        );
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| {
            h.strip_prefix("Bearer ")
                .or_else(|| h.strip_prefix("bearer "))
        })
        .map(str::trim);
    match given {
        None => Some(
            "no admin token: send `Authorization: Bearer <token>` with the session's `spark.sql.streaming.weir.adminToken`".into(),
        ),
        Some(t) if !constant_time_eq(t.as_bytes(), token.as_bytes()) => Some(
            "wrong admin token: it must equal the session's `spark.sql.streaming.weir.adminToken`".into(),
        ),
        Some(_) => None,
    }
}

/// The stop endpoint's handler.
pub(crate) async fn stop(
    State(s): State<Session>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(why) = unauthorized(&s, &headers) {
        return refuse(StatusCode::FORBIDDEN, why);
    }
    let found = s
        .inner
        .queries
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .rev()
        .find(|q| q.id() == id || q.run_id() == id)
        .cloned();
    let Some(q) = found else {
        return refuse(
            StatusCode::NOT_FOUND,
            format!("no query of this session has the id or run id `{id}` (GET /api/v1/streaming/queries lists them)"),
        );
    };
    // `stop` waits for the running batch: off the server's thread.
    let q2 = q.clone();
    let stopped = match tokio::task::spawn_blocking(move || q2.stop()).await {
        Ok(r) => r,
        Err(e) => Err(crate::WeirError::Config(e.to_string())),
    };
    let status = match stopped {
        Ok(()) => StatusCode::OK,
        // Past spark.sql.streaming.stopTimeout: asked, still stopping.
        Err(crate::WeirError::StopTimeout(_)) => StatusCode::ACCEPTED,
        Err(e) => {
            return refuse(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("stopping the query failed: {e}"),
            )
        }
    };
    (
        status,
        axum::Json(json!({
        "id": q.id(),
        "runId": q.run_id(),
        "name": q.name(),
        "isActive": q.is_active(),
        "exception": q.exception().map(|e| e.to_string()),
        })),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn tokens_compare_by_every_byte() {
        assert!(constant_time_eq(b"s3cret", b"s3cret"));
        assert!(!constant_time_eq(b"s3cret", b"s3cres"));
        assert!(!constant_time_eq(b"s3cret", b"s3cre"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }
}
