// Refused: a stateful operator added before the aggregation (state is kept by
// operator position).
// The query's state is locked in weir.lock/locked_views.json (ui-tests/lock-pass/views_base.rs).
weir_macros::stream_query! {
    query LockedViews {
        source: memory,
        schema: View { page: String, user: String, ts: Timestamp, n: i64, score: f64 },
        drop_duplicates: [user, ts],
        group_by: [window(ts, "1 minute"), page],
        aggregate: { views: count(), total: sum(n) },
        output_mode: update,
        sink: memory,
    }
}

fn main() {}
