// Grouping twice by one column, or by two windows: two output columns of one name.
weir_macros::stream_query! {
    query Lab {
        source: rate(rows_per_second = 5),
        watermark: timestamp delay "10 seconds",
        group_by: [window(timestamp, "10 seconds"), value, value, window(timestamp, "1 minute")],
        aggregate: { n: count() },
        sink: console,
    }
}

fn main() {}
