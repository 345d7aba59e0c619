// The file sink needs a checkpoint: only console, memory and noop run without one.
weir_macros::stream_query! {
    query Evens {
        source: rate(rows_per_second = 5),
        filter: value % 2 == 0,
        sink: files(path = "out/evens", format = parquet),
    }
}

fn main() {}
