//! `avg`: a double; null when no value was seen.

use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array};
use arrow::datatypes::DataType as ArrowType;

use super::{get_f64, get_i64, Accumulator, Reader};
use crate::error::Result;

/// The sum and count of the values so far.
#[derive(Clone, Debug, PartialEq, Default)]
pub(crate) struct Avg {
    sum: f64,
    n: i64,
}

impl Accumulator for Avg {
    #[inline]
    fn update(&mut self, r: &Reader, i: usize) -> Result<()> {
        if let Some(v) = r.f64(i) {
            self.sum += v;
            self.n += 1
        }
        Ok(())
    }

    fn merge(&mut self, o: &Avg) -> Result<()> {
        self.sum += o.sum;
        self.n += o.n;
        Ok(())
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.sum.to_le_bytes());
        out.extend_from_slice(&self.n.to_le_bytes())
    }

    fn decode(&mut self, buf: &[u8], pos: &mut usize) -> Option<()> {
        self.sum = get_f64(buf, pos)?;
        self.n = get_i64(buf, pos)?;
        Some(())
    }

    fn evaluate(accs: &[&Avg], _: &ArrowType) -> Result<ArrayRef> {
        Ok(Arc::new(Float64Array::from_iter(
            accs.iter().map(|a| (a.n > 0).then(|| a.sum / a.n as f64)),
        )))
    }
}
