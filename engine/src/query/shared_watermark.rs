//! The watermark across processes (scale-out): a task of a query spread
//! over many processes sees only its own partition's event times, while
//! Spark's watermark is the maximum over the whole source, and Spark judges
//! a row late against the watermark of the batch that reads it. A task must
//! never judge a row late that Spark would have kept.
//!
//! - A task reading an input partition follows its own rows while it has
//!   rows pending: its backlog is judged by its own partition's time (Spark,
//!   reading every partition in each batch, would not have been ahead).
//! - Once it has caught up, and every task feeding it has caught up with
//!   its input (checked against the input's end offsets, not trusted from
//!   an old report), it takes the largest watermark any task has published:
//!   everything written so far has reached it, so its windows close as the
//!   whole source's time moves, as in one process.
//! - A task reading a repartition topic cannot judge by its own rows: rows
//!   from first-stage tasks at different paces interleave in its partition.
//!   Each row carries the watermark of the first-stage batch that wrote it,
//!   which is what Spark would have judged it by; later rows from that task
//!   carry the same or more. So the second stage moves to the least, over
//!   the first-stage tasks, of the latest such watermark it has read from
//!   each (or, when it has caught up, of what each has announced for its
//!   next batch).
//!
//! A batch's watermark is logged in `offsets/N` before it is published, so
//! a re-run after a crash uses the same one.

use weir_plan::WatermarkPolicy;

use crate::source::Offset;

/// How a task's watermark may move while it has rows pending.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pending {
    /// By its own rows' event times (a task reading its input partition).
    OwnRows,
    /// Up to this bound (ms; `None`: not at all), whatever its own rows say
    /// (a task fed by other tasks).
    Bound(Option<i64>),
}

/// Shares watermarks between the tasks of a scale-out query.
pub trait WatermarkShare: Send + Sync {
    /// Called before the task reads its input's latest offsets: the
    /// largest watermark per operator any task has published, when every
    /// task feeding this one has caught up; `None` otherwise.
    fn whole_source(&self, operators: usize) -> Option<Vec<Option<i64>>>;
    /// How the task's watermark may move; `caught_up`: it has no rows
    /// pending.
    fn pending(&self, caught_up: bool) -> Pending;
    /// Publishes the task's own watermark per watermark operator (ms;
    /// `None`: no rows yet), whether it has caught up, the position its
    /// input was read to (its source's committed offset) and the watermark
    /// its next batch runs with (logged already).
    fn publish(
        &self,
        own: &[Option<i64>],
        caught_up: bool,
        position: Option<&Offset>,
        next_batch_watermark_ms: i64,
    );
    /// Batch `batch_id` runs with watermark `watermark_ms` (a re-run too):
    /// for a sink that writes it with the rows.
    fn batch(&self, batch_id: i64, watermark_ms: i64);
}

/// Folds the other tasks' watermarks into this task's, per operator: an
/// operator's watermark never moves back.
pub(crate) fn merge(local: &mut [Option<i64>], global: &[Option<i64>]) {
    for (l, g) in local.iter_mut().zip(global) {
        if let Some(g) = g {
            if l.is_none_or(|l| *g > l) {
                *l = Some(*g);
            }
        }
    }
}

/// The query's watermark from its operators' (Spark's multiple-watermark
/// policy): `min` waits until every operator has seen data.
pub(crate) fn choose(policy: WatermarkPolicy, op_wms: &[Option<i64>]) -> Option<i64> {
    let known: Vec<i64> = op_wms.iter().flatten().copied().collect();
    match policy {
        WatermarkPolicy::Min if known.len() < op_wms.len() => None,
        WatermarkPolicy::Min => known.iter().min().copied(),
        WatermarkPolicy::Max => known.iter().max().copied(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_keeps_the_larger_per_operator() {
        let mut local = vec![Some(5), None, Some(9)];
        merge(&mut local, &[Some(7), Some(3), Some(2)]);
        assert_eq!(local, vec![Some(7), Some(3), Some(9)]);
    }

    #[test]
    fn min_policy_waits_for_every_operator() {
        assert_eq!(choose(WatermarkPolicy::Min, &[Some(5), None]), None);
        assert_eq!(choose(WatermarkPolicy::Min, &[Some(5), Some(3)]), Some(3));
        assert_eq!(choose(WatermarkPolicy::Max, &[Some(5), None]), Some(5));
        assert_eq!(choose(WatermarkPolicy::Max, &[None]), None);
    }
}
