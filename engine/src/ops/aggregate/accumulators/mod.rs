//! The aggregate functions' accumulators: one [`Accumulator`] trait, one
//! file per function family, and the registration ([`Acc`] and
//! [`Acc::new`]) that the aggregation and session-window operators use
//! without knowing which function they hold.
//!
//! Adding a function: its file here (an [`Accumulator`]), a variant in the
//! `accumulators!` list and an arm in [`Acc::new`]; its result type comes
//! from the plan's catalogue (`weir_plan::aggregates`).
//!
//! An accumulator's state is what the state store keeps per group (after
//! the group's eviction time): [`Accumulator::encode`] writes it and
//! [`Accumulator::decode`] reads it back into an accumulator made for the
//! same function, so the layout needs no tag. Decoding replaces all of an
//! accumulator's state and keeps its settings (a `collect_*` bound, an HLL
//! precision): the aggregation decodes every stored group into one reused
//! accumulator.

mod avg;
mod collect;
mod count;
mod first_last;
mod hll;
mod min_max;
mod sum;
mod variance;

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BinaryArray, Float64Array, Int64Array, StringArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType as ArrowType, Float64Type, Int64Type, Schema};
use weir_plan::aggregates::ResultRule;
use weir_plan::AggFn;

use crate::error::{Result, WeirError};
use crate::ops::aggregate::AggExec;
use crate::row::timestamp_type;

/// One group's running value of one aggregate function.
pub(crate) trait Accumulator: Clone + std::fmt::Debug + PartialEq + Send + Sync {
    /// Folds in row `i` of the aggregate's input.
    fn update(&mut self, r: &Reader, i: usize) -> Result<()>;
    /// Folds in `other`, which saw the rows that arrived after this one's
    /// (tasks merge in input order, a batch merges into the stored state).
    fn merge(&mut self, other: &Self) -> Result<()>;
    /// Appends the state-store encoding.
    fn encode(&self, out: &mut Vec<u8>);
    /// Reads the state-store encoding at `pos` into `self` (made for the
    /// same function), replacing all of its state but not its settings;
    /// `None` when the bytes are damaged.
    fn decode(&mut self, buf: &[u8], pos: &mut usize) -> Option<()>;
    /// The result column of groups' accumulators, of type `t`.
    fn evaluate(accs: &[&Self], t: &ArrowType) -> Result<ArrayRef>;
}

// Every accumulator takes at most 40 bytes (the large ones are boxed).
const _: () = assert!(std::mem::size_of::<Acc>() <= 40);

/// A large accumulator kept behind a pointer, so that every [`Acc`] stays
/// small: a group's accumulators sit side by side in the aggregation's
/// vectors, and the common ones (counts, sums) should not take the room of
/// the largest.
impl<T: Accumulator> Accumulator for Box<T> {
    #[inline]
    fn update(&mut self, r: &Reader, i: usize) -> Result<()> {
        (**self).update(r, i)
    }
    fn merge(&mut self, other: &Self) -> Result<()> {
        (**self).merge(other)
    }
    fn encode(&self, out: &mut Vec<u8>) {
        (**self).encode(out)
    }
    fn decode(&mut self, buf: &[u8], pos: &mut usize) -> Option<()> {
        (**self).decode(buf, pos)
    }
    fn evaluate(accs: &[&Self], t: &ArrowType) -> Result<ArrayRef> {
        let inner: Vec<&T> = accs.iter().map(|a| &***a).collect();
        T::evaluate(&inner, t)
    }
}

/// Registers the accumulators: the [`Acc`] enum over them and its
/// dispatch (one match per operation, generated).
macro_rules! accumulators {
    ($($(#[$doc:meta])* $variant:ident($ty:ty),)*) => {
        /// An accumulator of any registered function.
        #[derive(Clone, Debug, PartialEq)]
        pub(crate) enum Acc {
            $($(#[$doc])* $variant($ty),)*
        }

        impl Acc {
            /// Folds in row `i` of `r`.
            #[inline]
            pub(crate) fn update(&mut self, r: &Reader, i: usize) -> Result<()> {
                match self {
                    $(Acc::$variant(a) => a.update(r, i),)*
                }
            }

            /// Folds rows into groups' accumulators: for each `k`, row
            /// `rows[k]` of `r` into the accumulator of group `groups[k]`
            /// at position `at` (`stride` per group) in `accs`, all of one
            /// function. One dispatch for all the rows. On an error, also
            /// the `k` it happened at.
            pub(crate) fn update_rows(
                accs: &mut [Acc],
                stride: usize,
                at: usize,
                groups: &[u32],
                rows: &[u32],
                r: &Reader,
            ) -> std::result::Result<(), (usize, WeirError)> {
                let Some(first) = accs.get(at) else { return Ok(()) };
                match first {
                    $(Acc::$variant(_) => {
                        for (k, (&g, &row)) in groups.iter().zip(rows).enumerate() {
                            if let Acc::$variant(a) = &mut accs[g as usize * stride + at] {
                                a.update(r, row as usize).map_err(|e| (k, e))?;
                            }
                        }
                    })*
                }
                Ok(())
            }

            /// Folds in `o` (the later rows' accumulator of the same function).
            pub(crate) fn merge(&mut self, o: &Acc) -> Result<()> {
                match (self, o) {
                    $((Acc::$variant(a), Acc::$variant(b)) => a.merge(b),)*
                    #[allow(unreachable_patterns)]
                    _ => Err(WeirError::Config(
                        "aggregation state of another function (written by a different query?)".into(),
                    )),
                }
            }

            /// Appends the state-store encoding.
            pub(crate) fn encode(&self, out: &mut Vec<u8>) {
                match self {
                    $(Acc::$variant(a) => a.encode(out),)*
                }
            }

            /// Decodes into `self` (whose function says what to read).
            pub(crate) fn decode(&mut self, buf: &[u8], pos: &mut usize) -> Option<()> {
                match self {
                    $(Acc::$variant(a) => a.decode(buf, pos),)*
                }
            }

            /// The result column of groups' accumulators (all of one function).
            pub(crate) fn evaluate(accs: &[&Acc], t: &ArrowType) -> Result<ArrayRef> {
                let Some(first) = accs.first() else {
                    return Ok(arrow::array::new_empty_array(t));
                };
                match first {
                    $(Acc::$variant(_) => {
                        let same: Vec<&$ty> = accs
                            .iter()
                            .filter_map(|a| match a {
                                Acc::$variant(x) => Some(x),
                                #[allow(unreachable_patterns)]
                                _ => None,
                            })
                            .collect();
                        <$ty as Accumulator>::evaluate(&same, t)
                    })*
                }
            }
        }
    };
}

accumulators! {
    /// `count`, `count_distinct` (batch only).
    Count(count::Count),
    /// `sum` of integers.
    SumInt(sum::SumInt),
    /// `sum` of floats.
    SumFloat(sum::SumFloat),
    /// `avg`.
    Avg(avg::Avg),
    /// `min`, `max`.
    MinMax(min_max::MinMax),
    /// `approx_count_distinct` (boxed: its registers are behind a pointer anyway).
    Hll(Box<hll::Hll>),
    /// `first`, `last`.
    FirstLast(first_last::FirstLast),
    /// `stddev_*`, `var_*`.
    Moments(variance::Moments),
    /// `collect_list`, `collect_set` (boxed: the largest).
    Collect(Box<collect::Collect>),
}

impl Acc {
    /// Whether a group's result is the same however its rows are split
    /// among tasks and in whatever order they come: counts, integer sums
    /// (which wrap), `min`/`max` (a total order on each kind's values:
    /// floats by `total_cmp`, so -0.0 and 0.0 never tie) and
    /// `approx_count_distinct` (its registers merge by maximum). The
    /// others (float sums and averages, variances, `first`/`last`,
    /// `collect_*`) are merged in input order.
    pub(crate) fn order_free(&self) -> bool {
        matches!(
            self,
            Acc::Count(_) | Acc::SumInt(_) | Acc::MinMax(_) | Acc::Hll(_)
        )
    }

    /// Counts `n` more rows in a row count (`count(*)`: a [`Acc::Count`]
    /// that reads no column); any other accumulator is left as it is.
    pub(crate) fn add_rows(&mut self, n: i64) {
        if let Acc::Count(c) = self {
            c.add(n);
        }
    }

    /// A new (empty) accumulator of `func` over input values of `kind`
    /// (`collect_*` bounded by the default of
    /// `spark.sql.streaming.weir.collectMaxValues`); the operators use
    /// [`Acc::bounded`] with the session's setting.
    #[cfg(test)]
    pub(crate) fn new(func: AggFn, kind: Kind) -> Acc {
        Acc::bounded(func, kind, crate::config::COLLECT_MAX_VALUES_DEFAULT)
    }

    /// A new accumulator whose `collect_*` keep at most `max_values` values.
    pub(crate) fn bounded(func: AggFn, kind: Kind, max_values: usize) -> Acc {
        match func {
            AggFn::Count | AggFn::CountDistinct => Acc::Count(count::Count::default()),
            AggFn::Sum if kind == Kind::Float => Acc::SumFloat(sum::SumFloat::default()),
            AggFn::Sum => Acc::SumInt(sum::SumInt::default()),
            AggFn::Avg => Acc::Avg(avg::Avg::default()),
            AggFn::Min => Acc::MinMax(min_max::MinMax::min()),
            AggFn::Max => Acc::MinMax(min_max::MinMax::max()),
            AggFn::ApproxCountDistinct { rsd } => {
                Acc::Hll(Box::new(hll::Hll::new(rsd.precision())))
            }
            AggFn::First { ignore_nulls } => {
                Acc::FirstLast(first_last::FirstLast::first(ignore_nulls))
            }
            AggFn::Last { ignore_nulls } => {
                Acc::FirstLast(first_last::FirstLast::last(ignore_nulls))
            }
            AggFn::StddevSamp | AggFn::StddevPop | AggFn::VarSamp | AggFn::VarPop => {
                Acc::Moments(variance::Moments::new(func))
            }
            AggFn::CollectList => Acc::Collect(Box::new(collect::Collect::list(max_values))),
            AggFn::CollectSet => Acc::Collect(Box::new(collect::Collect::set(max_values))),
        }
    }
}

/// The Arrow type of `func`'s result over an input of `input` (None for
/// `*`), by the plan catalogue's result rule.
pub(crate) fn output_type(func: AggFn, input: Option<&ArrowType>) -> ArrowType {
    match func.def().result {
        ResultRule::Fixed(t) => crate::row::arrow_type(t),
        ResultRule::Sum if input.map(kind_of) == Some(Kind::Float) => ArrowType::Float64,
        ResultRule::Sum => ArrowType::Int64,
        ResultRule::Input => input.cloned().unwrap_or(ArrowType::Int64),
        ResultRule::ListOfInput => {
            let item = input.cloned().unwrap_or(ArrowType::Int64);
            match crate::row::plan_type(&item).and_then(|t| t.element()) {
                Some(e) => crate::row::arrow_type(weir_plan::DataType::List(e)),
                None => ArrowType::List(Arc::new(arrow::datatypes::Field::new("item", item, true))),
            }
        }
    }
}

/// The aggregate columns for groups' accumulators (fields from `first` on in `schema`).
pub(crate) fn agg_arrays(
    aggs: &[AggExec],
    schema: &Schema,
    first: usize,
    groups: &[&[Acc]],
) -> Result<Vec<ArrayRef>> {
    (0..aggs.len())
        .map(|ai| {
            let column: Vec<&Acc> = groups.iter().map(|g| &g[ai]).collect();
            Acc::evaluate(&column, schema.field(first + ai).data_type())
        })
        .collect()
}

/// How accumulator values are read from an input column.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum Kind {
    Int,
    Float,
    Bytes,
}

/// The value kind of an input type.
pub(crate) fn kind_of(t: &ArrowType) -> Kind {
    match t {
        ArrowType::Float64 | ArrowType::Float32 => Kind::Float,
        ArrowType::Utf8
        | ArrowType::LargeUtf8
        | ArrowType::Utf8View
        | ArrowType::Binary
        | ArrowType::LargeBinary => Kind::Bytes,
        _ => Kind::Int,
    }
}

/// One input value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Scalar {
    /// An integer (and booleans, timestamps).
    Int(i64),
    /// A float.
    Float(f64),
    /// Bytes (strings, binary).
    Bytes(Vec<u8>),
}

/// `v`, any NaN as the one NaN (positive, quiet) Spark normalises every
/// NaN to, for grouping and ordering alike.
pub(crate) fn one_nan(v: f64) -> f64 {
    if v.is_nan() {
        f64::NAN
    } else {
        v
    }
}

impl Scalar {
    /// A float value, every NaN as the one NaN (positive, quiet), as Spark
    /// normalises them: the total order of [`Scalar::less`] then puts it
    /// above every number. (A NaN computed on x86, `0.0 / 0.0`, has its
    /// sign bit set and would order below minus infinity.)
    pub(crate) fn float(v: f64) -> Scalar {
        Scalar::Float(one_nan(v))
    }

    /// Spark's order (floats by total order: NaN, made one by
    /// [`Scalar::float`], above everything).
    pub(crate) fn less(&self, o: &Scalar) -> bool {
        match (self, o) {
            (Scalar::Int(a), Scalar::Int(b)) => a < b,
            (Scalar::Float(a), Scalar::Float(b)) => a.total_cmp(b).is_lt(),
            (Scalar::Bytes(a), Scalar::Bytes(b)) => a < b,
            _ => false,
        }
    }
}

/// A column read once per batch in the accumulator's value kind.
pub(crate) enum Reader {
    None,
    I(Int64Array),
    F(Float64Array),
    S(StringArray),
    B(BinaryArray),
}

impl Reader {
    pub(crate) fn new(a: Option<&ArrayRef>) -> Result<Reader> {
        let Some(a) = a else { return Ok(Reader::None) };
        Ok(match a.data_type() {
            ArrowType::Float64 | ArrowType::Float32 => Reader::F(
                cast(a, &ArrowType::Float64)?
                    .as_primitive::<Float64Type>()
                    .clone(),
            ),
            ArrowType::Utf8 | ArrowType::LargeUtf8 | ArrowType::Utf8View => {
                Reader::S(cast(a, &ArrowType::Utf8)?.as_string::<i32>().clone())
            }
            ArrowType::Binary | ArrowType::LargeBinary => {
                Reader::B(cast(a, &ArrowType::Binary)?.as_binary::<i32>().clone())
            }
            ArrowType::Timestamp(_, _) => {
                let t = cast(a, &timestamp_type())?;
                let v: Int64Array = t
                    .as_primitive::<arrow::datatypes::TimestampMicrosecondType>()
                    .reinterpret_cast();
                Reader::I(v)
            }
            _ => Reader::I(
                cast(a, &ArrowType::Int64)?
                    .as_primitive::<Int64Type>()
                    .clone(),
            ),
        })
    }

    /// Row `i`'s value (`None` for null).
    pub(crate) fn get(&self, i: usize) -> Option<Scalar> {
        match self {
            Reader::None => None,
            Reader::I(a) => a.is_valid(i).then(|| Scalar::Int(a.value(i))),
            Reader::F(a) => a.is_valid(i).then(|| Scalar::float(a.value(i))),
            Reader::S(a) => a
                .is_valid(i)
                .then(|| Scalar::Bytes(a.value(i).as_bytes().to_vec())),
            Reader::B(a) => a.is_valid(i).then(|| Scalar::Bytes(a.value(i).to_vec())),
        }
    }

    /// Row `i`'s value as a double, for numeric inputs.
    pub(crate) fn f64(&self, i: usize) -> Option<f64> {
        match self {
            Reader::I(a) => a.is_valid(i).then(|| a.value(i) as f64),
            Reader::F(a) => a.is_valid(i).then(|| a.value(i)),
            _ => None,
        }
    }

    /// True when row `i` is not null (always for `*`).
    #[inline(always)]
    pub(crate) fn is_valid(&self, i: usize) -> bool {
        match self {
            Reader::None => true,
            Reader::I(a) => a.is_valid(i),
            Reader::F(a) => a.is_valid(i),
            Reader::S(a) => a.is_valid(i),
            Reader::B(a) => a.is_valid(i),
        }
    }
}

/// Little-endian `i64` at `pos`.
pub(crate) fn get_i64(buf: &[u8], pos: &mut usize) -> Option<i64> {
    let v = i64::from_le_bytes(buf.get(*pos..*pos + 8)?.try_into().ok()?);
    *pos += 8;
    Some(v)
}

/// Little-endian `f64` at `pos`.
pub(crate) fn get_f64(buf: &[u8], pos: &mut usize) -> Option<f64> {
    get_i64(buf, pos).map(|v| f64::from_bits(v as u64))
}

/// One byte at `pos`.
pub(crate) fn get_u8(buf: &[u8], pos: &mut usize) -> Option<u8> {
    let v = *buf.get(*pos)?;
    *pos += 1;
    Some(v)
}

/// Appends an optional value: a tag (0 none, 1 int, 2 float, 3 bytes), then it.
pub(crate) fn put_opt_scalar(out: &mut Vec<u8>, v: &Option<Scalar>) {
    match v {
        None => out.push(0),
        Some(Scalar::Int(i)) => {
            out.push(1);
            out.extend_from_slice(&i.to_le_bytes())
        }
        Some(Scalar::Float(f)) => {
            out.push(2);
            out.extend_from_slice(&f.to_le_bytes())
        }
        Some(Scalar::Bytes(b)) => {
            out.push(3);
            out.extend_from_slice(&(b.len() as u32).to_le_bytes());
            out.extend_from_slice(b)
        }
    }
}

/// Reads what [`put_opt_scalar`] wrote.
pub(crate) fn get_opt_scalar(buf: &[u8], pos: &mut usize) -> Option<Option<Scalar>> {
    Some(match get_u8(buf, pos)? {
        0 => None,
        1 => Some(Scalar::Int(get_i64(buf, pos)?)),
        2 => Some(Scalar::float(get_f64(buf, pos)?)),
        3 => {
            let n = u32::from_le_bytes(buf.get(*pos..*pos + 4)?.try_into().ok()?) as usize;
            *pos += 4;
            let b = buf.get(*pos..*pos + n)?.to_vec();
            *pos += n;
            Some(Scalar::Bytes(b))
        }
        _ => return None,
    })
}

/// A column of type `t` from values read by a [`Reader`] of that type
/// (`min`, `max`, `first`, `last` return their input's type).
pub(crate) fn scalars_array<'a>(
    values: impl Iterator<Item = Option<&'a Scalar>>,
    t: &ArrowType,
) -> Result<ArrayRef> {
    let raw: ArrayRef = match kind_of(t) {
        Kind::Float => Arc::new(Float64Array::from_iter(values.map(|s| match s {
            Some(Scalar::Float(f)) => Some(*f),
            _ => None,
        }))),
        Kind::Bytes => {
            let b: BinaryArray = values
                .map(|s| match s {
                    Some(Scalar::Bytes(b)) => Some(b.as_slice()),
                    _ => None,
                })
                .collect();
            if matches!(
                t,
                ArrowType::Utf8 | ArrowType::LargeUtf8 | ArrowType::Utf8View
            ) {
                Arc::new(StringArray::from_iter(
                    b.iter()
                        .map(|v| v.map(|v| String::from_utf8_lossy(v).into_owned())),
                ))
            } else {
                Arc::new(b)
            }
        }
        Kind::Int => {
            let i = Int64Array::from_iter(values.map(|s| match s {
                Some(Scalar::Int(v)) => Some(*v),
                _ => None,
            }));
            match t {
                ArrowType::Timestamp(_, _) => Arc::new(
                    i.reinterpret_cast::<arrow::datatypes::TimestampMicrosecondType>()
                        .with_timezone("UTC"),
                ),
                _ => Arc::new(i),
            }
        }
    };
    Ok(cast(&raw, t)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `func` over `values` split into `parts` slices merged in order,
    /// each passed through the state encoding, and returns the result.
    pub(crate) fn run(func: AggFn, values: ArrayRef, parts: usize) -> ArrayRef {
        let t = values.data_type().clone();
        let kind = kind_of(&t);
        let n = values.len();
        let mut total = Acc::new(func, kind);
        let per = n.div_ceil(parts.max(1)).max(1);
        let mut start = 0;
        while start < n {
            let len = per.min(n - start);
            let slice = values.slice(start, len);
            let r = Reader::new(Some(&slice)).unwrap();
            let mut a = Acc::new(func, kind);
            for i in 0..len {
                a.update(&r, i).unwrap();
            }
            let mut bytes = Vec::new();
            a.encode(&mut bytes);
            // Decoded into an accumulator holding other rows already (the
            // aggregation reuses one): decoding replaces its state.
            let mut back = Acc::new(func, kind);
            let all = Reader::new(Some(&values)).unwrap();
            for i in (0..n).rev() {
                let _ = back.update(&all, i);
            }
            let mut pos = 0;
            back.decode(&bytes, &mut pos).unwrap();
            assert_eq!(pos, bytes.len());
            let mut again = Vec::new();
            back.encode(&mut again);
            assert_eq!(again, bytes);
            total.merge(&back).unwrap();
            start += len;
        }
        Acc::evaluate(&[&total], &output_type(func, Some(&t))).unwrap()
    }

    #[test]
    fn every_function_survives_the_state_encoding_and_merges_as_one_pass() {
        let ints: ArrayRef = Arc::new(Int64Array::from(vec![
            Some(3),
            None,
            Some(-1),
            Some(7),
            Some(3),
            None,
            Some(10),
        ]));
        for def in weir_plan::aggregates::AGGREGATES {
            let f = def.default_fn();
            if f.result_type(Some(weir_plan::DataType::Int64)).is_none() {
                continue;
            }
            let one = run(f, ints.clone(), 1);
            for parts in [2, 3, 7] {
                let merged = run(f, ints.clone(), parts);
                if matches!(
                    f,
                    AggFn::StddevSamp | AggFn::StddevPop | AggFn::VarSamp | AggFn::VarPop
                ) {
                    let (a, b) = (
                        one.as_primitive::<Float64Type>(),
                        merged.as_primitive::<Float64Type>(),
                    );
                    assert!((a.value(0) - b.value(0)).abs() < 1e-9, "{}", def.name);
                } else {
                    assert_eq!(&one, &merged, "{} over {parts} parts", def.name);
                }
            }
        }
    }
}
