// collect_list and collect_set take scalar columns: an array column (a
// `Vec<T>` field) is refused at the argument, with the catalogue's help.
weir_macros::stream_query! {
    query Tags {
        source: memory,
        schema: Post { user: String, tags: Vec<String> },
        group_by: [user],
        aggregate: {
            users: collect_set(user),
            all_tags: collect_list(tags),
        },
        output_mode: complete,
        sink: console,
    }
}

fn main() {}
