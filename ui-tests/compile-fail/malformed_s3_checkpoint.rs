// An S3 checkpoint without a bucket: the location is checked at compile
// time by the rule the engine uses when it opens it.
weir_macros::stream_query! {
    query Evens {
        source: rate(rows_per_second = 5),
        filter: value % 2 == 0,
        sink: files(path = "s3://out/evens", format = parquet),
        checkpoint: "s3:///chk/evens",
    }
}

fn main() {}
