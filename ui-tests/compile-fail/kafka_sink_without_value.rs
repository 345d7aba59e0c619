// The Kafka sink writes the result's `value` column; this result has none.
// (The macro checks Kafka sinks but cannot generate them yet: that is said too.)
weir_macros::stream_query! {
    query PageCounts {
        source: files(path = "data/clicks", format = json),
        schema: Click { page: String, event_ts: Timestamp },
        select: { key: page, event_ts },
        sink: kafka(bootstrap_servers = "localhost:9092", topic = "pages"),
        checkpoint: "chk/page_counts",
    }
}

fn main() {}
