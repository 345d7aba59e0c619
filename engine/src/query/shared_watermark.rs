//! The watermark across processes (scale-out): a task of a query spread
//! over many processes sees only its own partition's event times, while
//! Spark's watermark is the maximum over the whole source. Before planning a
//! batch each task publishes its watermark operators' watermarks; a task
//! that has caught up with its input (no rows pending) takes the largest
//! any task has published, so its windows close as the whole source's time
//! moves, as they would in one process. A task with rows pending keeps its
//! own: its backlog is judged against its own partition's time, never
//! against other partitions that ran ahead (Spark, reading all partitions
//! in each batch, would not have been ahead either). The batch's watermark
//! is logged in `offsets/N`, so a re-run after a crash uses the same.

use weir_plan::WatermarkPolicy;

/// Exchanges watermark operators' watermarks between the tasks of a query.
pub trait WatermarkShare: Send + Sync {
    /// Publishes this task's watermark per watermark operator (ms; `None`:
    /// not seen data yet). `caught_up`: the task has no rows pending. Returns
    /// the watermarks the task's next batch may use: for a caught-up task,
    /// per operator, the largest any task of the query has published (this
    /// one's included); otherwise its own.
    fn exchange(&self, local: &[Option<i64>], caught_up: bool) -> Vec<Option<i64>>;
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
