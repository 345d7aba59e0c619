//! `min`, `max`: of the input's type; null when no value was seen. Floats
//! order as Spark's (NaN above every number).

use arrow::array::ArrayRef;
use arrow::datatypes::DataType as ArrowType;

use super::{get_opt_scalar, put_opt_scalar, scalars_array, Accumulator, Reader, Scalar};
use crate::error::Result;

/// The least (or greatest) value so far.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct MinMax {
    /// True for `max`.
    max: bool,
    value: Option<Scalar>,
}

impl MinMax {
    /// A `min`.
    pub(crate) fn min() -> MinMax {
        MinMax {
            max: false,
            value: None,
        }
    }

    /// A `max`.
    pub(crate) fn max() -> MinMax {
        MinMax {
            max: true,
            value: None,
        }
    }

    fn offer(&mut self, v: &Scalar) {
        let better = match &self.value {
            None => true,
            Some(c) if self.max => c.less(v),
            Some(c) => v.less(c),
        };
        if better {
            self.value = Some(v.clone())
        }
    }
}

impl Accumulator for MinMax {
    #[inline]
    fn update(&mut self, r: &Reader, i: usize) -> Result<()> {
        if let Some(v) = r.get(i) {
            self.offer(&v)
        }
        Ok(())
    }

    fn merge(&mut self, o: &MinMax) -> Result<()> {
        if let Some(v) = &o.value {
            self.offer(v)
        }
        Ok(())
    }

    fn encode(&self, out: &mut Vec<u8>) {
        put_opt_scalar(out, &self.value)
    }

    fn decode(&mut self, buf: &[u8], pos: &mut usize) -> Option<()> {
        self.value = get_opt_scalar(buf, pos)?;
        Some(())
    }

    fn evaluate(accs: &[&MinMax], t: &ArrowType) -> Result<ArrayRef> {
        scalars_array(accs.iter().map(|a| a.value.as_ref()), t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Float64Array;

    fn over(acc: MinMax, values: &[f64]) -> Option<Scalar> {
        let r = Reader::F(Float64Array::from(values.to_vec()));
        let mut acc = acc;
        for i in 0..values.len() {
            acc.update(&r, i).unwrap();
        }
        acc.value
    }

    #[test]
    fn a_nan_of_either_sign_is_above_every_number() {
        // `0.0 / 0.0` on x86 has its sign bit set; `-f64::NAN` too.
        let negative_nan = -f64::NAN;
        assert!(negative_nan.is_sign_negative());
        for nan in [f64::NAN, negative_nan] {
            let values = [1.0, nan, f64::INFINITY, -2.0];
            match over(MinMax::max(), &values) {
                Some(Scalar::Float(f)) => {
                    assert!(f.is_nan() && f.is_sign_positive(), "max {f}")
                }
                other => panic!("max {other:?}"),
            }
            assert_eq!(over(MinMax::min(), &values), Some(Scalar::Float(-2.0)));
        }
        // Merged either way round, the same NaN.
        let (mut a, mut b) = (MinMax::max(), MinMax::max());
        a.offer(&Scalar::float(negative_nan));
        b.offer(&Scalar::float(f64::NAN));
        let mut ab = a.clone();
        ab.merge(&b).unwrap();
        let mut ba = b.clone();
        ba.merge(&a).unwrap();
        let bits = |m: &MinMax| match m.value {
            Some(Scalar::Float(f)) => f.to_bits(),
            _ => 0,
        };
        assert_eq!(bits(&ab), bits(&ba));
        assert_eq!(bits(&ab), f64::NAN.to_bits());
    }
}
