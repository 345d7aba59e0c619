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
#[derive(Clone)]
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

    /// The event-time sums of one slice of the batch (a task's): added
    /// over the batch's slices ([`EventTimeSums::merged`]) and rounded once
    /// ([`EventTimeSums::stats`]), so the statistics are the same however
    /// the batch was cut and whatever the worker count.
    pub fn observe(&self, slice: &RecordBatch) -> Result<EventTimeSums> {
        let ts = arrow::compute::cast(slice.column(self.column), &crate::row::timestamp_type())
            .map_err(|e| WeirError::Config(format!("watermark column is not a timestamp: {e}")))?;
        Ok(EventTimeSums::of(
            ts.as_primitive::<TimestampMicrosecondType>(),
        ))
    }
}

/// An event time in ms as Spark's watermark reads it (`EventTimeWatermarkExec`:
/// the µs value `/ 1000`, a `Long` division): truncated toward zero, so a
/// time before 1970 that is not a whole millisecond reads 1 ms later than
/// rounding down would (-1500 µs is -1 ms). The watermark and the
/// progress report's `eventTime` figures come from these.
#[inline(always)]
fn to_ms(us: i64) -> i64 {
    us / 1000
}

/// How many event times (in ms, each at most 9_223_372_036_854_776 from 0) an `i64`
/// sums without overflow: 512 × 9.3e15 < 9.2e18.
const SUM_RUN: usize = 512;

/// Event-time statistics of some rows, the sum exact (in i128).
#[derive(Debug, Clone, Copy)]
pub struct EventTimeSums {
    /// Earliest event time, µs.
    min_us: i64,
    /// Latest event time, µs.
    max_us: i64,
    /// The sum of the event times in ms (each truncated toward zero, see
    /// [`to_ms`]).
    sum_ms: i128,
    /// Rows counted.
    count: u64,
}

impl Default for EventTimeSums {
    fn default() -> EventTimeSums {
        EventTimeSums {
            min_us: i64::MAX,
            max_us: i64::MIN,
            sum_ms: 0,
            count: 0,
        }
    }
}

impl EventTimeSums {
    /// One pass over `a`'s valid values, without branches per row. The
    /// sum is kept in `i64` over runs of [`SUM_RUN`] values (which cannot
    /// overflow it) and in `i128` across them.
    fn of(a: &arrow::array::TimestampMicrosecondArray) -> EventTimeSums {
        #[inline(always)]
        fn fold(e: &mut EventTimeSums, sum: &mut i64, v: i64) {
            e.min_us = e.min_us.min(v);
            e.max_us = e.max_us.max(v);
            *sum += to_ms(v);
        }
        let mut e = EventTimeSums::default();
        let mut sum = 0i64;
        if arrow::array::Array::null_count(a) == 0 {
            for run in a.values().chunks(SUM_RUN) {
                run.iter().for_each(|&v| fold(&mut e, &mut sum, v));
                e.sum_ms += std::mem::take(&mut sum) as i128;
            }
        } else {
            for (i, v) in a.iter().flatten().enumerate() {
                fold(&mut e, &mut sum, v);
                if i % SUM_RUN == SUM_RUN - 1 {
                    e.sum_ms += std::mem::take(&mut sum) as i128;
                }
            }
        }
        e.sum_ms += sum as i128;
        e.count = (a.len() - arrow::array::Array::null_count(a)) as u64;
        e
    }

    /// These and `o`'s, together.
    pub fn merged(self, o: EventTimeSums) -> EventTimeSums {
        EventTimeSums {
            min_us: self.min_us.min(o.min_us),
            max_us: self.max_us.max(o.max_us),
            sum_ms: self.sum_ms + o.sum_ms,
            count: self.count + o.count,
        }
    }

    /// In milliseconds (each truncated toward zero, as Spark's watermark
    /// reads event times), the sum rounded once.
    pub fn stats(self) -> EventTimeStats {
        if self.count == 0 {
            return EventTimeStats::default();
        }
        EventTimeStats {
            // (Truncation keeps order: the least row's is the least.)
            min: to_ms(self.min_us),
            max: to_ms(self.max_us),
            sum: self.sum_ms as f64,
            count: self.count,
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::narrow::Narrow;
    use crate::ops::{BatchContext, OpExec};
    use arrow::array::TimestampMicrosecondArray;
    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use std::sync::Arc;

    /// A one-column batch of UTC microsecond times.
    fn batch_of(times: TimestampMicrosecondArray) -> RecordBatch {
        let schema = Schema::new(vec![Field::new(
            "t",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        )]);
        let a = Arc::new(times.with_timezone("UTC"));
        RecordBatch::try_new(Arc::new(schema), vec![a]).unwrap()
    }

    /// What a watermark on column 0 records for `batch`, read as the
    /// pipeline reads it (one task per slice on the pool this runs in).
    fn observed(batch: &RecordBatch) -> EventTimeStats {
        let ops = [OpExec::Watermark(WatermarkOp::new(0, 0, 0))];
        let narrow = Narrow::of(&ops);
        let mut ctx = BatchContext {
            event_time: vec![EventTimeStats::default()],
            ..BatchContext::default()
        };
        narrow.run(vec![batch.clone()], &mut ctx).unwrap();
        ctx.event_time[0]
    }

    #[test]
    fn a_batch_read_as_tasks_has_the_statistics_of_one_pass() {
        // 200k rows (four tasks), nulls, times before 1970 and after, not
        // multiples of a millisecond: the statistics of a plain pass.
        let mut x: u64 = 7;
        let times: Vec<Option<i64>> = (0..200_000)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (i % 97 != 0).then(|| (x % 4_000_000_000_000_000) as i64 - 2_000_000_000_000_000)
            })
            .collect();
        let batch = batch_of(TimestampMicrosecondArray::from(times.clone()));
        let got = observed(&batch);
        let ms: Vec<i64> = times.iter().flatten().map(|t| t / 1000).collect();
        let sum: i128 = ms.iter().map(|&m| m as i128).sum();
        assert_eq!(
            got,
            EventTimeStats {
                min: *ms.iter().min().unwrap(),
                max: *ms.iter().max().unwrap(),
                sum: sum as f64,
                count: ms.len() as u64,
            }
        );
        // And on a pool of one worker, the same.
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        assert_eq!(one.install(|| observed(&batch)), got);
    }

    #[test]
    fn the_partial_sums_of_tasks_are_rounded_once_not_per_task() {
        // Four tasks of 50k rows: the first holds 2^53 ms and 1 ms, the
        // next two 1 ms each, the rest 0. The exact sum, 2^53 + 3, rounds
        // to 2^53 + 4; rounding each task's sum first gives 2^53.
        let big = (1i64 << 53) * 1000;
        let mut times = vec![0i64; 200_000];
        times[0] = big;
        times[1] = 1000;
        times[50_000] = 1000;
        times[100_000] = 1000;
        let batch = batch_of(TimestampMicrosecondArray::from(times));
        let exact = ((1i128 << 53) + 3) as f64;
        assert_eq!(exact, ((1u64 << 53) + 4) as f64);
        for workers in [1, 2, 4] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(workers)
                .build()
                .unwrap();
            let got = pool.install(|| observed(&batch));
            assert_eq!(got.sum, exact, "{workers} workers");
            assert_eq!((got.min, got.max, got.count), (0, 1i64 << 53, 200_000));
        }
    }

    #[test]
    fn times_before_1970_are_truncated_to_ms_as_sparks_long_division() {
        // Spark reads each event time as `micros / 1000` (a Long division):
        // -1500 µs is -1 ms, -999 µs is 0, 1500 µs is 1, -2000001 µs is
        // -2000; rounding down would give -2, -1, 1 and -2001.
        let batch = batch_of(TimestampMicrosecondArray::from(vec![
            -1500, -999, 1500, -2_000_001,
        ]));
        let got = observed(&batch);
        assert_eq!(
            got,
            EventTimeStats {
                min: -2000,
                max: 1,
                // -1 + 0 + 1 - 2000
                sum: -2000.0,
                count: 4,
            }
        );
        // A batch whose latest time is -1500 µs: its max, from which the
        // watermark is computed, is -1 ms (rounding down gave -2).
        let before = batch_of(TimestampMicrosecondArray::from(vec![-1500]));
        assert_eq!((observed(&before).min, observed(&before).max), (-1, -1));
    }

    #[test]
    fn sums_at_the_ends_of_time_do_not_overflow() {
        // Runs of the earliest and the latest representable times, and one
        // run mixed: each millisecond sum is exact (an i64 running sum
        // over more than ~1000 of them would overflow).
        let mut times = vec![i64::MIN; 5_000];
        times.extend(vec![i64::MAX; 5_000]);
        times.extend((0..5_000).map(|i| if i % 3 == 0 { i64::MIN } else { i64::MAX }));
        for slice in [&times[..5_000], &times[5_000..10_000], &times[..]] {
            // Without nulls, and with every seventh time null.
            for nulls in [false, true] {
                let values: Vec<Option<i64>> = slice
                    .iter()
                    .enumerate()
                    .map(|(i, &t)| (!nulls || i % 7 != 3).then_some(t))
                    .collect();
                let batch = batch_of(TimestampMicrosecondArray::from(values.clone()));
                let got = observed(&batch);
                let valid: Vec<i64> = values.into_iter().flatten().collect();
                let sum: i128 = valid.iter().map(|&t| (t / 1000) as i128).sum();
                assert_eq!(got.sum, sum as f64, "nulls: {nulls}");
                assert_eq!(got.count, valid.len() as u64);
            }
        }
    }
}
