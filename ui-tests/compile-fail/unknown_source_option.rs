// A misspelt source option.
weir_macros::stream_query! {
    query Views {
        source: files(path = "data/clicks", format = json, max_file_per_trigger = 10),
        schema: Click { page: String },
        sink: console,
    }
}

fn main() {}
