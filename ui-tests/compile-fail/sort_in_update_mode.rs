// Sorting an aggregation is allowed only in complete mode, not in update mode.
weir_macros::stream_query! {
    query TopShops {
        source: memory,
        schema: Sale { shop: String, amount: i64 },
        group_by: [shop],
        aggregate: { total: sum(amount) },
        order_by: [total desc],
        output_mode: update,
        sink: console,
    }
}

fn main() {}
