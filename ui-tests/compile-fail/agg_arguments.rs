// The second arguments: approx_count_distinct's rsd (0.01 to 0.39),
// first/last's ignoreNulls (a bool); other aggregates take one column.
weir_macros::stream_query! {
    query Args {
        source: memory,
        schema: Visit { user: String, page: String, ms: i64 },
        group_by: [page],
        aggregate: {
            u: approx_count_distinct(user, 0.5),
            f: first(user, 3),
            s: sum(ms, true),
            m: median(ms),
        },
        output_mode: complete,
        sink: console,
    }
}

fn main() {}
