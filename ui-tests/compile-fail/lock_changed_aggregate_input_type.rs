// Refused: an aggregate's input changed type before the aggregation (a select
// gives `n` the f64 `score`): its accumulator in the state is an int64 sum.
// The query's state is locked in weir.lock/locked_views.json (ui-tests/lock-pass/views_base.rs).
weir_macros::stream_query! {
    query LockedViews {
        source: memory,
        schema: View { page: String, user: String, ts: Timestamp, n: i64, score: f64 },
        select: { page, user, ts, n: score },
        watermark: ts delay "10 minutes",
        group_by: [window(ts, "1 minute"), page],
        aggregate: { views: count(), total: sum(n) },
        output_mode: update,
        sink: memory,
    }
}

fn main() {}
