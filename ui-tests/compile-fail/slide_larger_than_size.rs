// A sliding window whose slide is longer than the window.
weir_macros::stream_query! {
    query Lab {
        source: rate(rows_per_second = 5),
        watermark: timestamp delay "10 seconds",
        group_by: [window(timestamp, "1 minute", "5 minutes")],
        aggregate: { n: count() },
        sink: console,
    }
}

fn main() {}
