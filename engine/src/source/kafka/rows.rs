//! The Kafka source's rows: Spark's schema and the Arrow builders a batch's
//! records are appended to, one [`Cursor`] per partition range.
//!
//! No record can stop the query (a poison pill fails every replay of its
//! batch): a record whose timestamp does not fit a microsecond timestamp
//! (`ms * 1000` overflows `i64`) gets a null `timestamp` (its
//! `timestampType` kept), and a header key that is not UTF-8 is decoded
//! lossily (invalid bytes become U+FFFD). Both are kept and counted in the
//! batch's `invalidTimestamps` and `invalidHeaderKeys` metrics.

use std::borrow::Cow;
use std::ffi::CStr;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BinaryBuilder, Int32Builder, Int64Builder, ListBuilder, StringBuilder, StructBuilder,
    TimestampMicrosecondBuilder,
};
use arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use rdkafka::bindings as rdsys;
use rdkafka::message::{BorrowedHeaders, Headers, Message, Timestamp as KafkaTimestamp};

use super::TopicPartition;
use crate::error::Result;

/// Rows per Arrow batch while reading a partition.
const ROWS_PER_BATCH: usize = 65_536;
/// The most value bytes a chunk's builder reserves up front (large records
/// grow it as they come, not by a guess).
const MAX_VALUE_RESERVE: usize = 32 << 20;

/// The Arrow type of the `headers` column: `list<struct<key: utf8, value: binary>>`.
pub fn headers_type() -> DataType {
    DataType::List(Arc::new(Field::new(
        "item",
        DataType::Struct(header_fields()),
        true,
    )))
}

fn header_fields() -> Fields {
    Fields::from(vec![
        Field::new("key", DataType::Utf8, true),
        Field::new("value", DataType::Binary, true),
    ])
}

/// The Kafka source's row schema (Spark's, from the connector table's
/// [`weir_plan::connectors::KAFKA_SCHEMA`]), with or without `headers`.
/// Every column is nullable in Arrow, as the engine's schemas are.
pub fn kafka_schema(include_headers: bool) -> SchemaRef {
    let mut fields: Vec<Field> = weir_plan::connectors::KAFKA_SCHEMA
        .iter()
        .map(|f| Field::new(f.name, crate::row::arrow_type(f.dtype), true))
        .collect();
    if include_headers {
        fields.push(Field::new(
            weir_plan::connectors::KAFKA_HEADERS,
            headers_type(),
            true,
        ));
    }
    Arc::new(Schema::new(fields))
}

/// Records kept despite bad data (counted per batch).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Repaired {
    /// Records whose timestamp overflows microseconds (`timestamp` null).
    pub(super) timestamps: u64,
    /// Header keys that were not UTF-8 (decoded lossily).
    pub(super) header_keys: u64,
}

impl Repaired {
    pub(super) fn add(&mut self, o: Repaired) {
        self.timestamps += o.timestamps;
        self.header_keys += o.header_keys;
    }
}

/// A record timestamp (epoch ms) as epoch microseconds; `None` (a null
/// `timestamp`) when it does not fit in `i64`.
pub(super) fn timestamp_micros(ms: i64) -> Option<i64> {
    ms.checked_mul(1000)
}

/// Header `idx`: its key (lossily decoded when it is not UTF-8) and value.
/// Read through librdkafka directly: rdkafka's `Headers::try_get` panics on
/// a key that is not UTF-8.
pub(super) fn header_at(hs: &BorrowedHeaders, idx: usize) -> Option<(Cow<'_, str>, Option<&[u8]>)> {
    // rdkafka's `BorrowedHeaders` is a zero-sized view whose address is the
    // native `rd_kafka_headers_t` (it casts the same way in `try_get`).
    let native = hs as *const BorrowedHeaders as *const rdsys::rd_kafka_headers_t;
    let mut name = std::ptr::null();
    let mut value = std::ptr::null();
    let mut size = 0usize;
    // SAFETY: `native` is a live headers list borrowed from `hs`; librdkafka
    // writes a NUL-terminated name and a value pointer (null for a null
    // value) that live as long as the headers.
    let err =
        unsafe { rdsys::rd_kafka_header_get_all(native, idx, &mut name, &mut value, &mut size) };
    if err != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || name.is_null() {
        return None;
    }
    // SAFETY: as above; both borrow from `hs`.
    let key = String::from_utf8_lossy(unsafe { CStr::from_ptr(name) }.to_bytes());
    let value =
        (!value.is_null()).then(|| unsafe { std::slice::from_raw_parts(value as *const u8, size) });
    Some((key, value))
}

/// One partition's range being read, and its rows so far.
pub(super) struct Cursor {
    pub(super) tp: TopicPartition,
    pub(super) next: i64,
    pub(super) to: i64,
    /// Records kept despite bad data so far.
    pub(super) repaired: Repaired,
    rows: Rows,
    full: Vec<RecordBatch>,
    /// Value bytes per record expected (sizes the builders up front).
    value_hint: usize,
    /// Records pushed, and their value bytes.
    pushed: usize,
    value_bytes: usize,
}

impl Cursor {
    /// Reads `[from, to)` of `tp`; `value_hint` is the value bytes per record
    /// expected (the partition's last read), so that the column builders
    /// are allocated once at their size rather than grown by doubling.
    pub(super) fn new(
        tp: TopicPartition,
        from: i64,
        to: i64,
        headers: bool,
        value_hint: usize,
    ) -> Cursor {
        let rows = Rows::new(headers, Self::chunk(from, to), &tp.0, value_hint);
        Cursor {
            tp,
            next: from,
            to,
            repaired: Repaired::default(),
            rows,
            full: Vec::new(),
            value_hint,
            pushed: 0,
            value_bytes: 0,
        }
    }

    /// Records of the next chunk of `[from, to)`.
    fn chunk(from: i64, to: i64) -> usize {
        usize::try_from(to.saturating_sub(from))
            .unwrap_or(0)
            .min(ROWS_PER_BATCH)
    }

    /// Value bytes per record read so far (the hint until a record is read).
    pub(super) fn value_bytes_per_record(&self) -> usize {
        match self.pushed {
            0 => self.value_hint,
            n => self.value_bytes.div_ceil(n),
        }
    }

    pub(super) fn done(&self) -> bool {
        self.next >= self.to
    }

    pub(super) fn push<M>(&mut self, m: &M) -> Result<()>
    where
        M: Message<Headers = BorrowedHeaders>,
    {
        self.rows.push(m, &self.tp.0, &mut self.repaired);
        self.pushed += 1;
        self.value_bytes += m.payload().map_or(0, <[u8]>::len);
        if self.rows.len >= ROWS_PER_BATCH {
            let headers = self.rows.headers.is_some();
            let next = Rows::new(
                headers,
                Self::chunk(m.offset() + 1, self.to),
                &self.tp.0,
                self.value_bytes_per_record(),
            );
            let r = std::mem::replace(&mut self.rows, next);
            self.full.push(r.finish()?);
        }
        Ok(())
    }

    pub(super) fn finish(mut self) -> Result<Vec<RecordBatch>> {
        if self.rows.len > 0 {
            self.full.push(self.rows.finish()?);
        }
        Ok(self.full)
    }
}

/// Column builders for the Kafka row schema.
struct Rows {
    len: usize,
    key: BinaryBuilder,
    value: BinaryBuilder,
    topic: StringBuilder,
    partition: Int32Builder,
    offset: Int64Builder,
    timestamp: TimestampMicrosecondBuilder,
    timestamp_type: Int32Builder,
    headers: Option<ListBuilder<StructBuilder>>,
}

impl Rows {
    /// Builders for `rows` records of `topic` with about `value_bytes`
    /// each (keys are not sized: mostly short or absent).
    fn new(headers: bool, rows: usize, topic: &str, value_bytes: usize) -> Rows {
        Rows {
            len: 0,
            key: BinaryBuilder::with_capacity(rows, 0),
            value: BinaryBuilder::with_capacity(
                rows,
                rows.saturating_mul(value_bytes).min(MAX_VALUE_RESERVE),
            ),
            topic: StringBuilder::with_capacity(rows, rows.saturating_mul(topic.len())),
            partition: Int32Builder::with_capacity(rows),
            offset: Int64Builder::with_capacity(rows),
            timestamp: TimestampMicrosecondBuilder::with_capacity(rows).with_timezone("UTC"),
            timestamp_type: Int32Builder::with_capacity(rows),
            headers: headers.then(|| {
                ListBuilder::new(StructBuilder::from_fields(header_fields(), 0)).with_field(
                    Arc::new(Field::new("item", DataType::Struct(header_fields()), true)),
                )
            }),
        }
    }

    /// Appends record `m` of `topic` (the reader's one topic: not asked of
    /// librdkafka per record).
    fn push<M>(&mut self, m: &M, topic: &str, repaired: &mut Repaired)
    where
        M: Message<Headers = BorrowedHeaders>,
    {
        self.len += 1;
        self.key.append_option(m.key());
        self.value.append_option(m.payload());
        self.topic.append_value(topic);
        self.partition.append_value(m.partition());
        self.offset.append_value(m.offset());
        let (ms, kind) = match m.timestamp() {
            KafkaTimestamp::CreateTime(ms) => (Some(ms), 0),
            KafkaTimestamp::LogAppendTime(ms) => (Some(ms), 1),
            KafkaTimestamp::NotAvailable => (None, -1),
        };
        let ts = ms.and_then(timestamp_micros);
        if ms.is_some() && ts.is_none() {
            repaired.timestamps += 1;
        }
        self.timestamp.append_option(ts);
        self.timestamp_type.append_value(kind);
        if let Some(hb) = &mut self.headers {
            if let Some(hs) = m.headers() {
                for i in 0..hs.count() {
                    let Some((key, value)) = header_at(hs, i) else {
                        continue;
                    };
                    if matches!(key, Cow::Owned(_)) {
                        repaired.header_keys += 1;
                    }
                    let sb = hb.values();
                    sb.field_builder::<StringBuilder>(0)
                        .expect("key builder")
                        .append_value(key);
                    sb.field_builder::<BinaryBuilder>(1)
                        .expect("value builder")
                        .append_option(value);
                    sb.append(true);
                }
            }
            hb.append(true);
        }
    }

    fn finish(mut self) -> Result<RecordBatch> {
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(self.key.finish()),
            Arc::new(self.value.finish()),
            Arc::new(self.topic.finish()),
            Arc::new(self.partition.finish()),
            Arc::new(self.offset.finish()),
            Arc::new(self.timestamp.finish()),
            Arc::new(self.timestamp_type.finish()),
        ];
        let headers = self.headers.is_some();
        if let Some(hb) = &mut self.headers {
            cols.push(Arc::new(hb.finish()));
        }
        Ok(RecordBatch::try_new(kafka_schema(headers), cols)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::message::OwnedHeaders;

    /// Headers with raw (possibly not UTF-8) keys, as another client may
    /// produce them (rdkafka's own `insert` only takes `&str` keys).
    fn raw_headers(items: &[(&[u8], Option<&[u8]>)]) -> OwnedHeaders {
        let h = OwnedHeaders::new();
        let native = h.as_borrowed() as *const BorrowedHeaders as *mut rdsys::rd_kafka_headers_t;
        for (k, v) in items {
            let (vp, vl) = match v {
                Some(v) => (v.as_ptr() as *const std::ffi::c_void, v.len() as isize),
                None => (std::ptr::null(), 0),
            };
            // SAFETY: `native` is the live headers list `h` owns; librdkafka
            // copies the name and value.
            let err = unsafe {
                rdsys::rd_kafka_header_add(native, k.as_ptr().cast(), k.len() as isize, vp, vl)
            };
            assert_eq!(err, rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR);
        }
        h
    }

    #[test]
    fn a_header_key_that_is_not_utf8_is_decoded_lossily_not_a_panic() {
        let h = raw_headers(&[
            (b"ok", Some(b"v")),
            (b"bad\xff\xfe", None),
            (b"", Some(b"")),
        ]);
        let hs = h.as_borrowed();
        // rdkafka's own accessor panics on the second key: the poison pill.
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = hs.try_get(1);
        }));
        assert!(panicked.is_err(), "rdkafka's try_get no longer panics");
        let (k, v) = header_at(hs, 0).unwrap();
        assert_eq!((k.as_ref(), v), ("ok", Some(&b"v"[..])));
        assert!(matches!(k, Cow::Borrowed(_)));
        let (k, v) = header_at(hs, 1).unwrap();
        assert_eq!((k.as_ref(), v), ("bad\u{fffd}\u{fffd}", None));
        assert!(matches!(k, Cow::Owned(_)), "counted as repaired");
        let (k, v) = header_at(hs, 2).unwrap();
        assert_eq!((k.as_ref(), v), ("", Some(&b""[..])));
        assert!(header_at(hs, 3).is_none());
    }

    #[test]
    fn a_timestamp_that_overflows_microseconds_is_null() {
        assert_eq!(
            timestamp_micros(1_700_000_000_123),
            Some(1_700_000_000_123_000)
        );
        assert_eq!(
            timestamp_micros(i64::MAX / 1000),
            Some(i64::MAX / 1000 * 1000)
        );
        assert_eq!(timestamp_micros(i64::MAX / 1000 + 1), None);
        assert_eq!(timestamp_micros(i64::MAX), None);
        assert_eq!(timestamp_micros(i64::MIN / 1000 - 1), None);
    }
}
