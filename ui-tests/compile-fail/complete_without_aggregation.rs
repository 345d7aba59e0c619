// Complete mode needs an aggregation.
weir_macros::stream_query! {
    query Lab {
        source: rate(rows_per_second = 5),
        filter: value % 2 == 0,
        output_mode: complete,
        sink: console,
    }
}

fn main() {}
