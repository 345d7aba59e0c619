//! How a micro-batch is cut into tasks for the worker pool: input batches
//! are split into slices of at most [`ROWS_PER_TASK`] rows. The slicing is
//! fixed (not derived from the worker count), so a result never depends on
//! how many workers computed it. Work whose result cannot depend on the
//! split may share its slices among the free workers instead
//! ([`crate::ops::morsels`]).

use arrow::record_batch::RecordBatch;
use rayon::prelude::*;

use crate::error::Result;

/// Rows per task at most: larger input batches are split into the fewest
/// even slices of at most this many.
pub const ROWS_PER_TASK: usize = 64 * 1024;

/// `0..len` cut into the fewest even ranges of at most `max` (one empty
/// range when `len` is 0): 100k rows are two tasks of 50k, not 64k and 36k.
pub(crate) fn even_ranges(len: usize, max: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    let n = len.div_ceil(max.max(1)).max(1);
    let size = len.div_ceil(n).max(1);
    (0..n).map(move |i| {
        let at = (i * size).min(len);
        at..(at + size).min(len)
    })
}

/// The batches cut into tasks of at most [`ROWS_PER_TASK`] rows, in order
/// (zero-copy slices).
pub fn slices(batches: &[RecordBatch]) -> Vec<RecordBatch> {
    batches
        .iter()
        .flat_map(|b| even_ranges(b.num_rows(), ROWS_PER_TASK).map(|r| b.slice(r.start, r.len())))
        .collect()
}

/// Runs `f` on each task of `batches` ([`slices`]), on the worker pool it
/// is called in when there is more than one; the results keep the input's
/// order.
pub fn map_tasks<T: Send>(
    batches: &[RecordBatch],
    f: impl Fn(&RecordBatch) -> Result<T> + Sync + Send,
) -> Result<Vec<T>> {
    let tasks = slices(batches);
    if tasks.len() > 1 {
        tasks.par_iter().map(f).collect()
    } else {
        tasks.iter().map(f).collect()
    }
}
