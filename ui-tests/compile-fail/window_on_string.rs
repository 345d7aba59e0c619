// A time window over a String column.
weir_macros::stream_query! {
    query Views {
        source: files(path = "data/clicks", format = json),
        schema: Click { page: String, event_ts: Timestamp },
        group_by: [window(page, "1 minute")],
        aggregate: { views: count() },
        output_mode: update,
        sink: console,
    }
}

fn main() {}
