//! `sum`: bigint over integers (wrapping on overflow, as Spark without ANSI
//! mode), double over doubles; null when no value was seen.

use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, Int64Array};
use arrow::datatypes::DataType as ArrowType;

use super::{get_opt_scalar, put_opt_scalar, Accumulator, Reader, Scalar};
use crate::error::Result;

/// The sum of integers so far.
#[derive(Clone, Debug, PartialEq, Default)]
pub(crate) struct SumInt(Option<i64>);

/// The sum of floats so far.
#[derive(Clone, Debug, PartialEq, Default)]
pub(crate) struct SumFloat(Option<f64>);

impl Accumulator for SumInt {
    #[inline]
    fn update(&mut self, r: &Reader, i: usize) -> Result<()> {
        if let Reader::I(a) = r {
            if arrow::array::Array::is_valid(a, i) {
                self.0 = Some(self.0.unwrap_or(0).wrapping_add(a.value(i)))
            }
        }
        Ok(())
    }

    fn merge(&mut self, o: &SumInt) -> Result<()> {
        if let Some(b) = o.0 {
            self.0 = Some(self.0.unwrap_or(0).wrapping_add(b))
        }
        Ok(())
    }

    fn encode(&self, out: &mut Vec<u8>) {
        put_opt_scalar(out, &self.0.map(Scalar::Int))
    }

    fn decode(&mut self, buf: &[u8], pos: &mut usize) -> Option<()> {
        self.0 = match get_opt_scalar(buf, pos)? {
            Some(Scalar::Int(i)) => Some(i),
            _ => None,
        };
        Some(())
    }

    fn evaluate(accs: &[&SumInt], _: &ArrowType) -> Result<ArrayRef> {
        Ok(Arc::new(Int64Array::from_iter(accs.iter().map(|s| s.0))))
    }
}

impl Accumulator for SumFloat {
    #[inline]
    fn update(&mut self, r: &Reader, i: usize) -> Result<()> {
        if let Reader::F(a) = r {
            if arrow::array::Array::is_valid(a, i) {
                self.0 = Some(self.0.unwrap_or(0.0) + a.value(i))
            }
        }
        Ok(())
    }

    fn merge(&mut self, o: &SumFloat) -> Result<()> {
        if let Some(b) = o.0 {
            self.0 = Some(self.0.unwrap_or(0.0) + b)
        }
        Ok(())
    }

    fn encode(&self, out: &mut Vec<u8>) {
        put_opt_scalar(out, &self.0.map(Scalar::Float))
    }

    fn decode(&mut self, buf: &[u8], pos: &mut usize) -> Option<()> {
        self.0 = match get_opt_scalar(buf, pos)? {
            Some(Scalar::Float(f)) => Some(f),
            _ => None,
        };
        Some(())
    }

    fn evaluate(accs: &[&SumFloat], _: &ArrowType) -> Result<ArrayRef> {
        Ok(Arc::new(Float64Array::from_iter(accs.iter().map(|s| s.0))))
    }
}
