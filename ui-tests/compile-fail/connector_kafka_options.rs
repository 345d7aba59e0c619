// Kafka source options refused by the connector table (weir-plan's
// connectors.rs), the rules the engine's KafkaSource checks its options
// with: an empty assign, a partition out of range, an offset below -2, a
// negative partition in startingOffsets, a misspelled starting word, no
// topic to subscribe to, no cap on offsets.
weir_macros::stream_query! {
    query EmptyAssign {
        source: kafka(bootstrap_servers = "127.0.0.1:9092", assign = "{}"),
        sink: console,
    }
}

weir_macros::stream_query! {
    query NoPartitions {
        source: kafka(bootstrap_servers = "127.0.0.1:9092", assign = "{\"clicks\":[]}"),
        sink: console,
    }
}

weir_macros::stream_query! {
    query PartitionOutOfRange {
        source: kafka(bootstrap_servers = "127.0.0.1:9092", assign = "{\"clicks\":[2147483648]}"),
        sink: console,
    }
}

weir_macros::stream_query! {
    query BadStartingOffsets {
        source: kafka(
            bootstrap_servers = "127.0.0.1:9092",
            subscribe = "clicks",
            starting_offsets = "{\"clicks\":{\"-1\":0}}",
            max_offsets_per_trigger = 0,
        ),
        sink: console,
    }
}

weir_macros::stream_query! {
    query MisspelledStart {
        source: kafka(bootstrap_servers = "127.0.0.1:9092", subscribe = " , ", starting_offsets = earliset),
        sink: console,
    }
}

fn main() {}
