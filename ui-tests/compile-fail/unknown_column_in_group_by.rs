// Grouping by a column the schema does not have.
weir_macros::stream_query! {
    query Views {
        source: files(path = "data/clicks", format = json),
        schema: Click { page: String, event_ts: Timestamp },
        group_by: [pgae],
        aggregate: { views: count() },
        output_mode: update,
        sink: console,
    }
}

fn main() {}
