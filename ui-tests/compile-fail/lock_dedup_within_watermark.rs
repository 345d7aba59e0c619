// Refused: dropDuplicates replaced by dropDuplicatesWithinWatermark (another
// kind of state).
// The query's state is locked in weir.lock/locked_events.json (ui-tests/lock-pass/events_base.rs).
weir_macros::stream_query! {
    query LockedEvents {
        source: memory,
        schema: Event { id: String, user: String, ts: Timestamp },
        watermark: ts delay "10 minutes",
        drop_duplicates_within_watermark: [id],
        sink: memory,
    }
}

fn main() {}
