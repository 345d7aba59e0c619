//! The aggregation's first stage with its rows shared among the free
//! workers ([`crate::ops::morsels`]), where how rows are split cannot
//! change a result: every aggregate is order-free ([`Acc::order_free`]:
//! counts, integer sums, `min`/`max`, `approx_count_distinct`) and the
//! narrow steps before it only watch event times (they keep every row, so
//! the workers group the input itself).
//!
//! With a fixed cut (two tasks for a 100k-row batch), a worker still busy
//! with the batch before (its state stage, while this one is read ahead)
//! starts its task late, and the other worker idles once its own is done.
//! Here each worker takes rows as it comes free, so the tasks end
//! together. The input is cut into slices of up to two tasks' rows per
//! worker, and each slice into morsels of [`morsels::MORSEL`] rows; a task
//! groups the morsels it claims of one slice into one partial result, and
//! starts another when its next morsel is in another slice. So one large
//! slice costs at most a partial result per worker that took part (a fixed
//! cut's cost), and small input batches are a morsel each, shared as the
//! fixed cut's tasks would be.
//!
//! [`Acc::order_free`]: super::Acc::order_free

use std::cell::{Cell, RefCell};
use std::ops::Range;
use std::sync::atomic::Ordering;

use arrow::record_batch::RecordBatch;
use rayon::prelude::*;

use super::{one_task_sets, AggCore, GroupSet, Routed, SliceInput, TaskShare};
use crate::error::Result;
use crate::ops::morsels::{self, MORSEL};
use crate::ops::narrow::{Narrow, SliceEventTimes};
use crate::ops::tasks::{even_ranges, ROWS_PER_TASK};

impl AggCore {
    /// Whether [`AggCore::route_shared`] gives the same groups as the fixed
    /// cut: more than one worker to share with, narrow steps that keep
    /// every row, and only order-free aggregates.
    pub(super) fn shares_rows(&self, narrow: &Narrow) -> bool {
        rayon::current_num_threads() > 1
            && narrow.observes_only()
            && self.new_accs().iter().all(|a| a.order_free())
    }

    /// [`AggCore::route`] with the rows shared among the pool's workers, a
    /// wave of slices at a time (up to two tasks' rows per worker, as the
    /// fixed cut's waves); all but the last wave are merged into their
    /// partitions as they are done.
    pub(super) fn route_shared(
        &self,
        narrow: &Narrow,
        input: &[RecordBatch],
        n: usize,
    ) -> Result<Routed> {
        let workers = rayon::current_num_threads();
        let wave_rows = ROWS_PER_TASK * 2 * workers;
        let slices: Vec<RecordBatch> = input
            .iter()
            .flat_map(|b| even_ranges(b.num_rows(), wave_rows).map(|r| b.slice(r.start, r.len())))
            .collect();
        // Consecutive slices up to a wave's rows (a large one alone), and
        // at most two per worker (as a fixed cut's wave), so that many
        // small input batches are merged as they go, not all held at once.
        let mut waves: Vec<&[RecordBatch]> = vec![];
        let (mut from, mut rows) = (0, 0);
        for (i, s) in slices.iter().enumerate() {
            if i > from && (rows + s.num_rows() > wave_rows || i - from == 2 * workers) {
                waves.push(&slices[from..i]);
                (from, rows) = (i, 0);
            }
            rows += s.num_rows();
        }
        waves.push(&slices[from..]);
        let total: usize = slices.iter().map(|s| s.num_rows()).sum();
        let width = self.aggs.len();
        let share = self.groups_hint.load(Ordering::Relaxed).min(total) / n.max(1);
        let indexed =
            || -> Vec<GroupSet> { (0..n).map(|_| GroupSet::indexed(width, share)).collect() };
        let (mut lost, mut seen, mut most) = (0, Vec::new(), 0);
        let last_wave = waves.pop().unwrap_or_default();
        // The waves merged into `sets` before the last.
        let merged_before = waves;
        let mut sets = if merged_before.is_empty() {
            vec![]
        } else {
            indexed()
        };
        for &wave in &merged_before {
            let shares = self.share_wave(narrow, wave, n, workers)?;
            lost += shares.iter().map(|t| t.lost).sum::<i64>();
            most = shares.iter().map(|t| t.groups.len()).fold(most, usize::max);
            let merge = |(p, set): (usize, &mut GroupSet)| self.merge_wave(p, set, &shares);
            sets.par_iter_mut().enumerate().try_for_each(merge)?;
            seen.extend(shares.into_iter().map(|t| t.seen));
        }
        let last = self.share_wave(narrow, last_wave, n, workers)?;
        lost += last.iter().map(|t| t.lost).sum::<i64>();
        most = last.iter().map(|t| t.groups.len()).fold(most, usize::max);
        if most > 0 {
            // The most any task found: the next batch's first guess.
            self.groups_hint.store(most, Ordering::Relaxed);
        }
        if merged_before.is_empty() {
            // Nothing merged yet: the last wave's tasks are merged by their
            // partitions, into sets without an index for one task's groups.
            sets = match last.as_slice() {
                [] | [_] => one_task_sets(width, n, last.first()),
                _ => indexed(),
            };
        }
        Ok(Routed {
            sets,
            last,
            lost,
            seen,
        })
    }

    /// One wave's slices grouped by up to `workers` tasks, each over the
    /// morsels it claims (their event times watched as they are claimed),
    /// a partial result per slice a task worked on, routed to the `n`
    /// partitions.
    fn share_wave(
        &self,
        narrow: &Narrow,
        wave: &[RecordBatch],
        n: usize,
        workers: usize,
    ) -> Result<Vec<TaskShare>> {
        // Each slice's columns read once, for every task that groups it.
        let inputs: Vec<SliceInput<'_>> = wave
            .par_iter()
            .map(|s| self.slice_input(s))
            .collect::<Result<_>>()?;
        let morsels: Vec<(usize, Range<usize>)> = wave
            .iter()
            .enumerate()
            .flat_map(|(i, s)| even_ranges(s.num_rows(), MORSEL).map(move |r| (i, r)))
            .filter(|(_, r)| !r.is_empty())
            .collect();
        let per_task = morsels::share(morsels.len(), workers, |first, claims| {
            let mut shares = vec![];
            let mut next = Some(first);
            while let Some(m) = next.take() {
                let slice = morsels[m].0;
                let seen = RefCell::new(SliceEventTimes::default());
                // A step that fails stops this task; its error is the task's.
                let failed = RefCell::new(None);
                // The first morsel, then those claimed while in this slice;
                // one in another slice is the next partial result's first.
                let pending = Cell::new(Some(m));
                let claim = || {
                    if failed.borrow().is_some() {
                        return None;
                    }
                    let m = pending.take().or_else(|| claims.claim())?;
                    let (s, r) = &morsels[m];
                    if *s != slice {
                        pending.set(Some(m));
                        return None;
                    }
                    match narrow.apply(&wave[slice].slice(r.start, r.len())) {
                        Ok((_, sums)) => seen.borrow_mut().extend(sums),
                        Err(e) => {
                            *failed.borrow_mut() = Some(e);
                            return None;
                        }
                    }
                    Some(r.clone())
                };
                let (groups, lost) = self.group_slice(&inputs[slice], &claim)?;
                if let Some(e) = failed.into_inner() {
                    return Err(e);
                }
                shares.push(self.routed_share(groups, lost, seen.into_inner(), n));
                next = pending.take();
            }
            Ok(shares)
        })?;
        Ok(per_task.into_iter().flatten().collect())
    }
}
