// Refused: an aggregate added (the state has one accumulator per aggregate).
// The query's state is locked in weir.lock/locked_views.json (ui-tests/lock-pass/views_base.rs).
weir_macros::stream_query! {
    query LockedViews {
        source: memory,
        schema: View { page: String, user: String, ts: Timestamp, n: i64, score: f64 },
        watermark: ts delay "10 minutes",
        group_by: [window(ts, "1 minute"), page],
        aggregate: { views: count(), total: sum(n), top: max(n) },
        output_mode: update,
        sink: memory,
    }
}

fn main() {}
