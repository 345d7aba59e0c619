// Sorting a stream that is not aggregated: Spark refuses it at start().
weir_macros::stream_query! {
    query Sorted {
        source: rate(rows_per_second = 5),
        filter: value % 2 == 0,
        order_by: [value desc],
        sink: console,
    }
}

fn main() {}
