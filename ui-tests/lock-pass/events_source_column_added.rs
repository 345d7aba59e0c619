//! Allowed: a source column no stateful operator stores (the deduplication
//! keys on `id` and `ts` only).

weir::stream_query! {
    query LockedEvents {
        source: memory,
        schema: Event { id: String, user: String, ts: Timestamp, country: String },
        watermark: ts delay "10 minutes",
        drop_duplicates: [id, ts],
        sink: memory,
    }
}
