//! Allowed: a filter before the aggregation (the state's keys and
//! accumulators are the same; only new rows are filtered).

weir::stream_query! {
    query LockedViews {
        source: memory,
        schema: View { page: String, user: String, ts: Timestamp, n: i64, score: f64 },
        filter: n > 0,
        watermark: ts delay "10 minutes",
        group_by: [window(ts, "1 minute"), page],
        aggregate: { views: count(), total: sum(n) },
        output_mode: update,
        sink: memory,
    }
}
