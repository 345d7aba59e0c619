//! Time-window assignment: each row goes to every window `[start, start+size)`
//! that contains its timestamp; windows start at multiples of `slide` from
//! the epoch (Spark's `window(col, size, slide)`; tumbling when slide = size).
//! Vectorised over the Arrow column; no state.
//!
//! Timestamps are `i64` microseconds, so a window near the ends of that
//! range (about ±292,000 years from 1970) may start before `i64::MIN` or end
//! after `i64::MAX`. Such a window cannot be represented: it is left out
//! (the row still goes to every window that can be), counted by
//! [`Assignment::rows_losing_windows`], and never overflows. The arithmetic
//! is done in `i128`.

use arrow::array::AsArray;
use arrow::datatypes::TimestampMicrosecondType;

use crate::error::{Result, WeirError};
use crate::row::Window;

/// Where a window's timestamp comes from.
#[derive(Debug, Clone, Copy)]
pub enum TimeSource {
    /// A timestamp column.
    Column(usize),
    /// `window_time(w)` of a window column: its end minus one microsecond.
    WindowTime(usize),
}

/// Assigns rows to windows.
#[derive(Debug, Clone)]
pub struct WindowAssigner {
    /// The timestamp source.
    pub source: TimeSource,
    /// Window length (µs).
    pub size_us: i64,
    /// Slide (µs).
    pub slide_us: i64,
}

impl WindowAssigner {
    /// The microsecond timestamps of the time source (nulls as None).
    pub fn times(&self, batch: &arrow::record_batch::RecordBatch) -> Result<Vec<Option<i64>>> {
        Ok(match self.source {
            TimeSource::Column(i) => {
                let a = arrow::compute::cast(batch.column(i), &crate::row::timestamp_type())?;
                a.as_primitive::<TimestampMicrosecondType>()
                    .iter()
                    .collect()
            }
            TimeSource::WindowTime(i) => {
                let w = <Option<Window> as crate::row::ArrowValue>::from_array(
                    batch.column(i).as_ref(),
                )?;
                w.into_iter().map(|w| w.map(|w| w.end.0 - 1)).collect()
            }
        })
    }

    /// The microsecond timestamps of the time source as one Arrow array
    /// (no copy when the column already is a UTC microsecond timestamp).
    pub fn time_array(
        &self,
        batch: &arrow::record_batch::RecordBatch,
    ) -> Result<arrow::array::TimestampMicrosecondArray> {
        Ok(match self.source {
            TimeSource::Column(i) => {
                let a = arrow::compute::cast(batch.column(i), &crate::row::timestamp_type())?;
                a.as_primitive::<TimestampMicrosecondType>().clone()
            }
            TimeSource::WindowTime(_) => self.times(batch)?.into(),
        })
    }

    /// An assigner for windows of `size_ms` sliding by `slide_ms`
    /// milliseconds (the plan's unit): an error when either is not positive
    /// or does not fit in `i64` microseconds (about 292,000 years).
    pub fn from_ms(source: TimeSource, size_ms: i64, slide_ms: i64) -> Result<WindowAssigner> {
        let us = |what: &str, ms: i64| {
            ms.checked_mul(1000).filter(|v| *v > 0).ok_or_else(|| {
                WeirError::Config(format!(
                    "the window {what} ({ms} ms) must be positive and at most {} ms (about 292,000 years)",
                    i64::MAX / 1000
                ))
            })
        };
        Ok(WindowAssigner {
            source,
            size_us: us("size", size_ms)?,
            slide_us: us("slide", slide_ms)?,
        })
    }

    /// The most windows a timestamp can fall in: `ceil(size / slide)`
    /// (one when tumbling), without overflow.
    pub fn max_windows_per_row(&self) -> i64 {
        let (size, slide) = (self.size_us.max(1), self.slide_us.max(1));
        size / slide + i64::from(size % slide != 0)
    }

    /// The windows containing `t` (starts at multiples of the slide in
    /// `(t - size, t]`), in i128: (first start, last start), before
    /// leaving out the windows that cannot be represented.
    fn candidates(&self, t: i64) -> (i128, i128) {
        let (t, size, slide) = (
            i128::from(t),
            i128::from(self.size_us.max(1)),
            i128::from(self.slide_us.max(1)),
        );
        let last = t - t.rem_euclid(slide);
        let after = t - size;
        let first = after - after.rem_euclid(slide) + slide;
        (first, last)
    }

    /// The starts of the windows that contain `t` and can be represented
    /// (start at least `i64::MIN`, end `start + size` at most `i64::MAX`),
    /// oldest first. Never overflows.
    pub fn starts(&self, t: i64) -> WindowStarts {
        let (first, last) = self.candidates(t);
        let slide = i128::from(self.slide_us.max(1));
        let size = i128::from(self.size_us.max(1));
        let min = i128::from(i64::MIN);
        // The first multiple of the slide at or after i64::MIN, the last
        // start whose end fits.
        let lo = min - min.rem_euclid(slide) + if min.rem_euclid(slide) == 0 { 0 } else { slide };
        let top = i128::from(i64::MAX) - size;
        let hi = top - top.rem_euclid(slide);
        WindowStarts {
            next: first.max(lo),
            last: last.min(hi),
            slide,
        }
    }

    /// Whether a window containing `t` cannot be represented (and is left
    /// out by [`WindowAssigner::starts`]).
    pub fn loses_windows(&self, t: i64) -> bool {
        let (first, last) = self.candidates(t);
        first < i128::from(i64::MIN)
            || last + i128::from(self.size_us.max(1)) > i128::from(i64::MAX)
    }

    /// The end of the newest window containing `t` (`i64::MAX` when it
    /// cannot be represented): the row is late once the watermark reaches it.
    pub fn last_window_end(&self, t: i64) -> i64 {
        let (_, last) = self.candidates(t);
        i64::try_from(last + i128::from(self.size_us.max(1))).unwrap_or(i64::MAX)
    }

    /// For each output row: the input row index and the window start (µs).
    /// Rows with a null time are left out, as Spark does; windows that
    /// cannot be represented are left out (see [`WindowAssigner::assign_counted`]).
    pub fn assign(&self, times: &[Option<i64>]) -> (Vec<u32>, Vec<i64>) {
        let a = self.assign_counted(times);
        (a.rows, a.starts)
    }

    /// [`WindowAssigner::assign`], with the number of rows that lost a
    /// window that cannot be represented.
    pub fn assign_counted(&self, times: &[Option<i64>]) -> Assignment {
        let n = usize::try_from(self.max_windows_per_row())
            .unwrap_or(1)
            .min(64);
        let mut out = Assignment {
            rows: Vec::with_capacity(times.len().saturating_mul(n)),
            starts: Vec::with_capacity(times.len().saturating_mul(n)),
            rows_losing_windows: 0,
        };
        for (r, t) in times.iter().enumerate() {
            let Some(t) = *t else { continue };
            if self.loses_windows(t) {
                out.rows_losing_windows += 1;
            }
            // Oldest window first, so output is ordered by start.
            for start in self.starts(t) {
                out.rows.push(r as u32);
                out.starts.push(start);
            }
        }
        out
    }
}

/// The result of [`WindowAssigner::assign_counted`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Assignment {
    /// For each output row, the input row index.
    pub rows: Vec<u32>,
    /// For each output row, the window start (µs).
    pub starts: Vec<i64>,
    /// Input rows with a window that cannot be represented (its start before
    /// `i64::MIN` or its end after `i64::MAX` microseconds), left out.
    pub rows_losing_windows: usize,
}

/// The starts of the windows containing a timestamp, oldest first
/// (see [`WindowAssigner::starts`]).
#[derive(Debug, Clone)]
pub struct WindowStarts {
    next: i128,
    last: i128,
    slide: i128,
}

impl Iterator for WindowStarts {
    type Item = i64;

    fn next(&mut self) -> Option<i64> {
        if self.next > self.last {
            return None;
        }
        let s = i64::try_from(self.next).ok()?;
        self.next += self.slide;
        Some(s)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = if self.next > self.last {
            0
        } else {
            usize::try_from((self.last - self.next) / self.slide + 1).unwrap_or(usize::MAX)
        };
        (n, Some(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000_000;

    #[test]
    fn tumbling_windows_include_their_start() {
        let w = WindowAssigner {
            source: TimeSource::Column(0),
            size_us: 10 * MIN,
            slide_us: 10 * MIN,
        };
        let (idx, starts) = w.assign(&[Some(10 * MIN), Some(19 * MIN), None, Some(-1)]);
        assert_eq!(idx, vec![0, 1, 3]);
        assert_eq!(starts, vec![10 * MIN, 10 * MIN, -10 * MIN]);
    }

    #[test]
    fn sliding_windows_cover_every_overlap() {
        let w = WindowAssigner {
            source: TimeSource::Column(0),
            size_us: 30 * MIN,
            slide_us: 5 * MIN,
        };
        let (idx, starts) = w.assign(&[Some(12 * MIN)]);
        assert_eq!(idx.len(), 6);
        assert_eq!(starts.first(), Some(&(-15 * MIN)));
        assert_eq!(starts.last(), Some(&(10 * MIN)));
        let (_, starts) = w.assign(&[Some(10 * MIN)]);
        assert_eq!(
            starts,
            vec![-15 * MIN, -10 * MIN, -5 * MIN, 0, 5 * MIN, 10 * MIN]
        );
    }

    #[test]
    fn windows_near_the_ends_of_time_are_left_out_never_overflow() {
        let w = WindowAssigner {
            source: TimeSource::Column(0),
            size_us: 10,
            slide_us: 10,
        };
        let a = w.assign_counted(&[Some(i64::MIN), Some(i64::MAX), Some(0), Some(i64::MIN + 8)]);
        // i64::MIN's window starts at -9223372036854775810; i64::MAX's ends
        // at 9223372036854775810: neither is a timestamp.
        assert_eq!(a.rows, vec![2, 3]);
        assert_eq!(a.starts, vec![0, i64::MIN + 8]);
        assert_eq!(a.rows_losing_windows, 2);
        assert_eq!(w.last_window_end(i64::MAX), i64::MAX);
        // A size near the limit: one representable window at most.
        let huge = WindowAssigner {
            source: TimeSource::Column(0),
            size_us: i64::MAX,
            slide_us: i64::MAX / 2,
        };
        assert_eq!(huge.max_windows_per_row(), 3);
        for t in [i64::MIN, -1, 0, 1, i64::MAX] {
            for s in huge.starts(t) {
                assert!(i128::from(s) <= i128::from(t));
                assert!(i128::from(t) < i128::from(s) + i128::from(i64::MAX));
            }
        }
        let slide = i64::MAX / 2;
        assert_eq!(
            huge.starts(0).collect::<Vec<_>>(),
            vec![-2 * slide, -slide, 0]
        );
        assert!(!huge.loses_windows(0));
        assert_eq!(huge.starts(i64::MAX).count(), 0);
        assert!(huge.loses_windows(i64::MAX));
    }

    #[test]
    fn sizes_in_milliseconds_that_overflow_are_an_error() {
        assert!(WindowAssigner::from_ms(TimeSource::Column(0), i64::MAX / 10, 1000).is_err());
        assert!(WindowAssigner::from_ms(TimeSource::Column(0), 1000, 0).is_err());
        let w = WindowAssigner::from_ms(TimeSource::Column(0), 10_000, 5_000).unwrap();
        assert_eq!((w.size_us, w.slide_us), (10_000_000, 5_000_000));
        assert_eq!(w.max_windows_per_row(), 2);
    }
}
