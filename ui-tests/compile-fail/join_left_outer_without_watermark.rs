// A stream-stream left outer join with no watermark on the clicks: Spark
// cannot know when an impression will never get its click, so it refuses.
weir_macros::stream_query! {
    query AdClicks {
        source: memory,
        schema: Impression { imp_ad_id: i32, imp_ts: Timestamp },
        watermark: imp_ts delay "10 minutes",
        join: {
            how: left_outer,
            stream: {
                source: memory,
                schema: Click { click_ad_id: i32, click_ts: Timestamp },
            },
            on: click_ad_id == imp_ad_id,
        },
        sink: console,
    }
}

fn main() {}
