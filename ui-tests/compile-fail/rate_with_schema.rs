// The rate source has a fixed schema; declaring one is a mistake.
weir_macros::stream_query! {
    query Lab {
        source: rate(rows_per_second = 5),
        schema: Tick { ts: Timestamp, n: i64 },
        sink: console,
    }
}

fn main() {}
