//! Deduplication: `drop_duplicates_within_watermark` after a watermark (the
//! valid neighbour of `dedup_within_watermark_without_watermark`), and a
//! plain `drop_duplicates`, which Spark allows without one.

weir::stream_query! {
    /// Each event id once, within the 10-minute watermark.
    query UniqueEvents {
        source: files(path = "data/events", format = json),
        schema: Event { id: String, event_ts: Timestamp, value: i64 },
        watermark: event_ts delay "10 minutes",
        drop_duplicates_within_watermark: [id],
        sink: console,
    }
}

weir::stream_query! {
    /// Each (id, value) pair once, for as long as the query runs.
    query UniquePairs {
        source: files(path = "data/events", format = json),
        schema: PairEvent { id: String, event_ts: Timestamp, value: i64 },
        drop_duplicates: [id, value],
        sink: files(path = "out/unique_pairs", format = json),
        checkpoint: "chk/unique_pairs",
    }
}

#[test]
fn deduplication_is_declared() {
    let plan = UniqueEvents::plan();
    assert!(weir::plan::check(&plan).is_empty());
    assert_eq!(
        plan.nodes[0].ops[1],
        weir::plan::Op::Dedup {
            columns: vec!["id".into()],
            within_watermark: true
        }
    );
    assert!(weir::plan::check(&UniquePairs::plan()).is_empty());
    assert!(UniquePairs::EXPLAIN.contains("\n+- Deduplicate [id, value]\n   +- StreamingRelation "));
}
