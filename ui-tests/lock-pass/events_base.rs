//! The deduplication the matrix changes (#17). Its state is locked in
//! `weir.lock/locked_events.json`.

weir::stream_query! {
    query LockedEvents {
        source: memory,
        schema: Event { id: String, user: String, ts: Timestamp },
        watermark: ts delay "10 minutes",
        drop_duplicates: [id, ts],
        sink: memory,
    }
}
