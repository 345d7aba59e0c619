// `late_rows:` where no row can ever be late: without a watermark, and
// without a stateful operation (only those drop late rows); and after a
// stream-stream join followed by an aggregation, which drop late rows of
// different columns.
weir_macros::stream_query! {
    query NoWatermark {
        source: memory,
        schema: Order { id: String, ts: Timestamp },
        group_by: [id],
        aggregate: { n: count() },
        output_mode: update,
        sink: console,
        late_rows: memory,
    }
}

weir_macros::stream_query! {
    query NoState {
        source: memory,
        schema: Order2 { id: String, ts: Timestamp },
        watermark: ts delay "1 minute",
        sink: console,
        late_rows: memory,
    }
}

weir_macros::stream_query! {
    query StreamJoin {
        source: memory,
        schema: Imp3 { imp_id: i64, imp_ts: Timestamp },
        watermark: imp_ts delay "1 minute",
        join: {
            stream: {
                source: memory,
                schema: Click3 { click_id: i64, click_ts: Timestamp },
                watermark: click_ts delay "1 minute",
            },
            on: click_id == imp_id && click_ts <= imp_ts + interval("5 minutes") && click_ts >= imp_ts,
        },
        group_by: [window(imp_ts, "10 minutes")],
        aggregate: { clicks: count() },
        sink: console,
        late_rows: memory,
    }
}

fn main() {}
