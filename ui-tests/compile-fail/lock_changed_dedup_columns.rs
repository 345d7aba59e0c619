// Refused: the deduplication columns changed.
// The query's state is locked in weir.lock/locked_events.json (ui-tests/lock-pass/events_base.rs).
weir_macros::stream_query! {
    query LockedEvents {
        source: memory,
        schema: Event { id: String, user: String, ts: Timestamp },
        watermark: ts delay "10 minutes",
        drop_duplicates: [id, user, ts],
        sink: memory,
    }
}

fn main() {}
