//! A query whose every path is on S3 (the valid neighbour of
//! `malformed_s3_checkpoint` and `malformed_s3_file_sink`): JSON logs from an
//! S3 prefix, joined with a Parquet table in S3, written as Parquet to S3,
//! its checkpoint in S3. The URLs are checked at compile time; the bucket is
//! reached only when the query starts.

weir::stream_query! {
    /// Clicks with their page's tier, from and to S3.
    query S3Clicks {
        source: files(path = "s3://logs/incoming/", format = json),
        schema: S3Click { page: String, event_ts: Timestamp },
        join: {
            how: inner,
            table: {
                source: files(path = "s3a://dim/pages", format = parquet),
                schema: S3Page { page: String, tier: i32 },
            },
            using: [page],
        },
        sink: files(path = "s3://out/clicks", format = parquet),
        checkpoint: "s3://bucket/chk",
    }
}

#[test]
fn s3_paths_compile_and_build_a_writer() {
    let plan = S3Clicks::plan();
    assert!(weir::plan::check(&plan).is_empty());
    assert_eq!(
        plan.sink,
        Some(weir::plan::SinkDecl {
            kind: weir::plan::SinkKind::File,
            checkpoint: true
        })
    );
    // Building the writer opens nothing yet: no S3 server is needed.
    let session = weir::Session::new();
    assert!(S3Clicks::writer(&session).is_ok());
}
