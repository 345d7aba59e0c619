// A stream-stream join in update mode: Spark joins two streams only in
// append mode (a joined row, once emitted, is final).
weir_macros::stream_query! {
    query AdClicks {
        source: memory,
        schema: Impression { imp_ad_id: i32, imp_ts: Timestamp },
        watermark: imp_ts delay "10 minutes",
        join: {
            stream: {
                source: memory,
                schema: Click { click_ad_id: i32, click_ts: Timestamp },
                watermark: click_ts delay "20 minutes",
            },
            on: click_ad_id == imp_ad_id && click_ts >= imp_ts && click_ts <= imp_ts + interval("15 minutes"),
        },
        output_mode: update,
        sink: console,
    }
}

fn main() {}
