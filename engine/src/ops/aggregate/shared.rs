//! The aggregation's first stage with its slices shared among the free
//! workers ([`crate::ops::morsels`]), where how rows are split cannot
//! change a result: every aggregate is order-free ([`Acc::order_free`]:
//! counts, integer sums) and the narrow steps before it only watch event
//! times (they keep every row, so the workers group the slice itself).
//!
//! With a fixed cut (two tasks for a 100k-row batch), a worker still busy
//! with the batch before (its state stage, while this one is read ahead)
//! starts its task late, and the other worker idles once its own is done.
//! Here each worker takes rows as it comes free, so the slice's tasks end
//! together, and a slice costs at most one partial result per worker that
//! took part (the fixed cut's cost).

use arrow::record_batch::RecordBatch;
use rayon::prelude::*;

use super::{AggCore, GroupSet, Routed, TaskShare};
use crate::error::Result;
use crate::ops::morsels;
use crate::ops::narrow::{Narrow, SliceEventTimes};
use crate::ops::tasks::{even_ranges, ROWS_PER_TASK};

impl AggCore {
    /// Whether [`AggCore::route_shared`] gives the same groups as the fixed
    /// cut: more than one worker to share with, narrow steps that keep
    /// every row, and only order-free aggregates.
    pub(super) fn shares_slices(&self, narrow: &Narrow) -> bool {
        rayon::current_num_threads() > 1
            && narrow.observes_only()
            && self.new_accs().iter().all(|a| a.order_free())
    }

    /// [`AggCore::route`] with each slice shared among the pool's workers:
    /// slices of up to a fixed cut's wave (two tasks per worker), each
    /// grouped by the workers free to take part, a morsel at a time. All
    /// but the last slice are merged into their partitions as they are done.
    pub(super) fn route_shared(
        &self,
        narrow: &Narrow,
        input: &[RecordBatch],
        n: usize,
    ) -> Result<Routed> {
        let workers = rayon::current_num_threads();
        let mut slices: Vec<RecordBatch> = input
            .iter()
            .flat_map(|b| {
                even_ranges(b.num_rows(), ROWS_PER_TASK * 2 * workers)
                    .map(|r| b.slice(r.start, r.len()))
            })
            .collect();
        let rows: usize = slices.iter().map(|s| s.num_rows()).sum();
        let width = self.aggs.len();
        let share = self
            .groups_hint
            .load(std::sync::atomic::Ordering::Relaxed)
            .min(rows)
            / n.max(1);
        let mut sets: Vec<GroupSet> = (0..n).map(|_| GroupSet::indexed(width, share)).collect();
        let (mut lost, mut seen) = (0, Vec::new());
        let last = slices.pop();
        for slice in &slices {
            let shares = self.share_slice(narrow, slice, n, workers)?;
            lost += shares.iter().map(|t| t.lost).sum::<i64>();
            let merge = |(p, set): (usize, &mut GroupSet)| self.merge_wave(p, set, &shares);
            sets.par_iter_mut().enumerate().try_for_each(merge)?;
            seen.extend(shares.into_iter().map(|t| t.seen));
        }
        let last = match &last {
            Some(slice) => self.share_slice(narrow, slice, n, workers)?,
            None => vec![],
        };
        lost += last.iter().map(|t| t.lost).sum::<i64>();
        Ok(Routed {
            sets,
            last,
            lost,
            seen,
        })
    }

    /// One slice grouped by up to `workers` tasks, each over the morsels it
    /// claims (their event times watched as they are claimed), routed to
    /// the `n` partitions.
    fn share_slice(
        &self,
        narrow: &Narrow,
        slice: &RecordBatch,
        n: usize,
        workers: usize,
    ) -> Result<Vec<TaskShare>> {
        morsels::share(slice.num_rows(), workers, |rows| {
            let seen = std::cell::RefCell::new(SliceEventTimes::default());
            // A step that fails stops this task's claims; its error is the
            // task's.
            let failed = std::cell::RefCell::new(None);
            let claim = || {
                if failed.borrow().is_some() {
                    return None;
                }
                let r = rows.claim()?;
                match narrow.apply(&slice.slice(r.start, r.len())) {
                    Ok((_, s)) => seen.borrow_mut().merge(s),
                    Err(e) => {
                        *failed.borrow_mut() = Some(e);
                        return None;
                    }
                }
                Some(r)
            };
            let (groups, lost) = self.partial_of(slice, &claim)?;
            if let Some(e) = failed.into_inner() {
                return Err(e);
            }
            Ok(self.routed_share(groups, lost, seen.into_inner(), n))
        })
    }
}
