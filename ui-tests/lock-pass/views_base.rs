//! The aggregation the matrix changes (#17): clicks per page and minute. Its
//! state is locked in `weir.lock/locked_views.json`.

weir::stream_query! {
    query LockedViews {
        source: memory,
        schema: View { page: String, user: String, ts: Timestamp, n: i64, score: f64 },
        watermark: ts delay "10 minutes",
        group_by: [window(ts, "1 minute"), page],
        aggregate: { views: count(), total: sum(n) },
        output_mode: update,
        sink: memory,
    }
}
