//! Allowed: the output mode of a query without an aggregation (the
//! deduplication keeps the same state in append and update mode).

weir::stream_query! {
    query LockedEvents {
        source: memory,
        schema: Event { id: String, user: String, ts: Timestamp },
        watermark: ts delay "10 minutes",
        drop_duplicates: [id, ts],
        output_mode: update,
        sink: memory,
    }
}
