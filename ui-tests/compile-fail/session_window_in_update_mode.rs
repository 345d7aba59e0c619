// A session window in update mode: Spark emits a session once, when it
// closes, so only append and complete are allowed.
weir_macros::stream_query! {
    query UserSessions {
        source: memory,
        schema: Click { user: String, ts: Timestamp },
        watermark: ts delay "10 minutes",
        group_by: [session_window(ts, "5 minutes"), user],
        aggregate: { clicks: count() },
        output_mode: update,
        sink: console,
    }
}

fn main() {}
