//! How the rate sources split a batch's values over `numPartitions`, as
//! Spark's readers do: partition `p` of `n` generates the values
//! `start + p`, `start + p + n`, ... below `end`, each partition its own
//! batch, generated as parallel tasks on the worker pool the read runs in.
//! The batches come in partition order (Spark's row order when its
//! partitions are collected in order); partitions with no values are left
//! out.

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{Int64Array, TimestampMicrosecondArray};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use rayon::prelude::*;

use crate::error::Result;

/// The rows of `values` in `partitions` strided partitions (at least one),
/// each value's `timestamp` (microseconds) given by `micros`.
pub(super) fn strided(
    schema: SchemaRef,
    values: Range<i64>,
    partitions: u32,
    micros: impl Fn(i64) -> i64 + Sync,
) -> Result<Vec<RecordBatch>> {
    let n = i64::from(partitions.max(1));
    let part = |p: i64| -> Result<Option<RecordBatch>> {
        let first = values.start.saturating_add(p);
        if first >= values.end {
            return Ok(None);
        }
        let v: Vec<i64> = (first..values.end).step_by(n as usize).collect();
        let ts: Vec<i64> = v.iter().map(|&x| micros(x)).collect();
        Ok(Some(RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(TimestampMicrosecondArray::from(ts).with_timezone("UTC")),
                Arc::new(Int64Array::from(v)),
            ],
        )?))
    };
    // Partitions past the number of values are empty: not even made.
    let len = values.end.saturating_sub(values.start).max(0);
    let parts: Vec<Option<RecordBatch>> = if n > 1 {
        (0..n.min(len))
            .into_par_iter()
            .map(part)
            .collect::<Result<_>>()?
    } else {
        vec![part(0)?]
    };
    Ok(parts.into_iter().flatten().collect())
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
}
