// sum() over a String column.
weir_macros::stream_query! {
    query Totals {
        source: memory,
        schema: Sale { shop: String, amount: i64 },
        group_by: [shop],
        aggregate: { total: sum(shop) },
        output_mode: complete,
        sink: console,
    }
}

fn main() {}
