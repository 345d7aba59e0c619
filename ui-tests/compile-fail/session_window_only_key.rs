// A session window as the only grouping key: Spark refuses a global
// aggregation over session windows.
weir_macros::stream_query! {
    query Sessions {
        source: memory,
        schema: Click { user: String, ts: Timestamp },
        watermark: ts delay "10 minutes",
        group_by: [session_window(ts, "5 minutes")],
        aggregate: { clicks: count() },
        sink: console,
    }
}

fn main() {}
