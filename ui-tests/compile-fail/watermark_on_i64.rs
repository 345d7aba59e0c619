// A watermark on an integer column: event time must be a Timestamp.
weir_macros::stream_query! {
    query Lab {
        source: rate(rows_per_second = 5),
        watermark: value delay "10 seconds",
        group_by: [window(timestamp, "10 seconds")],
        aggregate: { n: count() },
        output_mode: update,
        sink: console,
    }
}

fn main() {}
