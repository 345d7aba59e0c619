//! `count(*)`, `count(column)`: the rows, or the column's non-null values.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array};
use arrow::datatypes::DataType as ArrowType;

use super::{get_i64, Accumulator, Reader};
use crate::error::Result;

/// The count so far.
#[derive(Clone, Debug, PartialEq, Default)]
pub(crate) struct Count(i64);

impl Count {
    /// Counts `n` more rows.
    pub(super) fn add(&mut self, n: i64) {
        self.0 += n;
    }
}

impl Accumulator for Count {
    #[inline]
    fn update(&mut self, r: &Reader, i: usize) -> Result<()> {
        if r.is_valid(i) {
            self.0 += 1
        }
        Ok(())
    }

    fn merge(&mut self, o: &Count) -> Result<()> {
        self.0 += o.0;
        Ok(())
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0.to_le_bytes())
    }

    fn decode(&mut self, buf: &[u8], pos: &mut usize) -> Option<()> {
        self.0 = get_i64(buf, pos)?;
        Some(())
    }

    fn evaluate(accs: &[&Count], _: &ArrowType) -> Result<ArrayRef> {
        Ok(Arc::new(Int64Array::from_iter_values(
            accs.iter().map(|c| c.0),
        )))
    }
}
