// Every mistake of a declaration is reported in one compile.
weir_macros::stream_query! {
    query Lab {
        source: rate(rows_per_second = 0),
        fliter: value > 1,
        watermark: timestamp delay "10 seconds",
        group_by: [window(timestamp, "10 seconds")],
        aggregate: { n: count(), s: sum(vlaue) },
        output_mode: append,
        trigger: processing_time("5 secs later"),
        sink: consol(truncate = false),
    }
}

fn main() {}
