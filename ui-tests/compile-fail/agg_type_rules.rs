// Spark's type rules for stddev and variance: numbers only, at the argument.
weir_macros::stream_query! {
    query Spread {
        source: memory,
        schema: Visit { user: String, page: String, ms: i64 },
        group_by: [page],
        aggregate: {
            users: approx_count_distinct(user),
            first_user: first(user),
            sd: stddev(user),
            v: var_pop(ms),
        },
        output_mode: complete,
        sink: console,
    }
}

fn main() {}
