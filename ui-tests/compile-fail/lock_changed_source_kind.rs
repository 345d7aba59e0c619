// Refused: the source changed from a memory stream to files (the checkpoint's
// offsets are the old source's).
// The query's state is locked in weir.lock/locked_events.json (ui-tests/lock-pass/events_base.rs).
weir_macros::stream_query! {
    query LockedEvents {
        source: files(path = "in/events", format = json),
        schema: Event { id: String, user: String, ts: Timestamp },
        watermark: ts delay "10 minutes",
        drop_duplicates: [id, ts],
        sink: memory,
    }
}

fn main() {}
