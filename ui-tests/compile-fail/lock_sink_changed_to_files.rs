// Refused: the sink changed to files (a file sink's own log would start in the
// middle of the checkpoint's batches; Spark refuses it too).
// The query's state is locked in weir.lock/locked_events.json (ui-tests/lock-pass/events_base.rs).
weir_macros::stream_query! {
    query LockedEvents {
        source: memory,
        schema: Event { id: String, user: String, ts: Timestamp },
        watermark: ts delay "10 minutes",
        drop_duplicates: [id, ts],
        sink: files(path = "out/events", format = json),
        checkpoint: "chk/events",
    }
}

fn main() {}
