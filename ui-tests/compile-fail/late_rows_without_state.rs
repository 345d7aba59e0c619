// `late_rows:` where no row can ever be late: without a watermark, and
// without a stateful operation (only those drop late rows).
weir_macros::stream_query! {
    query NoWatermark {
        source: memory,
        schema: Order { id: String, ts: Timestamp },
        group_by: [id],
        aggregate: { n: count() },
        output_mode: update,
        sink: console,
        late_rows: memory,
    }
}

weir_macros::stream_query! {
    query NoState {
        source: memory,
        schema: Order2 { id: String, ts: Timestamp },
        watermark: ts delay "1 minute",
        sink: console,
        late_rows: memory,
    }
}

fn main() {}
