// Continuous processing cannot read the current time, and foreach_batch needs micro-batches.
weir_macros::stream_query! {
    query Recent {
        source: rate(rows_per_second = 5),
        filter: timestamp > now(),
        trigger: continuous("1 second"),
        sink: foreach_batch(|_batch_id, _batches| Ok(())),
        checkpoint: "chk/recent",
    }
}

fn main() {}
