// Sink options refused by the connector table (weir-plan's connectors.rs),
// the rules the engine's sinks check their options with when the query
// starts (`weir::sink::from_options`, the typed builders): no rows shown,
// an empty topic, an unknown delivery guarantee, an empty key prefix, an
// option the noop sink does not take.
weir_macros::stream_query! {
    query NoRowsShown {
        source: rate,
        sink: console(num_rows = 0),
    }
}

weir_macros::stream_query! {
    query EmptyTopic {
        source: rate,
        sink: kafka(
            bootstrap_servers = "127.0.0.1:9092",
            topic = "",
            format = json,
            delivery = at_most_once,
        ),
        checkpoint: "chk/empty_topic",
    }
}

weir_macros::stream_query! {
    query EmptyKeyPrefix {
        source: rate,
        sink: redis(url = "redis://127.0.0.1:6380/0", key_prefix = ""),
        checkpoint: "chk/empty_key_prefix",
    }
}

weir_macros::stream_query! {
    query NoopWithRows {
        source: rate,
        sink: noop(num_rows = 5),
        checkpoint: "chk/noop",
    }
}

fn main() {}
