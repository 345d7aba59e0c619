// A negative watermark delay, a zero slide and a zero trigger interval.
weir_macros::stream_query! {
    query Lab {
        source: rate(rows_per_second = 5),
        watermark: timestamp delay "-10 seconds",
        group_by: [window(timestamp, "10 seconds", "0 seconds")],
        aggregate: { n: count() },
        trigger: processing_time("0 seconds"),
        sink: console,
    }
}

fn main() {}
