// The file sink only appends: complete mode rewrites the whole result every trigger.
weir_macros::stream_query! {
    query ShopTotals {
        source: memory,
        schema: Sale { shop: String, amount: i64 },
        group_by: [shop],
        aggregate: { total: sum(amount) },
        output_mode: complete,
        sink: files(path = "out/shop_totals", format = parquet),
        checkpoint: "chk/shop_totals",
    }
}

fn main() {}
