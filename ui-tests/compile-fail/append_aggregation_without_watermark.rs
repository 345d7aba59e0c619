// Append mode (the default) on an aggregation without a watermark: Spark refuses it at start().
weir_macros::stream_query! {
    query Lab {
        source: rate(rows_per_second = 5),
        group_by: [window(timestamp, "10 seconds")],
        aggregate: { n: count() },
        sink: console,
    }
}

fn main() {}
