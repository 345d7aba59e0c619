// A watermark delay that does not parse.
weir_macros::stream_query! {
    query Lab {
        source: rate(rows_per_second = 5),
        watermark: timestamp delay "10 secs later",
        group_by: [window(timestamp, "10 seconds")],
        aggregate: { n: count() },
        sink: console,
    }
}

fn main() {}
