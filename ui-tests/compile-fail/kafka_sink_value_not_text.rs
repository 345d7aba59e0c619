// The Kafka sink's `value` must be a string or bytes, and the sink needs a checkpoint.
weir_macros::stream_query! {
    query Ticks {
        source: rate(rows_per_second = 5),
        sink: kafka(bootstrap_servers = "localhost:9092", topic = "ticks"),
    }
}

fn main() {}
