// Refused: a session window's gap (the state holds the old sessions).
// The query's state is locked in weir.lock/locked_sessions.json (ui-tests/lock-pass/sessions_base.rs).
weir_macros::stream_query! {
    query LockedSessions {
        source: memory,
        schema: Click { user: String, ts: Timestamp },
        watermark: ts delay "10 minutes",
        group_by: [session_window(ts, "10 minutes"), user],
        aggregate: { clicks: count() },
        output_mode: append,
        sink: memory,
    }
}

fn main() {}
