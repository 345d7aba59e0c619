// A window of zero length.
weir_macros::stream_query! {
    query Lab {
        source: rate(rows_per_second = 5),
        watermark: timestamp delay "10 seconds",
        group_by: [window(timestamp, "0 seconds")],
        aggregate: { n: count() },
        sink: console,
    }
}

fn main() {}
