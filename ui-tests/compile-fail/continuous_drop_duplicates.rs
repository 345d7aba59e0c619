// Continuous processing does not deduplicate (it keeps no state).
weir_macros::stream_query! {
    query Unique {
        source: socket(port = 9999),
        drop_duplicates: [value],
        trigger: continuous("1 second"),
        sink: console,
    }
}

fn main() {}
