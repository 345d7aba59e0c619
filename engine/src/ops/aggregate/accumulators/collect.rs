//! `collect_list(col)` and `collect_set(col)`: a group's non-null values as
//! an `array<T>` of the input's type (Spark's functions; nulls are skipped,
//! a group of only nulls gives an empty array, never null).
//!
//! Order: `collect_list` keeps arrival order (the source's order within a
//! batch, then batch by batch; partial results of a batch's tasks and
//! partitions are concatenated in input order). Spark guarantees no order
//! for either function, so a query should not rely on it across engines.
//! `collect_set` keeps each distinct value once, in the order it first
//! arrived; doubles compare as Spark groups them (`-0.0` is `0.0`, every
//! NaN is one value).
//!
//! Bounded: a group keeps at most `spark.sql.streaming.weir.collectMaxValues`
//! values (distinct values for `collect_set`; default
//! [`crate::config::COLLECT_MAX_VALUES_DEFAULT`]). A group that would pass
//! it fails the query with an error naming the aggregate and the group,
//! never truncating silently: the state of a group lives in the state store
//! and is rewritten every batch the group changes.
//!
//! State: the value count (`u32`), then each value (tagged as
//! [`put_opt_scalar`] writes it).

use std::collections::HashSet;
use std::sync::Arc;

use arrow::array::{ArrayRef, ListArray};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::DataType as ArrowType;

use super::{get_opt_scalar, put_opt_scalar, scalars_array, Accumulator, Reader, Scalar};
use crate::error::{Result, WeirError};

/// A group's collected values.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Collect {
    /// The values, in arrival (first-arrival for a set) order.
    values: Vec<Scalar>,
    /// For `collect_set`: the values kept, to skip repeats.
    seen: Option<HashSet<SetKey>>,
    /// The most values a group may keep.
    max: usize,
}

/// A value as `collect_set` compares it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum SetKey {
    I(i64),
    F(u64),
    B(Vec<u8>),
}

impl SetKey {
    fn of(v: &Scalar) -> SetKey {
        match v {
            Scalar::Int(i) => SetKey::I(*i),
            // Spark's grouping normalisation: one zero, one NaN.
            Scalar::Float(f) if f.is_nan() => SetKey::F(f64::NAN.to_bits()),
            Scalar::Float(f) if *f == 0.0 => SetKey::F(0f64.to_bits()),
            Scalar::Float(f) => SetKey::F(f.to_bits()),
            Scalar::Bytes(b) => SetKey::B(b.clone()),
        }
    }
}

impl Collect {
    /// A `collect_list` keeping at most `max` values.
    pub(crate) fn list(max: usize) -> Collect {
        Collect {
            values: Vec::new(),
            seen: None,
            max,
        }
    }

    /// A `collect_set` keeping at most `max` distinct values.
    pub(crate) fn set(max: usize) -> Collect {
        Collect {
            seen: Some(HashSet::new()),
            ..Collect::list(max)
        }
    }

    /// Adds `v` (unless a set has it), refusing to pass the bound.
    fn push(&mut self, v: &Scalar) -> Result<()> {
        if let Some(seen) = &mut self.seen {
            let key = SetKey::of(v);
            if seen.contains(&key) {
                return Ok(());
            }
            if self.values.len() >= self.max {
                return Err(self.too_many());
            }
            seen.insert(key);
        } else if self.values.len() >= self.max {
            return Err(self.too_many());
        }
        self.values.push(v.clone());
        Ok(())
    }

    /// The error of a group that would pass the bound.
    fn too_many(&self) -> WeirError {
        let (name, what) = match self.seen {
            Some(_) => ("collect_set", "distinct values"),
            None => ("collect_list", "values"),
        };
        WeirError::Config(format!(
            "{name} keeps at most {max} {what} per group (spark.sql.streaming.weir.collectMaxValues) and this group has more: raise the setting if the group's array fits in memory and the state store, group by finer keys or shorter windows, or aggregate the values instead of collecting them (count, approx_count_distinct, min, max)",
            max = self.max
        ))
    }
}

impl Accumulator for Collect {
    #[inline]
    fn update(&mut self, r: &Reader, i: usize) -> Result<()> {
        match r.get(i) {
            Some(v) => self.push(&v),
            None => Ok(()),
        }
    }

    fn merge(&mut self, o: &Collect) -> Result<()> {
        for v in &o.values {
            self.push(v)?;
        }
        Ok(())
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.values.len() as u32).to_le_bytes());
        for v in &self.values {
            put_opt_scalar(out, &Some(v.clone()));
        }
    }

    fn decode(&mut self, buf: &[u8], pos: &mut usize) -> Option<()> {
        let n = u32::from_le_bytes(buf.get(*pos..*pos + 4)?.try_into().ok()?) as usize;
        *pos += 4;
        self.values.clear();
        if let Some(seen) = &mut self.seen {
            seen.clear();
        }
        for _ in 0..n {
            let v = get_opt_scalar(buf, pos)??;
            if let Some(seen) = &mut self.seen {
                // A set's state holds each value once.
                if !seen.insert(SetKey::of(&v)) {
                    return None;
                }
            }
            self.values.push(v);
        }
        Some(())
    }

    fn evaluate(accs: &[&Collect], t: &ArrowType) -> Result<ArrayRef> {
        let ArrowType::List(item) = t else {
            return Err(WeirError::Config(format!(
                "collect_list and collect_set return arrays, not {t}"
            )));
        };
        let values = scalars_array(
            accs.iter().flat_map(|a| a.values.iter().map(Some)),
            item.data_type(),
        )?;
        Ok(Arc::new(ListArray::try_new(
            item.clone(),
            OffsetBuffer::from_lengths(accs.iter().map(|a| a.values.len())),
            values,
            None,
        )?))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::run;
    use super::super::{kind_of, Acc};
    use super::*;
    use arrow::array::{Array, AsArray, Float64Array, Int64Array, StringArray};
    use weir_plan::AggFn;

    fn strings(v: Vec<Option<&str>>) -> ArrayRef {
        Arc::new(StringArray::from(v))
    }

    /// The first group's array, as strings.
    fn texts(a: ArrayRef) -> Vec<String> {
        let l = a.as_list::<i32>();
        assert!(l.is_valid(0));
        let v = l.value(0);
        v.as_string::<i32>()
            .iter()
            .map(|s| s.unwrap().to_string())
            .collect()
    }

    #[test]
    fn lists_keep_arrival_order_and_sets_first_arrivals_over_any_split() {
        let v = strings(vec![
            Some("b"),
            None,
            Some("a"),
            Some("b"),
            Some("c"),
            None,
            Some("a"),
        ]);
        for parts in [1, 2, 3, 7] {
            assert_eq!(
                texts(run(AggFn::CollectList, v.clone(), parts)),
                ["b", "a", "b", "c", "a"],
                "{parts} parts"
            );
            assert_eq!(
                texts(run(AggFn::CollectSet, v.clone(), parts)),
                ["b", "a", "c"],
                "{parts} parts"
            );
        }
    }

    #[test]
    fn a_group_of_nulls_collects_an_empty_array() {
        for f in [AggFn::CollectList, AggFn::CollectSet] {
            let out = run(f, strings(vec![None, None]), 2);
            assert_eq!(out.null_count(), 0);
            assert!(texts(out).is_empty());
        }
    }

    #[test]
    fn sets_compare_doubles_as_spark_groups_them() {
        let v: ArrayRef = Arc::new(Float64Array::from(vec![0.0, -0.0, f64::NAN, f64::NAN, 1.5]));
        let out = run(AggFn::CollectSet, v, 2);
        let l = out.as_list::<i32>();
        let got = l.value(0);
        let got = got.as_primitive::<arrow::datatypes::Float64Type>();
        assert_eq!(got.len(), 3);
        assert_eq!(got.value(0), 0.0);
        assert!(got.value(1).is_nan());
        assert_eq!(got.value(2), 1.5);
    }

    /// Passing the bound is an error naming the function and the
    /// setting, in an update and in a merge; reaching it is not.
    #[test]
    fn the_bound_is_an_error_never_a_truncation() {
        let ints: ArrayRef = Arc::new(Int64Array::from(vec![1, 2, 3, 2]));
        let r = Reader::new(Some(&ints)).unwrap();
        let mut list = Collect::list(3);
        for i in 0..3 {
            list.update(&r, i).unwrap();
        }
        let err = list.update(&r, 3).unwrap_err().to_string();
        assert!(err.contains("collect_list keeps at most 3 values"), "{err}");
        assert!(
            err.contains("spark.sql.streaming.weir.collectMaxValues"),
            "{err}"
        );
        assert_eq!(list.values.len(), 3);
        // A set counts distinct values: the repeated 2 fits.
        let mut set = Collect::set(3);
        for i in 0..4 {
            set.update(&r, i).unwrap();
        }
        let mut other = Collect::set(3);
        let more: ArrayRef = Arc::new(Int64Array::from(vec![3, 4]));
        let r2 = Reader::new(Some(&more)).unwrap();
        other.update(&r2, 0).unwrap();
        other.update(&r2, 1).unwrap();
        let err = set.merge(&other).unwrap_err().to_string();
        assert!(
            err.contains("collect_set keeps at most 3 distinct values"),
            "{err}"
        );
        let mut small = Collect::list(3);
        small.update(&r, 0).unwrap();
        assert!(small.merge(&list).is_err());
    }

    #[test]
    fn the_state_encoding_round_trips_and_refuses_damage() {
        let v = strings(vec![Some("x"), Some("yy"), None, Some("x")]);
        let kind = kind_of(v.data_type());
        let r = Reader::new(Some(&v)).unwrap();
        for f in [AggFn::CollectList, AggFn::CollectSet] {
            let mut a = Acc::new(f, kind);
            for i in 0..v.len() {
                a.update(&r, i).unwrap();
            }
            let mut bytes = Vec::new();
            a.encode(&mut bytes);
            let mut back = Acc::new(f, kind);
            let mut pos = 0;
            back.decode(&bytes, &mut pos).unwrap();
            assert_eq!(pos, bytes.len());
            assert_eq!(back, a);
            let mut short = Acc::new(f, kind);
            assert!(short.decode(&bytes[..bytes.len() - 1], &mut 0).is_none());
        }
        // A set's state with a repeated value is damaged.
        let mut list = Collect::list(10);
        list.update(&r, 0).unwrap();
        list.update(&r, 3).unwrap();
        let mut bytes = Vec::new();
        list.encode(&mut bytes);
        assert!(Collect::set(10).decode(&bytes, &mut 0).is_none());
    }
}
