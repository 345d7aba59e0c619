//! The session-window aggregation the matrix changes (#17). Its state is
//! locked in `weir.lock/locked_sessions.json`.

weir::stream_query! {
    query LockedSessions {
        source: memory,
        schema: Click { user: String, ts: Timestamp },
        watermark: ts delay "10 minutes",
        group_by: [session_window(ts, "5 minutes"), user],
        aggregate: { clicks: count() },
        output_mode: append,
        sink: memory,
    }
}
