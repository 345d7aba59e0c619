//! JSON timestamps read as Spark reads them (`JacksonParser`): a string is
//! parsed as a date-time (as Arrow's JSON decoder parses it: ISO-8601,
//! `2024-01-01 12:00:00`, UTC unless an offset is given), and an integer
//! number is seconds since the epoch. Arrow's decoder alone would take an
//! integer as microseconds, a million times too early, without an error.
//!
//! So the decoder ([`reader_builder`]) reads each top-level timestamp field
//! as text ([`text_schema`], with numbers kept as their text, as in any
//! string field: Spark keeps a number or boolean there as its text), and
//! [`to_timestamps`] turns the text into the schema's timestamps; a value
//! that is neither (a fraction, a boolean, text that is no date-time, an
//! integer whose microseconds overflow) fails the record, which is then
//! malformed like a value of the wrong type. One difference with Spark
//! remains: a string of digits (`"1700000000"`) reads as seconds too,
//! where Spark refuses it. Only top-level fields are read this way: a
//! timestamp inside a list is still Arrow's (an integer as microseconds).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, TimestampMicrosecondArray};
use arrow::compute::kernels::cast_utils::string_to_datetime;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow::json::ReaderBuilder;
use arrow::record_batch::RecordBatch;

/// Whether a field is a timestamp read through text.
fn is_time(f: &Field) -> bool {
    matches!(f.data_type(), DataType::Timestamp(TimeUnit::Microsecond, _))
}

/// Arrow's JSON reader for rows of `schema` as Spark reads them: its
/// timestamps as text, a number or boolean in a text field as its text.
/// What it reads goes through [`to_timestamps`].
pub(crate) fn reader_builder(schema: &SchemaRef) -> ReaderBuilder {
    ReaderBuilder::new(text_schema(schema).unwrap_or_else(|| schema.clone()))
        .with_coerce_primitive(true)
}

/// `schema` with its top-level timestamp fields as text: the schema the
/// JSON decoder reads (with `coerce_primitive`, so a number arrives as its
/// text). `None` when it has none (the decoder then reads `schema` itself).
fn text_schema(schema: &SchemaRef) -> Option<SchemaRef> {
    if !schema.fields().iter().any(|f| is_time(f)) {
        return None;
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| {
            if is_time(f) {
                Field::new(f.name(), DataType::Utf8, true)
            } else {
                f.as_ref().clone()
            }
        })
        .collect();
    Some(Arc::new(Schema::new_with_metadata(
        fields,
        schema.metadata().clone(),
    )))
}

/// The rows `read` (by [`reader_builder`]`(schema)`) with their timestamp
/// fields as `schema` has them (as they are, when it has none); `Err` names
/// the first value that is not a time.
pub(crate) fn to_timestamps(read: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, String> {
    if !schema.fields().iter().any(|f| is_time(f)) {
        return Ok(read);
    }
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(read.num_columns());
    for (f, c) in schema.fields().iter().zip(read.columns()) {
        if !is_time(f) {
            columns.push(c.clone());
            continue;
        }
        let text = c.as_string::<i32>();
        // The text's nulls are the times' (a null's slot holds 0).
        let mut micros = vec![0i64; text.len()];
        for (i, m) in micros.iter_mut().enumerate() {
            if text.is_valid(i) {
                *m = micros_of(text.value(i)).map_err(|e| format!("`{}`: {e}", f.name()))?;
            }
        }
        let times = TimestampMicrosecondArray::new(micros.into(), text.nulls().cloned());
        let times = match f.data_type() {
            DataType::Timestamp(_, Some(tz)) => times.with_timezone(tz.clone()),
            _ => times,
        };
        columns.push(Arc::new(times));
    }
    RecordBatch::try_new(schema.clone(), columns).map_err(|e| e.to_string())
}

/// One value's microseconds since the epoch: an integer is seconds.
fn micros_of(text: &str) -> Result<i64, String> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse::<i64>()
            .ok()
            .and_then(|s| s.checked_mul(1_000_000))
            .ok_or_else(|| format!("{text} seconds is out of the timestamp range"));
    }
    string_to_datetime(&chrono::Utc, text)
        .map(|t| t.timestamp_micros())
        .map_err(|e| format!("cannot read {text:?} as a timestamp: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("page", DataType::Utf8, true),
            Field::new("ts", crate::row::timestamp_type(), true),
        ]))
    }

    /// Decodes `records` as `from_json` does: through the text schema.
    fn decode(records: &[&str]) -> Result<RecordBatch, String> {
        let schema = schema();
        let mut dec = reader_builder(&schema).build_decoder().unwrap();
        for r in records {
            dec.decode(r.as_bytes()).map_err(|e| e.to_string())?;
        }
        to_timestamps(dec.flush().unwrap().unwrap(), &schema)
    }

    fn times(b: &RecordBatch) -> Vec<Option<i64>> {
        b.column(1)
            .as_primitive::<arrow::datatypes::TimestampMicrosecondType>()
            .iter()
            .collect()
    }

    #[test]
    fn an_integer_is_seconds_and_a_string_a_date_time() {
        let b = decode(&[
            r#"{"page":"/a","ts":1700000000}"#,
            r#"{"page":"/b","ts":"2023-11-14T22:13:20Z"}"#,
            r#"{"page":"/c","ts":"2023-11-14 22:13:20.5"}"#,
            r#"{"page":"/d","ts":-1}"#,
            r#"{"page":"/e"}"#,
            r#"{"page":"/f","ts":null}"#,
        ])
        .unwrap();
        assert_eq!(
            times(&b),
            vec![
                Some(1_700_000_000_000_000),
                Some(1_700_000_000_000_000),
                Some(1_700_000_000_500_000),
                Some(-1_000_000),
                None,
                None
            ]
        );
        assert_eq!(b.schema(), schema());
    }

    #[test]
    fn a_value_that_is_not_a_time_fails_the_record() {
        for bad in [
            r#"{"ts":1.5}"#,
            r#"{"ts":true}"#,
            r#"{"ts":"not a time"}"#,
            r#"{"ts":9223372036854775807}"#,
        ] {
            let err = decode(&[bad]).expect_err(bad);
            assert!(err.contains("`ts`"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_schema_without_timestamps_is_read_as_it_is() {
        let s = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, true)]));
        assert!(text_schema(&s).is_none());
    }
}
