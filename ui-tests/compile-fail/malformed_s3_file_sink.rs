// A file sink on S3 whose bucket name breaks S3's naming rules, and a
// static table on a storage weir does not read.
weir_macros::stream_query! {
    query ClicksByPage {
        source: files(path = "s3://logs/incoming/", format = json),
        schema: Click { page: String, event_ts: Timestamp },
        join: {
            how: inner,
            table: {
                source: files(path = "gs://dim/pages", format = parquet),
                schema: Page { page: String, tier: i32 },
            },
            using: [page],
        },
        sink: files(path = "s3://Page_Views/out", format = parquet),
        checkpoint: "s3://chk/clicks_by_page",
    }
}

fn main() {}
