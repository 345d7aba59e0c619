// Spark's `noop` sink: each batch is computed and dropped (for benchmarks:
// the query's cost without the output's). Built by the connector table's
// name (`weir::sink::from_options("noop", ..)`).
weir::stream_query! {
    query NoopBench {
        source: rate_micro_batch(rows_per_batch = 100),
        select: { value, odd: value % 2 == 1 },
        sink: noop,
        checkpoint: "target/weir-pass/noop_bench",
    }
}

fn main() {}
