//! The watermark across processes (scale-out): a task of a query spread
//! over many processes sees only its own partition's event times, while
//! Spark's watermark is the maximum over the whole source. Each task
//! publishes its own watermark operators' watermarks (from the rows it has
//! committed) and whether it has caught up with its input.
//!
//! A task that has caught up, when every task feeding it has too, takes the
//! largest watermark any task has published: everything read so far has
//! reached it, so its windows close as the whole source's time moves, as in
//! one process. Otherwise a task reading its input partition directly
//! keeps its own watermark: its backlog is judged against its own
//! partition's time, never against partitions that ran ahead (Spark,
//! reading every partition in each batch, would not have been ahead
//! either). A task reading a repartition topic holds its watermark while
//! rows may still be on their way to it: rows from first-stage tasks at
//! different paces interleave in its partition, so its own event times say
//! nothing about the rows not yet arrived. The batch's watermark is logged
//! in `offsets/N`, so a re-run after a crash uses the same.

use weir_plan::WatermarkPolicy;

/// Shares watermark operators' watermarks between the tasks of a query.
pub trait WatermarkShare: Send + Sync {
    /// Called before the task reads its input's latest offsets: the
    /// largest watermark per operator any task has published, when every
    /// task feeding this one had caught up; `None` otherwise.
    fn whole_source(&self, operators: usize) -> Option<Vec<Option<i64>>>;
    /// Publishes this task's own watermark per watermark operator (ms;
    /// `None`: no data yet) and whether it has caught up with its input.
    fn publish(&self, own: &[Option<i64>], caught_up: bool);
    /// Whether the task's watermark may follow its own rows while it has
    /// rows pending (false for a task fed by other tasks).
    fn follows_own_rows(&self) -> bool;
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
