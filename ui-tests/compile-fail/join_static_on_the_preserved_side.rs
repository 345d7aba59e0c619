// A right outer join of a stream with a static table would have to emit
// every unmatched table row, which a stream never knows: Spark refuses it.
weir_macros::stream_query! {
    query Enriched {
        source: memory,
        schema: Event { ts: Timestamp, key: String, value: i64 },
        join: {
            how: right_outer,
            table: { source: files(path = "data/dims", format = csv), schema: Dim { key: String, name: String } },
            using: [key],
        },
        sink: console,
    }
}

fn main() {}
