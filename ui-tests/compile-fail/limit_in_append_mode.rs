// Spark runs a limit in append mode (it counts the rows emitted so far, in
// state); weir does not yet, and says so at compile time.
weir_macros::stream_query! {
    query FirstSales {
        source: memory,
        schema: Sale { shop: String, amount: i64 },
        limit: 3,
        sink: console,
    }
}

fn main() {}
