//! Computed columns with `with_column:` (the others stay): the valid
//! neighbour of `row_number_window_function`. Per-key numbering over a
//! stream is what an aggregation is for (`count()` per key and window).

weir::stream_query! {
    /// Clicks with a normalised page and an hour-of-day column.
    query ClicksEnriched {
        source: files(path = "data/clicks", format = json),
        schema: Click { user: String, page: String, event_ts: Timestamp },
        filter: page != "/health",
        with_column: { page: lower(page), hour: hour(event_ts) as i32 },
        sink: console(truncate = false),
    }
}

weir::stream_query! {
    /// Clicks per user and minute: the streaming way to number a user's clicks.
    query ClicksPerUser {
        source: files(path = "data/clicks", format = json),
        schema: UserClick { user: String, page: String, event_ts: Timestamp },
        watermark: event_ts delay "1 minute",
        group_by: [window(event_ts, "1 minute"), user],
        aggregate: { clicks: count() },
        sink: console,
    }
}

#[test]
fn with_column_keeps_the_other_columns() {
    assert!(weir::plan::check(&ClicksEnriched::plan()).is_empty());
    assert!(weir::plan::check(&ClicksPerUser::plan()).is_empty());
    let fields: Vec<String> = <ClicksEnrichedRow as weir::Row>::fields()
        .into_iter()
        .map(|f| f.name)
        .collect();
    assert_eq!(fields, ["user", "page", "event_ts", "hour"]);
    let row = ClicksEnrichedRow {
        user: "u".into(),
        page: "/a".into(),
        event_ts: weir::Timestamp(0),
        hour: 0,
    };
    assert_eq!(row.hour, 0);
}
