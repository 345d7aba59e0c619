//! `stddev_samp` (`stddev`, `std`), `stddev_pop`, `var_samp` (`variance`),
//! `var_pop`: doubles from the count, mean and sum of squared deviations of
//! the non-null values (Welford's update, Chan's merge, as Spark's
//! `CentralMomentAgg`). Spark's results: null for no value; for one value
//! the sample forms are null (Spark 3's default,
//! `spark.sql.legacy.statisticalAggregate=false`) and the population forms
//! 0.0; a NaN input makes the result NaN.

use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array};
use arrow::datatypes::DataType as ArrowType;
use weir_plan::AggFn;

use super::{get_f64, Accumulator, Reader};
use crate::error::Result;

/// The moments so far, and which statistic the function returns.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Moments {
    /// True for the sample forms (divide by n - 1).
    sample: bool,
    /// True for the standard deviations (the square root).
    sqrt: bool,
    n: f64,
    mean: f64,
    m2: f64,
}

impl Moments {
    /// The accumulator of one of the four functions.
    pub(crate) fn new(func: AggFn) -> Moments {
        Moments {
            sample: matches!(func, AggFn::StddevSamp | AggFn::VarSamp),
            sqrt: matches!(func, AggFn::StddevSamp | AggFn::StddevPop),
            n: 0.0,
            mean: 0.0,
            m2: 0.0,
        }
    }

    fn result(&self) -> Option<f64> {
        let d = if self.sample { self.n - 1.0 } else { self.n };
        if self.n == 0.0 || d == 0.0 {
            return None;
        }
        let var = self.m2 / d;
        Some(if self.sqrt { var.sqrt() } else { var })
    }
}

impl Accumulator for Moments {
    #[inline]
    fn update(&mut self, r: &Reader, i: usize) -> Result<()> {
        if let Some(v) = r.f64(i) {
            self.n += 1.0;
            let delta = v - self.mean;
            let delta_n = delta / self.n;
            self.mean += delta_n;
            self.m2 += delta * (delta - delta_n);
        }
        Ok(())
    }

    fn merge(&mut self, o: &Moments) -> Result<()> {
        let n = self.n + o.n;
        if n == 0.0 {
            return Ok(());
        }
        let delta = o.mean - self.mean;
        let delta_n = delta / n;
        self.mean += delta_n * o.n;
        self.m2 += o.m2 + delta * delta_n * self.n * o.n;
        self.n = n;
        Ok(())
    }

    fn encode(&self, out: &mut Vec<u8>) {
        for v in [self.n, self.mean, self.m2] {
            out.extend_from_slice(&v.to_le_bytes())
        }
    }

    fn decode(&mut self, buf: &[u8], pos: &mut usize) -> Option<()> {
        self.n = get_f64(buf, pos)?;
        self.mean = get_f64(buf, pos)?;
        self.m2 = get_f64(buf, pos)?;
        Some(())
    }

    fn evaluate(accs: &[&Moments], _: &ArrowType) -> Result<ArrayRef> {
        Ok(Arc::new(Float64Array::from_iter(
            accs.iter().map(|a| a.result()),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::run;
    use arrow::array::{Array, ArrayRef, AsArray, Float64Array, Int32Array};
    use arrow::datatypes::Float64Type;
    use std::sync::Arc;
    use weir_plan::AggFn;

    fn result(func: AggFn, v: ArrayRef, parts: usize) -> Option<f64> {
        let a = run(func, v, parts);
        let a = a.as_primitive::<Float64Type>();
        a.is_valid(0).then(|| a.value(0))
    }

    #[test]
    fn spark_results_for_none_one_and_many_values() {
        let none: ArrayRef = Arc::new(Int32Array::from(vec![None, None]));
        let one: ArrayRef = Arc::new(Int32Array::from(vec![None, Some(4)]));
        let many: ArrayRef = Arc::new(Int32Array::from(vec![2, 4, 4, 4, 5, 5, 7, 9]));
        for f in [
            AggFn::StddevSamp,
            AggFn::StddevPop,
            AggFn::VarSamp,
            AggFn::VarPop,
        ] {
            assert_eq!(result(f, none.clone(), 1), None, "{f:?}");
        }
        assert_eq!(result(AggFn::StddevSamp, one.clone(), 1), None);
        assert_eq!(result(AggFn::VarSamp, one.clone(), 1), None);
        assert_eq!(result(AggFn::StddevPop, one.clone(), 1), Some(0.0));
        assert_eq!(result(AggFn::VarPop, one, 1), Some(0.0));
        for parts in [1, 3, 8] {
            let close = |f, want: f64| {
                let got = result(f, many.clone(), parts).unwrap();
                assert!((got - want).abs() < 1e-12, "{f:?} {got} != {want}");
            };
            close(AggFn::VarPop, 4.0);
            close(AggFn::StddevPop, 2.0);
            close(AggFn::VarSamp, 32.0 / 7.0);
            close(AggFn::StddevSamp, (32.0f64 / 7.0).sqrt());
        }
        let nan: ArrayRef = Arc::new(Float64Array::from(vec![1.0, f64::NAN, 3.0]));
        assert!(result(AggFn::VarSamp, nan, 2).unwrap().is_nan());
    }
}
