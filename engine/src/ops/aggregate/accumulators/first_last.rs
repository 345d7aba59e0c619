//! `first(col[, ignoreNulls])`, `last(col[, ignoreNulls])`: of the input's
//! type. Spark calls them non-deterministic (the order of rows in a batch
//! job is not fixed); on a stream weir defines it: the first (last) row in
//! arrival order — the source's order within a batch, then batch by batch.
//! With `ignoreNulls` false (Spark's default) a null row counts: `first` of
//! a group whose first row is null is null. In a session window, sessions
//! that merge keep the earlier session's `first` and the later one's `last`.

use arrow::array::ArrayRef;
use arrow::datatypes::DataType as ArrowType;

use super::{get_opt_scalar, get_u8, put_opt_scalar, scalars_array, Accumulator, Reader, Scalar};
use crate::error::Result;

/// The first (or last) value seen, and whether one was.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct FirstLast {
    /// True for `last`.
    last: bool,
    ignore_nulls: bool,
    /// True once a value (or a counted null) was taken.
    set: bool,
    value: Option<Scalar>,
}

impl FirstLast {
    /// A `first`.
    pub(crate) fn first(ignore_nulls: bool) -> FirstLast {
        FirstLast {
            last: false,
            ignore_nulls,
            set: false,
            value: None,
        }
    }

    /// A `last`.
    pub(crate) fn last(ignore_nulls: bool) -> FirstLast {
        FirstLast {
            last: true,
            ..FirstLast::first(ignore_nulls)
        }
    }
}

impl Accumulator for FirstLast {
    #[inline]
    fn update(&mut self, r: &Reader, i: usize) -> Result<()> {
        if (self.set && !self.last) || (self.ignore_nulls && !r.is_valid(i)) {
            return Ok(());
        }
        self.value = r.get(i);
        self.set = true;
        Ok(())
    }

    fn merge(&mut self, o: &FirstLast) -> Result<()> {
        if o.set && (self.last || !self.set) {
            self.value = o.value.clone();
            self.set = true;
        }
        Ok(())
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.set as u8);
        put_opt_scalar(out, &self.value)
    }

    fn decode(&mut self, buf: &[u8], pos: &mut usize) -> Option<()> {
        self.set = match get_u8(buf, pos)? {
            0 => false,
            1 => true,
            _ => return None,
        };
        self.value = get_opt_scalar(buf, pos)?;
        Some(())
    }

    fn evaluate(accs: &[&FirstLast], t: &ArrowType) -> Result<ArrayRef> {
        scalars_array(accs.iter().map(|a| a.value.as_ref()), t)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::run;
    use arrow::array::{Array, ArrayRef, AsArray, StringArray};
    use std::sync::Arc;
    use weir_plan::AggFn;

    fn strings(v: Vec<Option<&str>>) -> ArrayRef {
        Arc::new(StringArray::from(v))
    }

    fn one(a: ArrayRef) -> Option<String> {
        let s = a.as_string::<i32>();
        s.is_valid(0).then(|| s.value(0).to_string())
    }

    #[test]
    fn first_and_last_follow_arrival_order_and_count_nulls_unless_told() {
        let v = strings(vec![None, Some("a"), Some("b"), None]);
        for parts in [1, 2, 4] {
            let f = |ignore_nulls| AggFn::First { ignore_nulls };
            let l = |ignore_nulls| AggFn::Last { ignore_nulls };
            assert_eq!(one(run(f(false), v.clone(), parts)), None);
            assert_eq!(one(run(f(true), v.clone(), parts)), Some("a".into()));
            assert_eq!(one(run(l(false), v.clone(), parts)), None);
            assert_eq!(one(run(l(true), v.clone(), parts)), Some("b".into()));
        }
        let all_null = strings(vec![None, None]);
        assert_eq!(
            one(run(AggFn::First { ignore_nulls: true }, all_null, 2)),
            None
        );
    }
}
