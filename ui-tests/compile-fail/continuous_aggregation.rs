// Continuous processing runs only map-like operations: no watermark, no aggregation.
weir_macros::stream_query! {
    query Lab {
        source: rate(rows_per_second = 5),
        watermark: timestamp delay "10 seconds",
        group_by: [window(timestamp, "10 seconds")],
        aggregate: { n: count() },
        output_mode: update,
        trigger: continuous("1 second"),
        sink: console,
    }
}

fn main() {}
