//! Typed rows: Rust values to and from Arrow columns. The `stream_query!`
//! macro generates [`Row`] impls from these pieces.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, BooleanArray, Float64Array, Int32Array, Int64Array,
    ListArray, StringArray, StructArray, TimestampMicrosecondArray,
};
use arrow::buffer::{NullBuffer, OffsetBuffer};
use arrow::datatypes::{
    DataType as ArrowType, Field as ArrowField, Fields, Float64Type, Int32Type, Int64Type, Schema,
    SchemaRef, TimeUnit, TimestampMicrosecondType,
};
use arrow::record_batch::RecordBatch;
use weir_plan::types::ElementType;
use weir_plan::{DataType, Field};

use crate::error::{Result, WeirError};

/// An instant: microseconds since the Unix epoch, UTC (Spark's `TIMESTAMP`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(pub i64);

impl Timestamp {
    /// From milliseconds since the epoch.
    pub fn from_millis(ms: i64) -> Timestamp {
        Timestamp(ms * 1000)
    }

    /// Milliseconds since the epoch (rounded down).
    pub fn millis(self) -> i64 {
        self.0.div_euclid(1000)
    }

    /// Parses an ISO-8601 / RFC 3339 instant (`2024-01-01T12:00:00Z`).
    pub fn parse(s: &str) -> Result<Timestamp> {
        let t = chrono::DateTime::parse_from_rfc3339(s)
            .map_err(|e| WeirError::Row(format!("`{s}` is not an RFC 3339 timestamp: {e}")))?;
        Ok(Timestamp(t.timestamp_micros()))
    }
}

impl std::fmt::Display for Timestamp {
    /// Spark's console form: `2024-01-01 12:00:00` (fraction only when present).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match chrono::DateTime::from_timestamp_micros(self.0) {
            Some(t) => {
                let frac = self.0.rem_euclid(1_000_000);
                if frac == 0 {
                    write!(f, "{}", t.format("%Y-%m-%d %H:%M:%S"))
                } else {
                    write!(
                        f,
                        "{}",
                        t.format("%Y-%m-%d %H:%M:%S%.f")
                            .to_string()
                            .trim_end_matches('0')
                    )
                }
            }
            None => write!(f, "{}us", self.0),
        }
    }
}

/// A time window `[start, end)`: the value of a `window(...)` grouping key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Window {
    /// Inclusive start.
    pub start: Timestamp,
    /// Exclusive end.
    pub end: Timestamp,
}

/// The Arrow type weir uses for timestamps: microseconds, UTC.
pub fn timestamp_type() -> ArrowType {
    ArrowType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
}

/// The Arrow type of a window: `struct<start: timestamp, end: timestamp>`.
pub fn window_type() -> ArrowType {
    ArrowType::Struct(window_fields())
}

/// True for a window's type: a struct of `start` and `end` (the one test
/// every part of the engine uses to recognise a window column).
pub fn is_window_type(t: &ArrowType) -> bool {
    matches!(t, ArrowType::Struct(f) if f.len() == 2 && f[0].name() == "start" && f[1].name() == "end")
}

fn window_fields() -> Fields {
    Fields::from(vec![
        ArrowField::new("start", timestamp_type(), true),
        ArrowField::new("end", timestamp_type(), true),
    ])
}

/// The Arrow type of a plan type.
pub fn arrow_type(t: DataType) -> ArrowType {
    match t {
        DataType::Timestamp => timestamp_type(),
        DataType::String => ArrowType::Utf8,
        DataType::Int32 => ArrowType::Int32,
        DataType::Int64 => ArrowType::Int64,
        DataType::Float64 => ArrowType::Float64,
        DataType::Bool => ArrowType::Boolean,
        DataType::Binary => ArrowType::Binary,
        DataType::Window => window_type(),
        DataType::List(e) => ArrowType::List(Arc::new(list_item(e))),
    }
}

/// The item field of a list of `e` (Arrow's `item`, nullable as Arrow's
/// lists are by default; weir's lists hold no nulls).
fn list_item(e: ElementType) -> ArrowField {
    ArrowField::new("item", arrow_type(e.data_type()), true)
}

/// The plan type of an Arrow type, when weir has one.
pub fn plan_type(t: &ArrowType) -> Option<DataType> {
    Some(match t {
        ArrowType::Timestamp(_, _) => DataType::Timestamp,
        ArrowType::Utf8 | ArrowType::LargeUtf8 | ArrowType::Utf8View => DataType::String,
        ArrowType::Int32 => DataType::Int32,
        ArrowType::Int64 => DataType::Int64,
        ArrowType::Float64 => DataType::Float64,
        ArrowType::Boolean => DataType::Bool,
        ArrowType::Binary | ArrowType::LargeBinary => DataType::Binary,
        t if is_window_type(t) => DataType::Window,
        ArrowType::List(item) | ArrowType::LargeList(item) => {
            DataType::List(plan_type(item.data_type())?.element()?)
        }
        _ => return None,
    })
}

/// An Arrow schema from plan fields (all columns nullable, as Spark's are).
pub fn arrow_schema(fields: &[Field]) -> SchemaRef {
    Arc::new(Schema::new(
        fields
            .iter()
            .map(|f| ArrowField::new(&f.name, arrow_type(f.dtype), true))
            .collect::<Vec<_>>(),
    ))
}

/// Plan fields from an Arrow schema; columns of types weir has no name for are left out.
pub fn plan_fields(schema: &Schema) -> Vec<Field> {
    schema
        .fields()
        .iter()
        .filter_map(|f| plan_type(f.data_type()).map(|t| Field::new(f.name(), t)))
        .collect()
}

/// A typed row struct: what `stream_query!` generates for input and output rows.
pub trait Row: Sized {
    /// The columns, in order.
    fn fields() -> Vec<Field>;
    /// Rows to one Arrow batch.
    fn to_batch(rows: &[Self]) -> Result<RecordBatch>;
    /// An Arrow batch to rows.
    fn from_batch(batch: &RecordBatch) -> Result<Vec<Self>>;
}

/// A Rust value type that maps to one Arrow column type.
pub trait ArrowValue: Sized {
    /// The plan type of the column.
    const TYPE: DataType;
    /// Values to an Arrow array.
    fn to_array(values: Vec<Self>) -> ArrayRef;
    /// An Arrow array to values; nulls are an error unless `Self` is an `Option`.
    fn from_array(array: &dyn Array) -> Result<Vec<Self>>;
}

/// `ArrowValue` for `Option<T>`, built on the non-null impl of `T`.
pub trait NullableArrowValue: ArrowValue {
    /// Values with nulls to an array.
    fn to_array_opt(values: Vec<Option<Self>>) -> ArrayRef;
    /// An array to values with nulls.
    fn from_array_opt(array: &dyn Array) -> Result<Vec<Option<Self>>>;
}

impl<T: NullableArrowValue> ArrowValue for Option<T> {
    const TYPE: DataType = T::TYPE;
    fn to_array(values: Vec<Self>) -> ArrayRef {
        T::to_array_opt(values)
    }
    fn from_array(array: &dyn Array) -> Result<Vec<Self>> {
        T::from_array_opt(array)
    }
}

fn no_nulls<T>(v: Vec<Option<T>>, what: &str) -> Result<Vec<T>> {
    v.into_iter()
        .map(|x| {
            x.ok_or_else(|| {
                WeirError::Row(format!(
                    "null in a non-nullable {what} column (declare it as Option<{what}>)"
                ))
            })
        })
        .collect()
}

fn wrong_type(array: &dyn Array, want: DataType) -> WeirError {
    WeirError::Row(format!(
        "expected a {want} column, found {}",
        array.data_type()
    ))
}

macro_rules! prim_value {
    ($t:ty, $dt:expr, $arr:ty, $pt:ty, $name:literal) => {
        impl NullableArrowValue for $t {
            fn to_array_opt(values: Vec<Option<Self>>) -> ArrayRef {
                Arc::new(<$arr>::from(values))
            }
            fn from_array_opt(array: &dyn Array) -> Result<Vec<Option<Self>>> {
                let a = array
                    .as_primitive_opt::<$pt>()
                    .ok_or_else(|| wrong_type(array, $dt))?;
                Ok(a.iter().collect())
            }
        }
        impl ArrowValue for $t {
            const TYPE: DataType = $dt;
            fn to_array(values: Vec<Self>) -> ArrayRef {
                Arc::new(<$arr>::from(values))
            }
            fn from_array(array: &dyn Array) -> Result<Vec<Self>> {
                no_nulls(Self::from_array_opt(array)?, $name)
            }
        }
    };
}

prim_value!(i32, DataType::Int32, Int32Array, Int32Type, "i32");
prim_value!(i64, DataType::Int64, Int64Array, Int64Type, "i64");
prim_value!(f64, DataType::Float64, Float64Array, Float64Type, "f64");

impl NullableArrowValue for bool {
    fn to_array_opt(values: Vec<Option<Self>>) -> ArrayRef {
        Arc::new(BooleanArray::from(values))
    }
    fn from_array_opt(array: &dyn Array) -> Result<Vec<Option<Self>>> {
        let a = array
            .as_boolean_opt()
            .ok_or_else(|| wrong_type(array, DataType::Bool))?;
        Ok(a.iter().collect())
    }
}
impl ArrowValue for bool {
    const TYPE: DataType = DataType::Bool;
    fn to_array(values: Vec<Self>) -> ArrayRef {
        Arc::new(BooleanArray::from(values))
    }
    fn from_array(array: &dyn Array) -> Result<Vec<Self>> {
        no_nulls(Self::from_array_opt(array)?, "bool")
    }
}

impl NullableArrowValue for String {
    fn to_array_opt(values: Vec<Option<Self>>) -> ArrayRef {
        Arc::new(StringArray::from(values))
    }
    fn from_array_opt(array: &dyn Array) -> Result<Vec<Option<Self>>> {
        let a = arrow::compute::cast(&arrow::array::make_array(array.to_data()), &ArrowType::Utf8)
            .map_err(|_| wrong_type(array, DataType::String))?;
        Ok(a.as_string::<i32>()
            .iter()
            .map(|s| s.map(str::to_string))
            .collect())
    }
}
impl ArrowValue for String {
    const TYPE: DataType = DataType::String;
    fn to_array(values: Vec<Self>) -> ArrayRef {
        Arc::new(StringArray::from(values))
    }
    fn from_array(array: &dyn Array) -> Result<Vec<Self>> {
        no_nulls(Self::from_array_opt(array)?, "String")
    }
}

impl NullableArrowValue for Vec<u8> {
    fn to_array_opt(values: Vec<Option<Self>>) -> ArrayRef {
        Arc::new(BinaryArray::from_iter(values))
    }
    fn from_array_opt(array: &dyn Array) -> Result<Vec<Option<Self>>> {
        let a = array
            .as_binary_opt::<i32>()
            .ok_or_else(|| wrong_type(array, DataType::Binary))?;
        Ok(a.iter().map(|s| s.map(<[u8]>::to_vec)).collect())
    }
}
impl ArrowValue for Vec<u8> {
    const TYPE: DataType = DataType::Binary;
    fn to_array(values: Vec<Self>) -> ArrayRef {
        Self::to_array_opt(values.into_iter().map(Some).collect())
    }
    fn from_array(array: &dyn Array) -> Result<Vec<Self>> {
        no_nulls(Self::from_array_opt(array)?, "Vec<u8>")
    }
}

impl NullableArrowValue for Timestamp {
    fn to_array_opt(values: Vec<Option<Self>>) -> ArrayRef {
        Arc::new(
            TimestampMicrosecondArray::from(
                values
                    .into_iter()
                    .map(|v| v.map(|t| t.0))
                    .collect::<Vec<_>>(),
            )
            .with_timezone("UTC"),
        )
    }
    fn from_array_opt(array: &dyn Array) -> Result<Vec<Option<Self>>> {
        let a = arrow::compute::cast(
            &arrow::array::make_array(array.to_data()),
            &timestamp_type(),
        )
        .map_err(|_| wrong_type(array, DataType::Timestamp))?;
        Ok(a.as_primitive::<TimestampMicrosecondType>()
            .iter()
            .map(|v| v.map(Timestamp))
            .collect())
    }
}
impl ArrowValue for Timestamp {
    const TYPE: DataType = DataType::Timestamp;
    fn to_array(values: Vec<Self>) -> ArrayRef {
        Self::to_array_opt(values.into_iter().map(Some).collect())
    }
    fn from_array(array: &dyn Array) -> Result<Vec<Self>> {
        no_nulls(Self::from_array_opt(array)?, "Timestamp")
    }
}

impl NullableArrowValue for Window {
    fn to_array_opt(values: Vec<Option<Self>>) -> ArrayRef {
        let starts = Timestamp::to_array_opt(values.iter().map(|w| w.map(|w| w.start)).collect());
        let ends = Timestamp::to_array_opt(values.iter().map(|w| w.map(|w| w.end)).collect());
        let nulls =
            arrow::buffer::NullBuffer::from(values.iter().map(Option::is_some).collect::<Vec<_>>());
        Arc::new(StructArray::new(
            window_fields(),
            vec![starts, ends],
            Some(nulls),
        ))
    }
    fn from_array_opt(array: &dyn Array) -> Result<Vec<Option<Self>>> {
        let s = array
            .as_struct_opt()
            .ok_or_else(|| wrong_type(array, DataType::Window))?;
        if s.num_columns() != 2 {
            return Err(wrong_type(array, DataType::Window));
        }
        let starts = Timestamp::from_array_opt(s.column(0).as_ref())?;
        let ends = Timestamp::from_array_opt(s.column(1).as_ref())?;
        Ok((0..s.len())
            .map(|i| match (s.is_valid(i), starts[i], ends[i]) {
                (true, Some(start), Some(end)) => Some(Window { start, end }),
                _ => None,
            })
            .collect())
    }
}
impl ArrowValue for Window {
    const TYPE: DataType = DataType::Window;
    fn to_array(values: Vec<Self>) -> ArrayRef {
        Self::to_array_opt(values.into_iter().map(Some).collect())
    }
    fn from_array(array: &dyn Array) -> Result<Vec<Self>> {
        no_nulls(Self::from_array_opt(array)?, "Window")
    }
}

/// A scalar Rust type a list may hold: `Vec<T>` is an `array<T>` column
/// (what `collect_list` and `collect_set` return).
pub trait ElementValue: NullableArrowValue {
    /// The plan type of one value.
    const ELEMENT: ElementType;
}

impl ElementValue for i32 {
    const ELEMENT: ElementType = ElementType::Int32;
}
impl ElementValue for i64 {
    const ELEMENT: ElementType = ElementType::Int64;
}
impl ElementValue for f64 {
    const ELEMENT: ElementType = ElementType::Float64;
}
impl ElementValue for bool {
    const ELEMENT: ElementType = ElementType::Bool;
}
impl ElementValue for String {
    const ELEMENT: ElementType = ElementType::String;
}
impl ElementValue for Timestamp {
    const ELEMENT: ElementType = ElementType::Timestamp;
}
impl ElementValue for Vec<u8> {
    const ELEMENT: ElementType = ElementType::Binary;
}

impl<T: ElementValue> NullableArrowValue for Vec<T> {
    fn to_array_opt(values: Vec<Option<Self>>) -> ArrayRef {
        let nulls = values
            .iter()
            .any(Option::is_none)
            .then(|| NullBuffer::from(values.iter().map(Option::is_some).collect::<Vec<_>>()));
        let lengths: Vec<usize> = values
            .iter()
            .map(|v| v.as_ref().map_or(0, Vec::len))
            .collect();
        let items: Vec<Option<T>> = values.into_iter().flatten().flatten().map(Some).collect();
        Arc::new(ListArray::new(
            Arc::new(list_item(T::ELEMENT)),
            OffsetBuffer::from_lengths(lengths),
            T::to_array_opt(items),
            nulls,
        ))
    }
    fn from_array_opt(array: &dyn Array) -> Result<Vec<Option<Self>>> {
        let want = DataType::List(T::ELEMENT);
        let list = array
            .as_list_opt::<i32>()
            .filter(|_| plan_type(array.data_type()) == Some(want))
            .ok_or_else(|| wrong_type(array, want))?;
        (0..list.len())
            .map(|i| {
                if list.is_null(i) {
                    return Ok(None);
                }
                let items = T::from_array_opt(list.value(i).as_ref())?;
                items
                    .into_iter()
                    .map(|v| {
                        v.ok_or_else(|| {
                            WeirError::Row(format!(
                                "null in an element of a {want} column (weir's lists hold no nulls)"
                            ))
                        })
                    })
                    .collect::<Result<Vec<T>>>()
                    .map(Some)
            })
            .collect()
    }
}
impl<T: ElementValue> ArrowValue for Vec<T> {
    const TYPE: DataType = DataType::List(T::ELEMENT);
    fn to_array(values: Vec<Self>) -> ArrayRef {
        Self::to_array_opt(values.into_iter().map(Some).collect())
    }
    fn from_array(array: &dyn Array) -> Result<Vec<Self>> {
        no_nulls(Self::from_array_opt(array)?, "Vec<..>")
    }
}

/// A batch from plan fields and one array per field.
pub fn batch_from_arrays(fields: Vec<Field>, arrays: Vec<ArrayRef>) -> Result<RecordBatch> {
    let schema = arrow_schema(&fields);
    if arrays.is_empty() {
        return Ok(RecordBatch::new_empty(schema));
    }
    Ok(RecordBatch::try_new(schema, arrays)?)
}

/// The column `name` of a batch, or an error naming the columns it has.
pub fn column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a dyn Array> {
    match batch.schema().index_of(name) {
        Ok(i) => Ok(batch.column(i).as_ref()),
        Err(_) => Err(WeirError::Row(format!(
            "the batch has no column `{name}` (it has: {})",
            batch
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_is_a_struct_of_start_and_end() {
        assert!(is_window_type(&window_type()));
        assert_eq!(plan_type(&window_type()), Some(DataType::Window));
        let other = ArrowType::Struct(Fields::from(vec![
            ArrowField::new("from", timestamp_type(), true),
            ArrowField::new("to", timestamp_type(), true),
        ]));
        assert!(!is_window_type(&other));
        assert!(!is_window_type(&timestamp_type()));
    }

    #[test]
    fn values_round_trip_through_arrow() {
        let ts = vec![
            Timestamp::parse("2024-01-01T12:00:00Z").unwrap(),
            Timestamp(1),
        ];
        let back = Timestamp::from_array(Timestamp::to_array(ts.clone()).as_ref()).unwrap();
        assert_eq!(back, ts);
        let w = vec![Window {
            start: ts[1],
            end: ts[0],
        }];
        assert_eq!(
            Window::from_array(Window::to_array(w.clone()).as_ref()).unwrap(),
            w
        );
        let o = vec![Some(1i64), None];
        assert_eq!(
            <Option<i64>>::from_array(<Option<i64>>::to_array(o.clone()).as_ref()).unwrap(),
            o
        );
        let err = i64::from_array(<Option<i64>>::to_array(o).as_ref()).unwrap_err();
        assert!(err.to_string().contains("Option<i64>"), "{err}");
    }

    #[test]
    fn lists_round_trip_through_arrow_as_spark_arrays() {
        let t = DataType::List(ElementType::String);
        assert_eq!(
            arrow_type(t),
            ArrowType::List(Arc::new(ArrowField::new("item", ArrowType::Utf8, true)))
        );
        assert_eq!(plan_type(&arrow_type(t)), Some(t));
        let window_list = ArrowType::List(Arc::new(ArrowField::new("item", window_type(), true)));
        assert_eq!(plan_type(&window_list), None);
        let v = vec![vec!["a".to_string(), "b".into()], vec![], vec!["c".into()]];
        let a = <Vec<String>>::to_array(v.clone());
        assert_eq!(a.data_type(), &arrow_type(t));
        assert_eq!(<Vec<String>>::from_array(a.as_ref()).unwrap(), v);
        let ts = vec![vec![Timestamp(1), Timestamp(2)]];
        let a = <Vec<Timestamp>>::to_array(ts.clone());
        assert_eq!(
            a.data_type(),
            &arrow_type(DataType::List(ElementType::Timestamp))
        );
        assert_eq!(<Vec<Timestamp>>::from_array(a.as_ref()).unwrap(), ts);
        let o = vec![Some(vec![1i64]), None];
        let a = <Option<Vec<i64>>>::to_array(o.clone());
        assert_eq!(<Option<Vec<i64>>>::from_array(a.as_ref()).unwrap(), o);
        let err = <Vec<i64>>::from_array(a.as_ref()).unwrap_err();
        assert!(err.to_string().contains("Option<Vec<..>>"), "{err}");
        let bytes = vec![vec![vec![1u8, 2]]];
        let a = <Vec<Vec<u8>>>::to_array(bytes.clone());
        assert_eq!(<Vec<Vec<u8>>>::from_array(a.as_ref()).unwrap(), bytes);
        assert_eq!(<Vec<Vec<u8>>>::TYPE, DataType::List(ElementType::Binary));
        let wrong = <Vec<i32>>::from_array(a.as_ref()).unwrap_err();
        assert!(wrong.to_string().contains("array<int32>"), "{wrong}");
    }

    #[test]
    fn timestamps_print_like_spark() {
        assert_eq!(
            Timestamp::parse("2024-01-01T12:00:00Z")
                .unwrap()
                .to_string(),
            "2024-01-01 12:00:00"
        );
        assert_eq!(Timestamp(1_500_000).to_string(), "1970-01-01 00:00:01.5");
    }
}
