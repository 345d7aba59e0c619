//! The continuous queries of the compile-fail cases, run in micro-batches:
//! the valid neighbours of `continuous_not_supported_yet`,
//! `continuous_current_time`, `continuous_drop_duplicates` and
//! `continuous_aggregation` (which is `rate_lab`).

weir::stream_query! {
    /// Even values, halved, every second.
    query Evens {
        source: rate(rows_per_second = 5),
        filter: value % 2 == 0,
        select: { timestamp, half: value / 2 },
        trigger: processing_time("1 second"),
        sink: console,
    }
}

weir::stream_query! {
    /// Rows stamped in the future (none), handed to a function per batch.
    query Recent {
        source: rate(rows_per_second = 5),
        filter: timestamp > now(),
        trigger: processing_time("1 second"),
        sink: foreach_batch(|_batch_id, _batches| Ok(())),
        checkpoint: "chk/recent",
    }
}

weir::stream_query! {
    /// Each line of a socket once.
    query Unique {
        source: socket(port = 9999),
        drop_duplicates: [value],
        trigger: processing_time("1 second"),
        sink: console,
    }
}

#[test]
fn micro_batch_neighbours_pass_the_rules() {
    for plan in [Evens::plan(), Recent::plan(), Unique::plan()] {
        assert!(weir::plan::check(&plan).is_empty(), "{plan:?}");
        assert_eq!(
            plan.trigger,
            Some(weir::plan::TriggerDecl::ProcessingTime(1000))
        );
    }
    let row = EvensRow {
        timestamp: weir::Timestamp(0),
        half: 1,
    };
    assert_eq!(row.half, 1);
}
