//! Page views per minute from JSON click files, written as Parquet in append
//! mode: each window is written once, when the watermark passes its end.

weir::stream_query! {
    /// Page views and value statistics per page and minute.
    query PageViews {
        source: files(path = "data/clicks", format = json, max_files_per_trigger = 10, latest_first = false),
        schema: Click {
            /// The page path.
            page: String,
            event_ts: Timestamp,
            user: Option<String>,
            n: i64,
        },
        filter: n > 0 && page != "/health",
        select: { page, event_ts, user, n2: n * 2 },
        watermark: event_ts delay "2 minutes",
        group_by: [window(event_ts, "1 minute"), page],
        aggregate: {
            views: count(),
            users: count(user),
            total: sum(n2),
            lo: min(n2),
            hi: max(n2),
            mean: avg(n2),
        },
        output_mode: append,
        trigger: processing_time("1 minute"),
        sink: files(path = "out/page_views", format = parquet, partition_by = [page]),
        checkpoint: "chk/page_views",
        name: "page_views_1m",
    }
}

/// The query reading `input` and writing to `output` (for tests: the
/// declared paths are replaced, the rest of the query is as declared).
pub fn writer_in(
    session: &weir::Session,
    input: &str,
    output: &str,
    checkpoint: &str,
) -> weir::Result<weir::StreamWriter> {
    let source = weir::source::FileSource::new(
        input,
        weir::source::FileFormat::Json,
        <Click as weir::Row>::fields(),
    );
    Ok(PageViews::writer_from(session, source.into())?
        .sink(
            weir::sink::FileSink::new(output, weir::sink::FileFormat::Parquet)
                .partition_by(vec!["page".to_string()]),
        )
        .checkpoint_location(checkpoint))
}

#[test]
fn page_views_types_follow_spark() {
    assert_eq!(PageViews::NAME, "page_views_1m");
    assert!(weir::plan::check(&PageViews::plan()).is_empty());
    // count -> i64; sum/min/max of i64 -> Option<i64>; avg -> Option<f64>
    let row = PageViewsRow {
        window: weir::Window {
            start: weir::Timestamp(0),
            end: weir::Timestamp(60_000_000),
        },
        page: "/".to_string(),
        views: 3,
        users: 2,
        total: Some(12),
        lo: Some(2),
        hi: None,
        mean: Some(4.0),
    };
    let batch = <PageViewsRow as weir::Row>::to_batch(std::slice::from_ref(&row)).unwrap();
    assert_eq!(
        <PageViewsRow as weir::Row>::from_batch(&batch).unwrap(),
        vec![row]
    );
    let click = Click {
        page: "/a".into(),
        event_ts: weir::Timestamp(1),
        user: None,
        n: 1,
    };
    let batch = <Click as weir::Row>::to_batch(std::slice::from_ref(&click)).unwrap();
    assert_eq!(
        <Click as weir::Row>::from_batch(&batch).unwrap(),
        vec![click]
    );
}
