// Limits are not supported in update mode.
weir_macros::stream_query! {
    query TopShops {
        source: memory,
        schema: Sale { shop: String, amount: i64 },
        group_by: [shop],
        aggregate: { total: sum(amount) },
        limit: 3,
        output_mode: update,
        sink: console,
    }
}

fn main() {}
