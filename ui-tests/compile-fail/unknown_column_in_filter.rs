// A typo in a filter column: the error points at the identifier and suggests the column.
weir_macros::stream_query! {
    query Views {
        source: files(path = "data/clicks", format = json),
        schema: Click { page: String, value: i64 },
        filter: vaule > 1 && page != "/health",
        sink: console,
    }
}

fn main() {}
