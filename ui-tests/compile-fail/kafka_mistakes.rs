// Kafka connector mistakes: no topic to read, a schema without a value
// format, a record key without JSON values, a key column the result does
// not have, and assign / startingOffsets JSON that Spark would refuse.
weir_macros::stream_query! {
    query NoTopic {
        source: kafka(bootstrap_servers = "127.0.0.1:9092", format = json),
        schema: Click { page: String },
        sink: console,
    }
}

weir_macros::stream_query! {
    query NoFormat {
        source: kafka(bootstrap_servers = "127.0.0.1:9092", subscribe = "clicks"),
        schema: Click2 { page: String },
        sink: console,
    }
}

weir_macros::stream_query! {
    query KeyWithoutJson {
        source: kafka(bootstrap_servers = "127.0.0.1:9092", subscribe = "clicks"),
        select: { value },
        sink: kafka(bootstrap_servers = "127.0.0.1:9092", topic = "out", key = [value]),
        checkpoint: "chk/key",
    }
}

weir_macros::stream_query! {
    query UnknownKey {
        source: kafka(bootstrap_servers = "127.0.0.1:9092", subscribe = "clicks", format = json),
        schema: Click4 { page: String, event_ts: Timestamp },
        watermark: event_ts delay "1 minute",
        group_by: [window(event_ts, "1 minute"), page],
        aggregate: { views: count() },
        output_mode: update,
        sink: kafka(bootstrap_servers = "127.0.0.1:9092", topic = "out", format = json, key = [pages]),
        checkpoint: "chk/unknown_key",
    }
}

weir_macros::stream_query! {
    query BadOffsets {
        source: kafka(
            bootstrap_servers = "127.0.0.1:9092",
            assign = "{\"clicks\": [\"0\"]}",
            starting_offsets = "{\"clicks\": {\"0\": -5}}",
        ),
        sink: console,
    }
}

fn main() {}
