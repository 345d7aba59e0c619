// A watermark is declared, but the append-mode aggregation does not group on it.
weir_macros::stream_query! {
    query Views {
        source: files(path = "data/clicks", format = json),
        schema: Click { page: String, event_ts: Timestamp },
        watermark: event_ts delay "2 minutes",
        group_by: [page],
        aggregate: { views: count() },
        output_mode: append,
        sink: console,
    }
}

fn main() {}
