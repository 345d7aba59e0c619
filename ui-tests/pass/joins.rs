//! Joins in `stream_query!`: a stream enriched with a static table (re-read
//! every 10 minutes) and then aggregated, and a stream-stream left semi join
//! (the valid neighbours of `join_static_on_the_preserved_side` and
//! `join_left_outer_without_watermark`).

weir::stream_query! {
    /// Clicks per pricing tier and minute: each click's page looked up in a
    /// table of pages.
    query ClicksByTier {
        source: files(path = "data/clicks", format = json),
        schema: TierClick { page: String, event_ts: Timestamp },
        watermark: event_ts delay "1 minute",
        join: {
            how: left_outer,
            table: {
                source: files(path = "data/pages", format = csv),
                schema: Page { page: String, tier: i32 },
                refresh_every: "10 minutes",
            },
            using: [page],
        },
        group_by: [window(event_ts, "1 minute"), tier],
        aggregate: { clicks: count() },
        output_mode: update,
        sink: memory(name = "clicks_by_tier"),
    }
}

weir::stream_query! {
    /// Impressions that got a click within 15 minutes (each impression once).
    query ClickedImpressions {
        source: memory,
        schema: Shown { imp_id: i64, imp_ts: Timestamp },
        watermark: imp_ts delay "10 minutes",
        join: {
            how: left_semi,
            stream: {
                source: memory,
                schema: Clicked { click_imp_id: i64, click_ts: Timestamp },
                watermark: click_ts delay "10 minutes",
            },
            on: click_imp_id == imp_id && click_ts >= imp_ts && click_ts <= imp_ts + interval("15 minutes"),
        },
        sink: memory(name = "clicked_impressions"),
        // Impressions and clicks behind the watermark, with their `side`.
        late_rows: memory(name = "late_impressions_and_clicks"),
    }
}

#[test]
fn joins_are_declared() {
    assert!(weir::plan::check(&ClicksByTier::plan()).is_empty());
    assert!(weir::plan::check(&ClickedImpressions::plan()).is_empty());
    assert!(
        ClicksByTier::EXPLAIN.contains(
            "  join       left_outer table page: files(path = \"data/pages\", format = csv)\n    schema   page: String, tier: i32\n    refresh  every \"10 minutes\" = 600000 ms\n"
        ),
        "{}",
        ClicksByTier::EXPLAIN
    );
    // The plan's tree: the join over the stream and the table.
    assert!(
        ClicksByTier::EXPLAIN.contains(
            "   +- HashJoin LeftOuter, using [page]\n      :- EventTimeWatermark event_ts, delay \"1 minute\"\n      :  +- StreamingRelation tier_click [page: string, event_ts: timestamp]\n      +- StaticTable page [page: string, tier: int]\n"
        ),
        "{}",
        ClicksByTier::EXPLAIN
    );
    // A left semi join keeps the left side's columns only.
    let fields: Vec<String> = <ClickedImpressionsRow as weir::Row>::fields()
        .into_iter()
        .map(|f| f.name)
        .collect();
    assert_eq!(fields, ["imp_id", "imp_ts"]);
    // Both sources are declared, so the query can start on its own.
    let _: fn(&weir::Session) -> weir::Result<weir::StreamingQuery> = ClicksByTier::start;
}

#[test]
fn a_declared_table_join_enriches_then_aggregates() {
    use weir::source::MemoryStream;
    use weir::Timestamp;

    let session = weir::Session::new();
    let clicks = MemoryStream::new(&<TierClick as weir::Row>::fields());
    let pages = <Page as weir::Row>::to_batch(&[
        Page {
            page: "/a".into(),
            tier: 1,
        },
        Page {
            page: "/b".into(),
            tier: 2,
        },
    ])
    .unwrap();
    // A table whose columns are not the declared ones is refused up front.
    let wrong = <TierClick as weir::Row>::to_batch(&[]).unwrap();
    let wrong = weir::StaticTable::from_batches(wrong.schema(), vec![wrong]);
    match ClicksByTier::writer_from(&session, Box::new(clicks.clone()), wrong) {
        Ok(_) => panic!("a table with other columns was accepted"),
        Err(e) => assert!(
            e.to_string()
                .contains("has columns (page: string, event_ts: timestamp), but the query declares (page: string, tier: int32)"),
            "{e}"
        ),
    }
    let table = weir::StaticTable::from_batches(pages.schema(), vec![pages]);
    let dir = tempfile::tempdir().unwrap();
    let q = ClicksByTier::writer_from(&session, Box::new(clicks.clone()), table)
        .unwrap()
        .checkpoint_location(dir.path().to_str().unwrap())
        .start()
        .unwrap();
    let t = |s: u32| Timestamp::parse(&format!("2024-01-01T12:00:{s:02}Z")).unwrap();
    clicks
        .add_rows(&[
            TierClick {
                page: "/a".into(),
                event_ts: t(1),
            },
            TierClick {
                page: "/b".into(),
                event_ts: t(2),
            },
            TierClick {
                page: "/a".into(),
                event_ts: t(3),
            },
            TierClick {
                page: "/unknown".into(),
                event_ts: t(4),
            },
        ])
        .unwrap();
    q.process_all_available().unwrap();
    q.stop().unwrap();
    let table = session.memory_table("clicks_by_tier").unwrap();
    let mut got: Vec<(Option<i32>, i64)> = ClicksByTier::rows(&table.rows())
        .unwrap()
        .into_iter()
        .map(|r| (r.tier, r.clicks))
        .collect();
    got.sort();
    // The unknown page has no tier (left outer: a null tier, its own group).
    assert_eq!(got, [(None, 1), (Some(1), 2), (Some(2), 1)]);
}
