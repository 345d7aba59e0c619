// Update mode into the file sink: a window's row would be written more than once.
weir_macros::stream_query! {
    query Lab {
        source: rate(rows_per_second = 5),
        watermark: timestamp delay "10 seconds",
        group_by: [window(timestamp, "10 seconds")],
        aggregate: { n: count() },
        output_mode: update,
        sink: files(path = "out/lab", format = json),
        checkpoint: "chk/lab",
    }
}

fn main() {}
