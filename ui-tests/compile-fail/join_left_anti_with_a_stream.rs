// A left anti join keeps the impressions no click matches: with clicks as
// a stream, one may still arrive for any impression, even with watermarks
// on both sides and a time bound. Spark refuses it.
weir_macros::stream_query! {
    query Unclicked {
        source: memory,
        schema: Impression { imp_ad_id: i32, imp_ts: Timestamp },
        watermark: imp_ts delay "10 minutes",
        join: {
            how: left_anti,
            stream: {
                source: memory,
                schema: Click { click_ad_id: i32, click_ts: Timestamp },
                watermark: click_ts delay "20 minutes",
            },
            on: click_ad_id == imp_ad_id && click_ts >= imp_ts && click_ts <= imp_ts + interval("1 hour"),
        },
        sink: console,
    }
}

fn main() {}
