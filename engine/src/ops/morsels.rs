//! Work cut into morsels shared by every worker free to take part: each
//! task claims the next morsel in turn until none are left. A worker that
//! frees up while another is midway takes its share of what remains,
//! instead of idling until the other ends, as it must with a fixed cut
//! into tasks (see [`crate::ops::tasks`]). Only the tasks that claimed a
//! morsel run the work, so no task comes back empty-handed.
//!
//! Which task gets which morsels depends on timing: this is only for work
//! whose result does not depend on how it is split among tasks nor on its
//! order (counts, integer sums, `min`/`max`, `approx_count_distinct`).

use std::sync::atomic::{AtomicUsize, Ordering};

use rayon::prelude::*;

use crate::error::Result;

/// Rows in a morsel of a slice: small enough that the last claims end
/// close together, large enough that claiming costs nothing measurable.
pub const MORSEL: usize = 8192;

/// The morsels `0..count`, handed out one at a time.
pub struct Morsels {
    count: usize,
    next: AtomicUsize,
}

impl Morsels {
    /// Morsels `0..count`, none claimed yet.
    pub fn new(count: usize) -> Morsels {
        Morsels {
            count,
            next: AtomicUsize::new(0),
        }
    }

    /// The next morsel no task has claimed (`None` once all are).
    pub fn claim(&self) -> Option<usize> {
        let at = self.next.fetch_add(1, Ordering::Relaxed);
        (at < self.count).then_some(at)
    }
}

/// Runs `work` on morsels `0..count` shared by up to `workers` tasks on
/// the pool it is called in: each task that claims a morsel calls `work`
/// with it and the shared [`Morsels`] to claim more from. Returns what
/// those tasks returned, in task order (one result when a single worker
/// was free throughout).
pub fn share<T: Send>(
    count: usize,
    workers: usize,
    work: impl Fn(usize, &Morsels) -> Result<T> + Sync + Send,
) -> Result<Vec<T>> {
    let morsels = Morsels::new(count);
    let done: Vec<Option<T>> = (0..workers.max(1))
        .into_par_iter()
        .map(|_| {
            morsels
                .claim()
                .map(|first| work(first, &morsels))
                .transpose()
        })
        .collect::<Result<_>>()?;
    Ok(done.into_iter().flatten().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_morsel_is_claimed_once_however_many_workers_share_them() {
        for workers in [1, 2, 3, 8] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(workers.min(4))
                .build()
                .unwrap();
            for count in [0, 1, 2, 7, 100] {
                let claimed = pool
                    .install(|| {
                        share(count, workers, |first, morsels| {
                            let mut mine = vec![first];
                            while let Some(m) = morsels.claim() {
                                mine.push(m);
                            }
                            Ok(mine)
                        })
                    })
                    .unwrap();
                assert!(claimed.len() <= workers.min(count));
                assert!(claimed.iter().all(|m| !m.is_empty()));
                let mut all: Vec<usize> = claimed.into_iter().flatten().collect();
                all.sort_unstable();
                assert_eq!(
                    all,
                    (0..count).collect::<Vec<_>>(),
                    "{workers} workers, {count} morsels"
                );
            }
        }
    }

    #[test]
    fn a_task_that_finds_nothing_left_returns_nothing() {
        // One worker: the second task starts after the first claimed all.
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let ran = pool
            .install(|| {
                share(3, 2, |_, morsels| {
                    let mut n = 1;
                    while morsels.claim().is_some() {
                        n += 1;
                    }
                    Ok(n)
                })
            })
            .unwrap();
        assert_eq!(ran, vec![3]);
    }

    #[test]
    fn an_error_is_returned() {
        let e = share(10, 2, |_, _| -> Result<()> {
            Err(crate::error::WeirError::Config("boom".into()))
        });
        assert!(e.is_err());
    }
}
