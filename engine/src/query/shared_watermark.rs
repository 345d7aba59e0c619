//! The watermark across processes (scale-out): a task of a query spread
//! over many processes sees only its own partitions' event times, while
//! Spark's watermark is the maximum over the whole source. Before planning a
//! batch the task publishes its watermark operators' watermarks and reads
//! the largest each operator has reached in any task; the batch runs with
//! those (logged in `offsets/N`, so a re-run uses the same).

use weir_plan::WatermarkPolicy;

/// Exchanges watermark operators' watermarks between the tasks of a query.
pub trait WatermarkShare: Send + Sync {
    /// Publishes this task's watermark per watermark operator (ms; `None`:
    /// not seen data yet) and returns, per operator, the largest any task of
    /// the query has published (this one's included).
    fn exchange(&self, local: &[Option<i64>]) -> Vec<Option<i64>>;
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
