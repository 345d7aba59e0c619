// dropDuplicatesWithinWatermark needs a watermark.
weir_macros::stream_query! {
    query Deduped {
        source: files(path = "data/events", format = json),
        schema: Event { id: String, event_ts: Timestamp, value: i64 },
        drop_duplicates_within_watermark: [id],
        sink: console,
    }
}

fn main() {}
