//! Allowed: a computed column the aggregation does not read (its input's keys
//! and accumulators keep their types).

weir::stream_query! {
    query LockedViews {
        source: memory,
        schema: View { page: String, user: String, ts: Timestamp, n: i64, score: f64 },
        with_column: { shouting: upper(user) },
        watermark: ts delay "10 minutes",
        group_by: [window(ts, "1 minute"), page],
        aggregate: { views: count(), total: sum(n) },
        output_mode: update,
        sink: memory,
    }
}
