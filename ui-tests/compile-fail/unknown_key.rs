// `format:` is not a key: the format belongs to the source.
weir_macros::stream_query! {
    query Views {
        source: files(path = "data/clicks"),
        format: json,
        schema: Click { page: String },
        sink: console,
    }
}

fn main() {}
