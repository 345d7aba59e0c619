//! Time-window assignment: each row goes to every window `[start, start+size)`
//! that contains its timestamp; windows start at multiples of `slide` from
//! the epoch (Spark's `window(col, size, slide)`; tumbling when slide = size).
//! Vectorised over the Arrow column; no state.

use arrow::array::{Array, AsArray};
use arrow::datatypes::TimestampMicrosecondType;

use crate::error::Result;
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

    /// For each output row: the input row index and the window start (µs).
    /// Rows with a null time are left out, as Spark does.
    pub fn assign(&self, times: &[Option<i64>]) -> (Vec<u32>, Vec<i64>) {
        let n = ((self.size_us + self.slide_us - 1) / self.slide_us) as usize;
        let mut idx = Vec::with_capacity(times.len() * n);
        let mut starts = Vec::with_capacity(times.len() * n);
        for (r, t) in times.iter().enumerate() {
            let Some(t) = *t else { continue };
            let last_start = t - (t.rem_euclid(self.slide_us));
            // Oldest window first, so output is ordered by start.
            for k in (0..n as i64).rev() {
                let start = last_start - k * self.slide_us;
                if start <= t && t < start + self.size_us {
                    idx.push(r as u32);
                    starts.push(start);
                }
            }
        }
        (idx, starts)
    }
}

/// Number of columns in a window-typed array (for checks).
pub fn is_window_array(a: &dyn Array) -> bool {
    matches!(a.data_type(), arrow::datatypes::DataType::Struct(f) if f.len() == 2)
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
}
