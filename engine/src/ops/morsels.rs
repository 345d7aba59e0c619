//! A slice of rows shared by every worker free to take part: each claims
//! the next [`MORSEL`] rows in turn until none are left. A worker that
//! frees up while another is midway through the slice takes its share of
//! what remains, instead of idling until the other ends, as it must with a
//! fixed cut into tasks (see [`crate::ops::tasks`]). Only the workers that
//! got rows return a result, so a slice costs no more partial results than
//! the workers that took part.
//!
//! Which worker gets which rows depends on timing: this is only for work
//! whose result does not depend on how rows are split among tasks nor on
//! their order (counts, integer sums).

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

use rayon::prelude::*;

use crate::error::Result;

/// Rows a worker claims at a time: small enough that the last claims end
/// close together, large enough that claiming costs nothing measurable.
pub const MORSEL: usize = 8192;

/// The rows `0..len` of a slice, handed out [`MORSEL`] at a time.
pub struct Morsels {
    len: usize,
    next: AtomicUsize,
}

impl Morsels {
    /// Rows `0..len`, none claimed yet.
    pub fn new(len: usize) -> Morsels {
        Morsels {
            len,
            next: AtomicUsize::new(0),
        }
    }

    /// The next rows no worker has claimed (`None` once all are).
    pub fn claim(&self) -> Option<Range<usize>> {
        let at = self.next.fetch_add(MORSEL, Ordering::Relaxed);
        (at < self.len).then(|| at..(at + MORSEL).min(self.len))
    }

    /// Whether every row was claimed.
    pub fn done(&self) -> bool {
        self.next.load(Ordering::Relaxed) >= self.len
    }
}

/// Runs `work` on rows `0..len` shared by up to `workers` tasks on the pool
/// it is called in: each task calls `work` with the shared [`Morsels`]
/// unless every row was claimed before it started. Returns what the tasks
/// that ran returned, in task order (one result when a single worker was
/// free throughout).
pub fn share<T: Send>(
    len: usize,
    workers: usize,
    work: impl Fn(&Morsels) -> Result<T> + Sync + Send,
) -> Result<Vec<T>> {
    let rows = Morsels::new(len);
    let done: Vec<Option<T>> = (0..workers.max(1))
        .into_par_iter()
        .map(|_| (!rows.done()).then(|| work(&rows)).transpose())
        .collect::<Result<_>>()?;
    Ok(done.into_iter().flatten().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_is_claimed_once_however_many_workers_share_it() {
        for workers in [1, 2, 3, 8] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(workers.min(4))
                .build()
                .unwrap();
            for len in [0, 1, MORSEL - 1, MORSEL, 5 * MORSEL + 17] {
                let claimed = pool
                    .install(|| {
                        share(len, workers, |rows| {
                            let mut mine = vec![];
                            while let Some(r) = rows.claim() {
                                mine.extend(r);
                            }
                            Ok(mine)
                        })
                    })
                    .unwrap();
                assert!(claimed.len() <= workers.max(1));
                let mut all: Vec<usize> = claimed.into_iter().flatten().collect();
                all.sort_unstable();
                assert_eq!(
                    all,
                    (0..len).collect::<Vec<_>>(),
                    "{workers} workers, {len} rows"
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
                share(3 * MORSEL, 2, |rows| {
                    let mut n = 0;
                    while let Some(r) = rows.claim() {
                        n += r.len();
                    }
                    Ok(n)
                })
            })
            .unwrap();
        assert_eq!(ran, vec![3 * MORSEL]);
    }

    #[test]
    fn an_error_is_returned() {
        let e = share(10, 2, |_| -> Result<()> {
            Err(crate::error::WeirError::Config("boom".into()))
        });
        assert!(e.is_err());
    }
}
