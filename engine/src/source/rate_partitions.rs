//! How the rate sources split a batch's values over `numPartitions`, as
//! Spark's readers do: partition `p` of `n` generates the values
//! `start + p`, `start + p + n`, ... below `end`, each partition its own
//! batch, generated as parallel tasks on the worker pool the read runs in.
//! The batches come in partition order (Spark's row order when its
//! partitions are collected in order); partitions with no values are left
//! out. A partition of more than [`ROWS_PER_TASK`] values is generated as
//! several batches of contiguous runs of its values (tasks of their own;
//! its rows in the same order), so one partition's batch is not generated
//! by one worker while the others wait.

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{Int64Array, TimestampMicrosecondArray};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use rayon::prelude::*;

use crate::error::Result;
use crate::ops::tasks::{even_ranges, ROWS_PER_TASK};

/// The rows of `values` in `partitions` strided partitions (at least one),
/// each value's `timestamp` (microseconds) given by `micros`.
pub(super) fn strided(
    schema: SchemaRef,
    values: Range<i64>,
    partitions: u32,
    micros: impl Fn(i64) -> i64 + Sync,
) -> Result<Vec<RecordBatch>> {
    let n = i64::from(partitions.max(1));
    let len = values.end.saturating_sub(values.start).max(0);
    // Partition `p` (below `len`) has the values `start + p + i * n` for `i`
    // in `0..count(p)`; partitions past the number of values are empty: not
    // even made.
    let count = |p: i64| (len - p - 1) / n + 1;
    let pieces: Vec<(i64, Range<usize>)> = (0..n.min(len))
        .flat_map(|p| even_ranges(count(p) as usize, ROWS_PER_TASK).map(move |r| (p, r)))
        .collect();
    let piece = |(p, r): &(i64, Range<usize>)| -> Result<RecordBatch> {
        let first = values.start + p + r.start as i64 * n;
        let v: Vec<i64> = (0..r.len() as i64).map(|i| first + i * n).collect();
        let ts: Vec<i64> = v.iter().map(|&x| micros(x)).collect();
        Ok(RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(TimestampMicrosecondArray::from(ts).with_timezone("UTC")),
                Arc::new(Int64Array::from(v)),
            ],
        )?)
    };
    if pieces.len() > 1 {
        pieces.par_iter().map(piece).collect()
    } else {
        pieces.iter().map(piece).collect()
    }
}

/// Each batch's `(timestamp µs, value)` columns, for the rate sources' tests.
#[cfg(test)]
pub(super) fn columns(batches: &[RecordBatch]) -> Vec<(Vec<i64>, Vec<i64>)> {
    use arrow::array::AsArray;
    use arrow::datatypes::{Int64Type, TimestampMicrosecondType};
    batches
        .iter()
        .map(|b| {
            let ts = b.column(0).as_primitive::<TimestampMicrosecondType>();
            let v = b.column(1).as_primitive::<Int64Type>();
            (ts.values().to_vec(), v.values().to_vec())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> SchemaRef {
        crate::row::arrow_schema(&super::super::rate::RateSource::fields())
    }

    fn values(batches: &[RecordBatch]) -> Vec<Vec<i64>> {
        columns(batches).into_iter().map(|(_, v)| v).collect()
    }

    #[test]
    fn partition_p_takes_every_nth_value_from_start_plus_p() {
        let b = strided(schema(), 10..17, 3, |v| v * 1000).unwrap();
        assert_eq!(
            values(&b),
            vec![vec![10, 13, 16], vec![11, 14], vec![12, 15]]
        );
        assert_eq!(columns(&b)[1].0, vec![11_000, 14_000]);
        // One partition: the values in order; more partitions than values:
        // the empty ones left out.
        assert_eq!(
            values(&strided(schema(), 0..3, 1, |_| 0).unwrap()),
            vec![vec![0, 1, 2]]
        );
        assert_eq!(
            values(&strided(schema(), 5..7, 4, |_| 0).unwrap()),
            vec![vec![5], vec![6]]
        );
        assert!(strided(schema(), 5..5, 2, |_| 0).unwrap().is_empty());
    }

    #[test]
    fn a_large_partition_comes_as_runs_of_its_values_in_order() {
        let rows = (2 * ROWS_PER_TASK + 3) as i64;
        for parts in [1u32, 2] {
            let b = strided(schema(), 7..7 + rows, parts, |v| v * 10).unwrap();
            assert!(b.iter().all(|b| b.num_rows() <= ROWS_PER_TASK));
            // Each partition's runs, joined, are its strided values.
            let mut joined: Vec<Vec<i64>> = vec![vec![]; parts as usize];
            let mut p = 0;
            for (ts, v) in columns(&b) {
                if joined[p]
                    .last()
                    .is_some_and(|&l| v[0] != l + i64::from(parts))
                {
                    p += 1;
                }
                assert_eq!(ts, v.iter().map(|x| x * 10).collect::<Vec<_>>());
                joined[p].extend(v);
            }
            let want: Vec<Vec<i64>> = (0..i64::from(parts))
                .map(|p| (7 + p..7 + rows).step_by(parts as usize).collect())
                .collect();
            assert_eq!(joined, want, "{parts} partitions");
        }
    }
}
