//! What holds a query's output back, in its progress: when each stateful
//! operator's earliest state row is due (its earliest open window's end),
//! and which watermark holds the query's watermark back. Spark's progress
//! has no field for either, so they go where Spark puts custom data: the
//! state operator's `customMetrics` and the source's `metrics`, under the
//! keys below; the JSON keeps Spark's shape.

use weir_plan::WatermarkPolicy;

use super::{SourceProgress, StateOperatorProgress};

/// `customMetrics` key: the earliest time (epoch ms) at which a state row
/// of the operator is evicted, i.e. the watermark its next eviction waits
/// for; for a window aggregation in append mode, the end of the earliest
/// open window (emitted once the watermark reaches it). Absent when no
/// state row waits on the watermark.
pub const NEXT_EVICTION_TIME_MS: &str = "nextEvictionTimeMs";

/// `customMetrics` key: the start (epoch ms) of the window whose end is
/// [`NEXT_EVICTION_TIME_MS`] (window and session-window aggregations).
pub const NEXT_EVICTION_WINDOW_START_MS: &str = "nextEvictionWindowStartMs";

/// `customMetrics` key: rows the operator dropped as late in the batch and
/// routed to the late-rows side output (`StreamWriter::late_rows_to`);
/// present only when the query has one. Input rows, where
/// `numRowsDroppedByWatermark` counts groups after partial aggregation.
pub const LATE_ROWS_TO_SIDE_OUTPUT: &str = "numLateRowsToSideOutput";

/// Source `metrics` key: the event-time column of the source's watermark.
pub const WATERMARK_COLUMN: &str = "watermarkColumn";

/// Source `metrics` key: the watermark's delay threshold (ms).
pub const WATERMARK_DELAY_MS: &str = "watermarkDelayMs";

/// Source `metrics` key: the latest event time its watermark has seen, over
/// every batch so far (epoch ms); absent until it saw a row.
pub const MAX_EVENT_TIME_MS: &str = "maxEventTimeMs";

/// Source `metrics` key: its own watermark (the max event time minus the
/// delay, epoch ms), the one the query's next batch takes into account.
pub const SOURCE_WATERMARK_MS: &str = "watermarkMs";

/// Source `metrics` key: `1` on the source whose watermark the query's is
/// (under the `min` policy the lowest, or one that has seen no row yet;
/// under `max` the highest), `0` on the other watermarked sources.
pub const HOLDS_WATERMARK: &str = "holdsWatermark";

/// One `with_watermark` of a query: where it reads and what it waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatermarkOperator {
    /// Its event-time column.
    pub column: String,
    /// The index of the source its rows come from (`None`: not a source's,
    /// e.g. a static table's).
    pub source: Option<usize>,
    /// Its delay threshold (ms).
    pub delay_ms: i64,
}

/// The watermark operator whose watermark the query's is under `policy`
/// (`own` holds each one's own watermark, `None` before it saw a row):
/// under `min`, the first that has seen no row, else the lowest; under
/// `max`, the highest. `None` when no operator qualifies.
pub fn holder(policy: WatermarkPolicy, own: &[Option<i64>]) -> Option<usize> {
    match policy {
        WatermarkPolicy::Min => own.iter().position(Option::is_none).or_else(|| {
            own.iter()
                .enumerate()
                .filter_map(|(i, w)| w.map(|w| (w, i)))
                .min()
                .map(|(_, i)| i)
        }),
        WatermarkPolicy::Max => own
            .iter()
            .enumerate()
            .filter_map(|(i, w)| w.map(|w| (w, std::cmp::Reverse(i))))
            .max()
            .map(|(_, std::cmp::Reverse(i))| i),
    }
}

/// Adds each watermark operator's column, delay, max event time, own
/// watermark and whether it holds the query's watermark to the `metrics`
/// of the source it reads (a source with several keeps its first).
pub fn annotate_sources(
    sources: &mut [SourceProgress],
    ops: &[WatermarkOperator],
    own: &[Option<i64>],
    policy: WatermarkPolicy,
) {
    let held_by = holder(policy, own);
    for (i, op) in ops.iter().enumerate() {
        let Some(s) = op.source.and_then(|s| sources.get_mut(s)) else {
            continue;
        };
        if s.metrics.contains_key(WATERMARK_COLUMN) {
            continue;
        }
        let m = &mut s.metrics;
        m.insert(WATERMARK_COLUMN.into(), op.column.clone());
        m.insert(WATERMARK_DELAY_MS.into(), op.delay_ms.to_string());
        if let Some(w) = own.get(i).copied().flatten() {
            m.insert(SOURCE_WATERMARK_MS.into(), w.to_string());
            m.insert(
                MAX_EVENT_TIME_MS.into(),
                w.saturating_add(op.delay_ms).to_string(),
            );
        }
        let holds = u8::from(held_by == Some(i));
        m.insert(HOLDS_WATERMARK.into(), holds.to_string());
    }
}

/// Keeps the earlier of the operator's next eviction and one at `at_us`
/// (µs; the window starting at `window_start_us`, if a window) in `m`'s
/// custom metrics, in ms: the watermark that evicts a row at `at_us` is
/// the first whole millisecond at or after it.
pub fn note_next_eviction(m: &mut StateOperatorProgress, at_us: i64, window_start_us: Option<i64>) {
    let at_ms = at_us.div_euclid(1000) + i64::from(at_us.rem_euclid(1000) != 0);
    let c = &mut m.custom_metrics;
    if c.get(NEXT_EVICTION_TIME_MS).is_some_and(|e| *e <= at_ms) {
        return;
    }
    c.insert(NEXT_EVICTION_TIME_MS.into(), at_ms);
    match window_start_us {
        Some(s) => c.insert(NEXT_EVICTION_WINDOW_START_MS.into(), s.div_euclid(1000)),
        None => c.remove(NEXT_EVICTION_WINDOW_START_MS),
    };
}

/// Records in `m` how many rows the operator routed to the late-rows side
/// output this batch.
pub fn note_late_rows(m: &mut StateOperatorProgress, rows: usize) {
    m.custom_metrics
        .insert(LATE_ROWS_TO_SIDE_OUTPUT.into(), rows as i64);
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn source(desc: &str) -> SourceProgress {
        SourceProgress {
            description: desc.into(),
            start_offset: None,
            end_offset: None,
            latest_offset: None,
            num_input_rows: 0,
            input_rows_per_second: 0.0,
            processed_rows_per_second: 0.0,
            metrics: BTreeMap::new(),
        }
    }

    fn op(column: &str, source: Option<usize>, delay_ms: i64) -> WatermarkOperator {
        WatermarkOperator {
            column: column.into(),
            source,
            delay_ms,
        }
    }

    #[test]
    fn the_holder_is_the_lowest_or_one_without_rows_under_min_the_highest_under_max() {
        use WatermarkPolicy::{Max, Min};
        assert_eq!(holder(Min, &[Some(5), Some(3), Some(9)]), Some(1));
        assert_eq!(holder(Min, &[Some(5), None, Some(1)]), Some(1));
        assert_eq!(holder(Min, &[Some(4), Some(4)]), Some(0));
        assert_eq!(holder(Max, &[Some(5), None, Some(9)]), Some(2));
        assert_eq!(holder(Max, &[Some(9), Some(9)]), Some(0));
        assert_eq!(holder(Max, &[None]), None);
        assert_eq!(holder(Min, &[]), None);
    }

    #[test]
    fn sources_get_their_watermark_column_delay_max_event_time_and_who_holds_it() {
        let mut sources = vec![source("clicks"), source("views"), source("table")];
        sources[0]
            .metrics
            .insert("maxOffsetsBehindLatest".into(), "3".into());
        let ops = [
            op("ts", Some(0), 120_000),
            op("at", Some(1), 10_000),
            op("t", None, 0),
        ];
        annotate_sources(
            &mut sources,
            &ops,
            &[Some(1_000_000), Some(2_000_000), None],
            WatermarkPolicy::Min,
        );
        let m = &sources[0].metrics;
        assert_eq!(m[WATERMARK_COLUMN], "ts");
        assert_eq!(m[WATERMARK_DELAY_MS], "120000");
        assert_eq!(m[SOURCE_WATERMARK_MS], "1000000");
        assert_eq!(m[MAX_EVENT_TIME_MS], "1120000");
        // The third watermark has no source: it holds the query's back
        // (no row yet) but no source is marked for it.
        assert_eq!(m[HOLDS_WATERMARK], "0");
        assert_eq!(m["maxOffsetsBehindLatest"], "3", "the source's own stay");
        assert_eq!(sources[1].metrics[HOLDS_WATERMARK], "0");
        assert!(sources[2].metrics.is_empty());

        let mut sources = vec![source("clicks"), source("views")];
        annotate_sources(
            &mut sources,
            &ops[..2],
            &[Some(1_000_000), None],
            WatermarkPolicy::Min,
        );
        assert_eq!(sources[0].metrics[HOLDS_WATERMARK], "0");
        let v = &sources[1].metrics;
        assert_eq!(v[HOLDS_WATERMARK], "1", "no row yet holds a min watermark");
        assert!(!v.contains_key(MAX_EVENT_TIME_MS) && !v.contains_key(SOURCE_WATERMARK_MS));
        assert_eq!(v[WATERMARK_COLUMN], "at");
    }

    #[test]
    fn the_next_eviction_is_the_earliest_rounded_up_to_a_whole_ms() {
        let mut m = StateOperatorProgress::new("stateStoreSave");
        note_next_eviction(&mut m, 10_000_500, None);
        assert_eq!(m.custom_metrics[NEXT_EVICTION_TIME_MS], 10_001);
        note_next_eviction(&mut m, 9_000_000, Some(8_000_000));
        assert_eq!(m.custom_metrics[NEXT_EVICTION_TIME_MS], 9_000);
        assert_eq!(m.custom_metrics[NEXT_EVICTION_WINDOW_START_MS], 8_000);
        note_next_eviction(&mut m, 9_500_000, Some(9_000_000));
        assert_eq!(
            m.custom_metrics[NEXT_EVICTION_TIME_MS], 9_000,
            "a later one is ignored"
        );
        assert_eq!(m.custom_metrics[NEXT_EVICTION_WINDOW_START_MS], 8_000);
        note_next_eviction(&mut m, 1_000, None);
        assert_eq!(m.custom_metrics[NEXT_EVICTION_TIME_MS], 1);
        assert!(!m.custom_metrics.contains_key(NEXT_EVICTION_WINDOW_START_MS));
    }

    #[test]
    fn the_progress_json_keeps_sparks_shape() {
        let mut m = StateOperatorProgress::new("stateStoreSave");
        note_next_eviction(&mut m, 300_000_000, Some(0));
        note_late_rows(&mut m, 2);
        let v = serde_json::to_value(&m).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        assert_eq!(keys.len(), 12, "Spark's fields only: {keys:?}");
        assert_eq!(v["customMetrics"][NEXT_EVICTION_TIME_MS], 300_000);
        assert_eq!(v["customMetrics"][NEXT_EVICTION_WINDOW_START_MS], 0);
        assert_eq!(v["customMetrics"][LATE_ROWS_TO_SIDE_OUTPUT], 2);
    }
}
