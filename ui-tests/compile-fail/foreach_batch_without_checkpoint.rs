// foreach_batch needs a checkpoint too (weir requires one for every sink but
// console, memory and noop).
weir_macros::stream_query! {
    query Evens {
        source: rate(rows_per_second = 5),
        filter: value % 2 == 0,
        sink: foreach_batch(|_batch_id, _batches| Ok(())),
    }
}

fn main() {}
