//! `with_watermark(col, delay)`: passes rows through and records the batch's
//! event-time statistics (min, max, avg) of `col`. After the batch the query
//! advances this operator's watermark to `max - delay`. No state of its own:
//! the watermark is carried in the offsets and commit logs.

use arrow::array::AsArray;
use arrow::datatypes::TimestampMicrosecondType;
use arrow::record_batch::RecordBatch;

use crate::error::{Result, WeirError};

/// Event-time statistics of one batch, in milliseconds (Spark's precision).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EventTimeStats {
    /// Earliest event time.
    pub min: i64,
    /// Latest event time.
    pub max: i64,
    /// Sum of event times (for the average).
    pub sum: f64,
    /// Rows counted.
    pub count: u64,
}

impl EventTimeStats {
    /// Folds another batch's statistics in.
    pub fn merge(&mut self, o: &EventTimeStats) {
        if o.count == 0 {
            return;
        }
        if self.count == 0 {
            *self = *o;
            return;
        }
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
        self.sum += o.sum;
        self.count += o.count;
    }

    /// The average event time (ms).
    pub fn avg(&self) -> i64 {
        if self.count == 0 {
            0
        } else {
            (self.sum / self.count as f64) as i64
        }
    }
}

/// The watermark operator.
pub struct WatermarkOp {
    /// Index among the query's watermark operators.
    pub id: usize,
    column: usize,
    /// The delay threshold in ms.
    pub delay_ms: i64,
}

impl WatermarkOp {
    /// A watermark on column index `column`.
    pub fn new(id: usize, column: usize, delay_ms: i64) -> WatermarkOp {
        WatermarkOp {
            id,
            column,
            delay_ms,
        }
    }

    /// Records the statistics of `batch` into `stats`.
    pub fn observe(&self, batch: &RecordBatch, stats: &mut EventTimeStats) -> Result<()> {
        let col = batch.column(self.column);
        let ts = arrow::compute::cast(col, &crate::row::timestamp_type())
            .map_err(|e| WeirError::Config(format!("watermark column is not a timestamp: {e}")))?;
        // One pass without branches per row: the sum is exact (in i128)
        // and rounded once, rather than rounded row by row in f64.
        let a = ts.as_primitive::<TimestampMicrosecondType>();
        let (mut min, mut max, mut sum) = (i64::MAX, i64::MIN, 0i128);
        let mut fold = |v: i64| {
            let ms = v.div_euclid(1000);
            min = min.min(ms);
            max = max.max(ms);
            sum += ms as i128;
        };
        let count = if arrow::array::Array::null_count(a) == 0 {
            a.values().iter().for_each(|&v| fold(v));
            a.len()
        } else {
            a.iter().flatten().map(&mut fold).count()
        };
        let s = if count == 0 {
            EventTimeStats::default()
        } else {
            EventTimeStats {
                min,
                max,
                sum: sum as f64,
                count: count as u64,
            }
        };
        stats.merge(&s);
        Ok(())
    }
}

/// The rows of `batch` whose event time (column `column`, mapped by
/// `horizon` to the last instant they still count for, e.g. their window's
/// end) is at or before `late_ms`: the rows a stateful operator drops as late.
pub fn late_rows(
    batch: &RecordBatch,
    column: usize,
    late_ms: i64,
    horizon: impl Fn(i64) -> i64,
) -> Result<Option<RecordBatch>> {
    let ts = arrow::compute::cast(batch.column(column), &crate::row::timestamp_type())?;
    let bound = late_ms.saturating_mul(1000);
    let mask: arrow::array::BooleanArray = ts
        .as_primitive::<TimestampMicrosecondType>()
        .iter()
        .map(|t| Some(t.is_some_and(|t| horizon(t) <= bound)))
        .collect();
    if mask.true_count() == 0 {
        return Ok(None);
    }
    Ok(Some(arrow::compute::filter_record_batch(batch, &mask)?))
}
