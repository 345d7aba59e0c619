// Aggregates over types they cannot take: avg of a bool, sum of a computed string.
weir_macros::stream_query! {
    query Totals {
        source: memory,
        schema: Sale { shop: String, amount: i64, paid: bool },
        select: { shop, paid, label: concat(shop, "!") },
        group_by: [shop],
        aggregate: { rate: avg(paid), s: sum(label) },
        output_mode: complete,
        sink: console,
    }
}

fn main() {}
