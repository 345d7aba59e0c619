// A session gap with a misspelt unit.
weir_macros::stream_query! {
    query UserSessions {
        source: memory,
        schema: Click { user: String, ts: Timestamp },
        watermark: ts delay "10 minutes",
        group_by: [session_window(ts, "5 minits"), user],
        aggregate: { clicks: count() },
        sink: console,
    }
}

fn main() {}
