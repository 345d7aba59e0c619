// Distinct counts are not supported on streams (Spark's rule and message).
weir_macros::stream_query! {
    query Users {
        source: files(path = "data/clicks", format = json),
        schema: Click { page: String, user: Option<String> },
        group_by: [page],
        aggregate: { users: count_distinct(user) },
        output_mode: complete,
        sink: console,
    }
}

fn main() {}
