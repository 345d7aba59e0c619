// No sink: where would the rows go?
weir_macros::stream_query! {
    query Lab {
        source: rate(rows_per_second = 5),
        filter: value > 10,
    }
}

fn main() {}
