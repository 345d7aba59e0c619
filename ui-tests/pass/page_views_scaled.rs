//! The seed's page views over many processes: every process running this
//! query joins consumer group `page-views`, runs the tasks of the
//! partitions the group gives it, and shares the checkpoint on S3. The
//! page is not the Kafka message key, so the aggregation runs behind a
//! repartition topic.

weir::stream_query! {
    /// Views per page and minute, counted once however many processes run.
    query PageViewsScaled {
        source: kafka(bootstrap_servers = env("KAFKA_BOOTSTRAP"), subscribe = "clicks", starting_offsets = "earliest", format = json),
        schema: ScaledClick { page: String, event_ts: Timestamp },
        filter: page != "",
        watermark: event_ts delay "2 minutes",
        group_by: [window(event_ts, "1 minute"), page],
        aggregate: { views: count() },
        output_mode: append,
        sink: kafka(bootstrap_servers = env("KAFKA_BOOTSTRAP"), topic = "views", format = json, key = [page]),
        checkpoint: "s3://checkpoints/page_views",
        scale_out: "page-views",
    }
}

/// The declared query reading `input` and writing to `output`, with its
/// checkpoint and group replaced (for tests; the rest as declared).
pub fn writer_in(
    session: &weir::Session,
    bootstrap: &str,
    input: &str,
    output: &str,
    checkpoint: &str,
    group: &str,
) -> weir::Result<weir::StreamWriter> {
    use weir::source::DecodeExt;
    let source = weir::source::KafkaSource::new(bootstrap)
        .subscribe(input)
        .starting_offsets(weir::source::StartingOffsets::Earliest)
        .from_json("value", <ScaledClick as weir::Row>::fields());
    Ok(PageViewsScaled::writer_from(session, source.into())?
        .sink(
            weir::sink::KafkaSink::new(bootstrap)
                .topic(output)
                .json_values()
                .key_columns(&["page"]),
        )
        .checkpoint_location(checkpoint)
        .scale_out(group))
}
