// Refused: a column added to one side of the join (its state stores that
// side's rows as they were).
// The query's state is locked in weir.lock/locked_join.json (ui-tests/lock-pass/join_base.rs).
weir_macros::stream_query! {
    query LockedJoin {
        source: memory,
        schema: Shown { imp_id: i64, imp_ts: Timestamp },
        watermark: imp_ts delay "10 minutes",
        join: {
            how: inner,
            stream: {
                source: memory,
                schema: Clicked { click_imp_id: i64, click_ts: Timestamp, page: String },
                watermark: click_ts delay "10 minutes",
            },
            on: click_imp_id == imp_id && click_ts >= imp_ts && click_ts <= imp_ts + interval("15 minutes"),
        },
        sink: memory,
    }
}

fn main() {}
