// Rate and rate-micro-batch options refused by the connector table
// (weir-plan's connectors.rs), the rules RateSource and
// RateMicroBatchSource check their builders' values with.
weir_macros::stream_query! {
    query NoRows {
        source: rate(rows_per_second = 0, num_partitions = 0, ramp_up_time = "soon"),
        sink: console,
    }
}

weir_macros::stream_query! {
    query TooManyRows {
        source: rate_micro_batch(rows_per_batch = 100_000_001, start_timestamp = 253_402_300_800_000),
        sink: console,
    }
}

weir_macros::stream_query! {
    query UnofferedOption {
        source: rate(rows_per_second = 5, min_offsets_per_trigger = 3),
        sink: console,
    }
}

fn main() {}
