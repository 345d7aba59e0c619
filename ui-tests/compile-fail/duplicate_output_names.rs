// Two output columns with one name: in select, and an aggregate named like a key.
weir_macros::stream_query! {
    query Views {
        source: files(path = "data/clicks", format = json),
        schema: Click { page: String, event_ts: Timestamp, n: i64 },
        select: { page, event_ts, n, n: n * 2 },
        group_by: [page],
        aggregate: { page: count() },
        output_mode: update,
        sink: console,
    }
}

fn main() {}
