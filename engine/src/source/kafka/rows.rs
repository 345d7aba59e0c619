//! The Kafka source's rows: Spark's schema and the Arrow builders a batch's
//! records are appended to, one [`Cursor`] per partition range.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BinaryBuilder, Int32Builder, Int64Builder, ListBuilder, StringBuilder, StructBuilder,
    TimestampMicrosecondBuilder,
};
use arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use rdkafka::message::{Headers, Message, Timestamp as KafkaTimestamp};

use super::TopicPartition;
use crate::error::Result;

/// Rows per Arrow batch while reading a partition.
const ROWS_PER_BATCH: usize = 65_536;

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

/// The Kafka source's row schema (Spark's), with or without `headers`.
pub fn kafka_schema(include_headers: bool) -> SchemaRef {
    let mut fields = vec![
        Field::new("key", DataType::Binary, true),
        Field::new("value", DataType::Binary, true),
        Field::new("topic", DataType::Utf8, true),
        Field::new("partition", DataType::Int32, true),
        Field::new("offset", DataType::Int64, true),
        Field::new("timestamp", crate::row::timestamp_type(), true),
        Field::new("timestampType", DataType::Int32, true),
    ];
    if include_headers {
        fields.push(Field::new("headers", headers_type(), true));
    }
    Arc::new(Schema::new(fields))
}

/// One partition's range being read, and its rows so far.
pub(super) struct Cursor {
    pub(super) tp: TopicPartition,
    pub(super) next: i64,
    pub(super) to: i64,
    rows: Rows,
    full: Vec<RecordBatch>,
}

impl Cursor {
    pub(super) fn new(tp: TopicPartition, from: i64, to: i64, headers: bool) -> Cursor {
        Cursor {
            tp,
            next: from,
            to,
            rows: Rows::new(headers),
            full: Vec::new(),
        }
    }

    pub(super) fn done(&self) -> bool {
        self.next >= self.to
    }

    pub(super) fn push<M: Message>(&mut self, m: &M) -> Result<()> {
        self.rows.push(m);
        if self.rows.len >= ROWS_PER_BATCH {
            let headers = self.rows.headers.is_some();
            let r = std::mem::replace(&mut self.rows, Rows::new(headers));
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
    fn new(headers: bool) -> Rows {
        Rows {
            len: 0,
            key: BinaryBuilder::new(),
            value: BinaryBuilder::new(),
            topic: StringBuilder::new(),
            partition: Int32Builder::new(),
            offset: Int64Builder::new(),
            timestamp: TimestampMicrosecondBuilder::new().with_timezone("UTC"),
            timestamp_type: Int32Builder::new(),
            headers: headers.then(|| {
                ListBuilder::new(StructBuilder::from_fields(header_fields(), 0)).with_field(
                    Arc::new(Field::new("item", DataType::Struct(header_fields()), true)),
                )
            }),
        }
    }

    fn push<M: Message>(&mut self, m: &M) {
        self.len += 1;
        self.key.append_option(m.key());
        self.value.append_option(m.payload());
        self.topic.append_value(m.topic());
        self.partition.append_value(m.partition());
        self.offset.append_value(m.offset());
        let (ts, kind) = match m.timestamp() {
            KafkaTimestamp::CreateTime(ms) => (Some(ms * 1000), 0),
            KafkaTimestamp::LogAppendTime(ms) => (Some(ms * 1000), 1),
            KafkaTimestamp::NotAvailable => (None, -1),
        };
        self.timestamp.append_option(ts);
        self.timestamp_type.append_value(kind);
        if let Some(hb) = &mut self.headers {
            if let Some(hs) = m.headers() {
                for i in 0..hs.count() {
                    let h = hs.get(i);
                    let sb = hb.values();
                    sb.field_builder::<StringBuilder>(0)
                        .expect("key builder")
                        .append_value(h.key);
                    sb.field_builder::<BinaryBuilder>(1)
                        .expect("value builder")
                        .append_option(h.value);
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
