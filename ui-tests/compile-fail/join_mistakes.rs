// Join mistakes: an unknown join type, a grouping inside the joined
// stream, a watermark on a static table, an interval added to a number, a
// column both sides have (also in a semi join, and beside a USING key), a
// join without its other side and without a condition, an unknown column in
// the condition, USING keys of two types, and an interval SQL cannot read.
weir_macros::stream_query! {
    query Bad1 {
        source: memory,
        schema: Imp1 { imp_ad_id: i32, imp_ts: Timestamp },
        join: {
            how: outer,
            stream: {
                source: memory,
                schema: Click1 { click_ad_id: i32, click_ts: Timestamp },
                group_by: [click_ad_id],
            },
            on: click_ad_id == imp_ad_id,
        },
        sink: console,
    }
}

weir_macros::stream_query! {
    query Bad2 {
        source: memory,
        schema: Imp2 { imp_ad_id: i32, imp_ts: Timestamp },
        join: {
            table: { source: memory, schema: Ad { ad_id: i32, ts: Timestamp }, watermark: ts delay "1 minute" },
            on: ad_id == imp_ad,
        },
        sink: console,
    }
}

weir_macros::stream_query! {
    query Bad3 {
        source: memory,
        schema: Imp3 { imp_ad_id: i32, imp_ts: Timestamp },
        join: {
            stream: { source: memory, schema: Click3 { imp_ad_id: i32, click_ts: Timestamp } },
            on: imp_ad_id + interval("1 minute") == imp_ad_id,
        },
        sink: console,
    }
}

weir_macros::stream_query! {
    query Bad4 {
        source: memory,
        schema: Imp4 { imp_ad_id: i32 },
        join: {
            how: inner,
        },
        sink: console,
    }
}

weir_macros::stream_query! {
    query Bad5 {
        source: memory,
        schema: Imp5 { imp_ad_id: i32, imp_ts: Timestamp },
        join: {
            how: left_outer,
            table: { source: memory, schema: Ad5 { ad_id: i32, campaign: String } },
            on: ad_id == imp_ad,
        },
        sink: console,
    }
}

weir_macros::stream_query! {
    query Bad6 {
        source: memory,
        schema: Imp6 { imp_id: i64, ts: Timestamp },
        join: {
            how: left_semi,
            table: { source: memory, schema: Seen6 { seen_id: i64, ts: Timestamp } },
            on: seen_id == imp_id,
        },
        sink: console,
    }
}

weir_macros::stream_query! {
    query Bad7 {
        source: memory,
        schema: Ev7 { key: String, ts: Timestamp, tier: i64 },
        join: {
            table: { source: memory, schema: Dim7 { key: i64, tier: i32 } },
            using: [key],
        },
        sink: console,
    }
}

weir_macros::stream_query! {
    query Bad8 {
        source: memory,
        schema: Imp8 { imp_id: i64, imp_ts: Timestamp },
        watermark: imp_ts delay "1 minute",
        join: {
            stream: {
                source: memory,
                schema: Click8 { click_id: i64, click_ts: Timestamp },
                watermark: click_ts delay "1 minute",
            },
            on: click_id == imp_id && click_ts <= imp_ts + interval("1 minute 30 seconds"),
        },
        sink: console,
    }
}

fn main() {}
