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
