//! Decoding a payload column into typed columns: Spark's
//! `from_json(col("value").cast("string"), schema).select("data.*")` (and
//! `from_csv`) as a source adapter, so the decoded columns are typed in the
//! plan (the streaming rules and the `stream_query!` types see `page: String,
//! event_ts: Timestamp`, not an opaque struct).
//!
//! ```no_run
//! # #[cfg(feature = "kafka")] {
//! use weir_engine::source::{DecodeExt, KafkaSource};
//! use weir_plan::{DataType, Field};
//!
//! let clicks = KafkaSource::new("127.0.0.1:9092")
//!     .subscribe("clicks")
//!     .from_json("value", vec![
//!         Field::new("page", DataType::String),
//!         Field::new("event_ts", DataType::Timestamp),
//!     ])
//!     .keep(&["partition", "offset"]);
//! // rows: page, event_ts, _corrupt_record, partition, offset
//! # }
//! ```
//!
//! Each record of the column (binary or string) is parsed on its own: a
//! malformed one never fails the batch. In PERMISSIVE mode (the default, as
//! in Spark) it becomes a row of nulls with its raw text in
//! `_corrupt_record`; DROPMALFORMED drops it; FAILFAST fails the query
//! naming the record. A null payload is a row of nulls and is not malformed
//! (Spark's `from_json(null)`). Malformed records are counted per batch in
//! the progress metric `malformedRecords` and in total, over committed
//! batches, by [`Decode::malformed_counter`].
//!
//! JSON: one object per record; unknown keys are ignored; a value of the
//! wrong type makes the record malformed, except that a number or boolean
//! in a string field is kept as its text (as Spark keeps it; an object or
//! array there is malformed, where Spark keeps its JSON text). Timestamps
//! are ISO-8601 strings (`2024-01-01T12:00:00Z`, `2024-01-01 12:00:00`, UTC
//! unless an offset is given) or integers of seconds since the epoch, as
//! Spark reads them (see `json_time`). CSV: one line per record, no header,
//! the fields in schema order.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, StringArray, UInt32Array};
use arrow::datatypes::{DataType, Field as ArrowField, Schema, SchemaRef};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use weir_plan::Field;

pub use super::file::ParseMode;
use super::{json_decoders, json_record, json_time, BoxSource, Offset, Source, SourceContext};
use crate::error::{Result, WeirError};

/// The payload's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadFormat {
    /// One JSON object per record.
    Json,
    /// One CSV line per record (fields in schema order, no header).
    Csv {
        /// The field delimiter (`,` by default).
        delimiter: u8,
    },
}

/// A source whose payload column is decoded into typed columns.
pub struct Decode {
    /// The source read (behind a lock only so the decoder can be shared
    /// with the batch's decode tasks; `get_mut` costs nothing).
    inner: std::sync::Mutex<BoxSource>,
    column: String,
    format: PayloadFormat,
    parse_schema: SchemaRef,
    keep: Vec<String>,
    mode: ParseMode,
    corrupt_column: String,
    schema: SchemaRef,
    error: Option<String>,
    malformed_batch: u64,
    /// Malformed records of committed batches.
    malformed_total: Arc<AtomicU64>,
    /// Each read's malformed records, until its batch commits.
    malformed_waiting: super::read_counts::ReadCounts,
    /// JSON decoders kept from batch to batch (JSON only).
    json: json_decoders::JsonDecoders,
}

/// `from_json` / `from_csv` on any source.
// Named after Spark's `from_json`/`from_csv` functions, not conversions.
#[allow(clippy::wrong_self_convention)]
pub trait DecodeExt: Source + Sized + 'static {
    /// Decodes `column` (binary or string) as JSON objects with `fields`
    /// (Spark's `from_json(col, schema)` followed by `select("data.*")`).
    fn from_json(self, column: &str, fields: Vec<Field>) -> Decode {
        Decode::new(self, column, PayloadFormat::Json, fields)
    }

    /// Decodes `column` as one CSV line per record with `fields` (Spark's `from_csv`).
    fn from_csv(self, column: &str, fields: Vec<Field>) -> Decode {
        Decode::new(self, column, PayloadFormat::Csv { delimiter: b',' }, fields)
    }
}

impl<S: Source + 'static> DecodeExt for S {}

impl Decode {
    /// Decodes `column` of `inner`'s rows in `format` into `fields`.
    pub fn new(
        inner: impl Into<BoxSource>,
        column: &str,
        format: PayloadFormat,
        fields: Vec<Field>,
    ) -> Decode {
        let parse_schema = crate::row::arrow_schema(&fields);
        let mut d = Decode {
            inner: std::sync::Mutex::new(inner.into()),
            column: column.to_string(),
            format,
            json: json_decoders::JsonDecoders::new(parse_schema.clone()),
            parse_schema,
            keep: Vec::new(),
            mode: ParseMode::Permissive,
            corrupt_column: "_corrupt_record".into(),
            schema: Arc::new(Schema::empty()),
            error: None,
            malformed_batch: 0,
            malformed_total: Arc::new(AtomicU64::new(0)),
            malformed_waiting: Default::default(),
        };
        d.rebuild();
        d
    }

    /// Keeps these columns of the inner source after the decoded ones (e.g.
    /// the Kafka source's `partition`, `offset`, `timestamp`).
    pub fn keep(mut self, columns: &[&str]) -> Self {
        self.keep = columns.iter().map(|c| c.to_string()).collect();
        self.rebuild();
        self
    }

    /// How malformed records are handled (default PERMISSIVE, as in Spark).
    pub fn mode(mut self, mode: ParseMode) -> Self {
        self.mode = mode;
        self.rebuild();
        self
    }

    /// The name of the raw-text column of malformed records in PERMISSIVE
    /// mode (Spark's `columnNameOfCorruptRecord`, default `_corrupt_record`).
    pub fn corrupt_record_column(mut self, name: &str) -> Self {
        self.corrupt_column = name.to_string();
        self.rebuild();
        self
    }

    /// The CSV field delimiter (CSV only).
    pub fn delimiter(mut self, d: u8) -> Self {
        if let PayloadFormat::Csv { delimiter } = &mut self.format {
            *delimiter = d;
        }
        self
    }

    /// A shared count of the malformed records in committed batches, each
    /// batch counted once however often it was read (it stays readable
    /// after the source is handed to a query).
    pub fn malformed_counter(&self) -> Arc<AtomicU64> {
        self.malformed_total.clone()
    }

    fn rebuild(&mut self) {
        let inner = self.inner_mut().schema();
        let mut fields: Vec<ArrowField> = self
            .parse_schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        self.error = None;
        match inner.field_with_name(&self.column) {
            Ok(f)
                if matches!(
                    f.data_type(),
                    DataType::Binary
                        | DataType::LargeBinary
                        | DataType::Utf8
                        | DataType::LargeUtf8
                        | DataType::Utf8View
                        | DataType::BinaryView
                ) => {}
            Ok(f) => {
                self.error = Some(format!(
                    "column `{}` is {}, not binary or string",
                    self.column,
                    f.data_type()
                ))
            }
            Err(_) => self.error = Some(format!("the source has no column `{}`", self.column)),
        }
        if self.mode == ParseMode::Permissive
            && self.parse_schema.index_of(&self.corrupt_column).is_err()
        {
            fields.push(ArrowField::new(&self.corrupt_column, DataType::Utf8, true));
        }
        for k in &self.keep {
            if fields.iter().any(|f| f.name() == k) {
                self.error.get_or_insert(format!(
                    "kept column `{k}` clashes with a decoded column of that name"
                ));
                continue;
            }
            match inner.field_with_name(k) {
                Ok(f) => fields.push(f.clone()),
                Err(_) => {
                    self.error
                        .get_or_insert(format!("cannot keep `{k}`: the source has no such column"));
                }
            }
        }
        self.schema = Arc::new(Schema::new(fields));
    }

    fn inner_mut(&mut self) -> &mut BoxSource {
        self.inner.get_mut().unwrap_or_else(|e| e.into_inner())
    }

    fn err(&self, message: String) -> WeirError {
        WeirError::Source {
            source_name: self.description(),
            message,
        }
    }

    /// Decodes every record of `records` in one pass; errors when any is
    /// malformed. Each record must yield exactly one row on its own: the
    /// records are fed one at a time and the decoder's row count is checked
    /// after each, so a record holding two rows next to one holding none
    /// (or a record left open and closed by the next) cannot pass as two
    /// good rows with their values shifted.
    fn decode_all(&self, records: &[&[u8]]) -> std::result::Result<RecordBatch, String> {
        let n = records.len();
        let one_row = |k: usize, used: usize, len: usize, rows: usize, partial: bool| {
            if used != len || rows != k + 1 || partial {
                Err(format!(
                    "record {k} is not exactly one {} record",
                    match self.format {
                        PayloadFormat::Json => "JSON",
                        PayloadFormat::Csv { .. } => "CSV",
                    }
                ))
            } else {
                Ok(())
            }
        };
        let batch = match self.format {
            PayloadFormat::Json => {
                let mut lease = self.json.lease(n)?;
                let dec = lease.decoder();
                // Each record straight from its message: a record that is
                // one JSON object ends the decoder's row at its last byte.
                for (k, r) in records.iter().enumerate() {
                    json_record::check_json_object(r)?;
                    let used = dec.decode(r).map_err(|e| e.to_string())?;
                    one_row(k, used, r.len(), dec.len(), dec.has_partial_record())?;
                }
                let batch = dec.flush().map_err(|e| e.to_string())?;
                lease.flushed();
                match batch {
                    Some(b) => json_time::to_timestamps(b, &self.parse_schema)?,
                    None => RecordBatch::new_empty(self.parse_schema.clone()),
                }
            }
            PayloadFormat::Csv { delimiter } => {
                let mut dec = arrow::csv::ReaderBuilder::new(self.parse_schema.clone())
                    .with_header(false)
                    .with_delimiter(delimiter)
                    .with_batch_size(n.max(1))
                    .build_decoder();
                // A CSV record needs its line end: one buffer of them all.
                let mut buf = Vec::with_capacity(records.iter().map(|r| r.len() + 1).sum());
                let mut ends = Vec::with_capacity(n);
                for r in records {
                    buf.extend_from_slice(r);
                    buf.push(b'\n');
                    ends.push(buf.len());
                }
                let mut start = 0;
                for (k, end) in ends.iter().enumerate() {
                    let used = dec.decode(&buf[start..*end]).map_err(|e| e.to_string())?;
                    one_row(k, used, end - start, n.max(1) - dec.capacity(), false)?;
                    start = *end;
                }
                dec.flush()
                    .map_err(|e| e.to_string())?
                    .unwrap_or_else(|| RecordBatch::new_empty(self.parse_schema.clone()))
            }
        };
        if batch.num_rows() != n {
            return Err(format!("{} rows from {n} records", batch.num_rows()));
        }
        Ok(batch)
    }

    /// One record alone: `Err` when malformed.
    fn check_one(&self, record: &[u8]) -> std::result::Result<(), String> {
        self.decode_all(&[record]).map(|_| ())
    }

    /// Decodes one batch; also returns how many of its records were malformed.
    fn decode_batch(&self, batch: &RecordBatch) -> Result<(RecordBatch, u64)> {
        let col = batch.column(batch.schema().index_of(&self.column)?).clone();
        let col = arrow::compute::cast(&col, &DataType::Binary)?;
        let values = col.as_binary::<i32>();
        let n = batch.num_rows();
        let candidates: Vec<usize> = (0..n).filter(|i| values.is_valid(*i)).collect();
        let records: Vec<&[u8]> = candidates.iter().map(|i| values.value(*i)).collect();
        // Fast path: all records at once; on any failure find the bad ones.
        let (decoded, bad): (RecordBatch, Vec<(usize, String)>) = match self.decode_all(&records) {
            Ok(b) => (b, vec![]),
            Err(_) => {
                let mut good = Vec::new();
                let mut good_rows = Vec::new();
                let mut bad = Vec::new();
                for (k, r) in records.iter().enumerate() {
                    match self.check_one(r) {
                        Ok(()) => {
                            good.push(*r);
                            good_rows.push(candidates[k]);
                        }
                        Err(e) => bad.push((candidates[k], e)),
                    }
                }
                let d = self
                    .decode_all(&good)
                    .map_err(|e| self.err(format!("decoding well-formed records failed: {e}")))?;
                (d, bad)
            }
        };
        let malformed = bad.len() as u64;
        if !bad.is_empty() {
            if self.mode == ParseMode::FailFast {
                let (i, e) = &bad[0];
                return Err(self.err(format!(
                    "malformed record in `{}` (row {i} of the batch: `{}`): {e} (mode FAILFAST; use PERMISSIVE to keep going)",
                    self.column,
                    String::from_utf8_lossy(values.value(*i))
                )));
            }
            tracing::warn!(column = %self.column, count = bad.len(), first = %bad[0].1, "malformed records");
        }
        let bad_set: BTreeMap<usize, &String> = bad.iter().map(|(i, e)| (*i, e)).collect();
        // Where each output row comes from, in `decoded` and in the input:
        // none when every record decoded, in order (no null payload, none
        // malformed), so the columns are the output as they are. Otherwise
        // all rows, or those not malformed (DROPMALFORMED).
        let picks = (decoded.num_rows() != n).then(|| {
            let rows: Vec<usize> = match self.mode {
                ParseMode::DropMalformed => (0..n).filter(|i| !bad_set.contains_key(i)).collect(),
                _ => (0..n).collect(),
            };
            let mut pos = vec![None; n];
            let mut j = 0u32;
            for (i, p) in pos.iter_mut().enumerate() {
                if values.is_valid(i) && !bad_set.contains_key(&i) {
                    *p = Some(j);
                    j += 1;
                }
            }
            let in_decoded = UInt32Array::from(rows.iter().map(|i| pos[*i]).collect::<Vec<_>>());
            let in_input = UInt32Array::from(rows.iter().map(|i| *i as u32).collect::<Vec<_>>());
            (rows, in_decoded, in_input)
        });
        let in_decoded = picks.as_ref().map(|(_, d, _)| d);
        let in_input = picks.as_ref().map(|(.., i)| i);
        let pick = |c: &ArrayRef, at: Option<&UInt32Array>| -> Result<ArrayRef> {
            Ok(match at {
                None => c.clone(),
                Some(at) => arrow::compute::take(c.as_ref(), at, None)?,
            })
        };
        let mut cols: Vec<ArrayRef> = Vec::new();
        for c in decoded.columns() {
            cols.push(pick(c, in_decoded)?);
        }
        if self.mode == ParseMode::Permissive
            && self.parse_schema.index_of(&self.corrupt_column).is_err()
        {
            cols.push(match &picks {
                None => arrow::array::new_null_array(&DataType::Utf8, n),
                Some((rows, ..)) => Arc::new(
                    rows.iter()
                        .map(|i| {
                            bad_set
                                .contains_key(i)
                                .then(|| String::from_utf8_lossy(values.value(*i)).into_owned())
                        })
                        .collect::<StringArray>(),
                ),
            });
        }
        for k in &self.keep {
            cols.push(pick(batch.column(batch.schema().index_of(k)?), in_input)?);
        }
        let num_rows = picks.as_ref().map_or(n, |(rows, ..)| rows.len());
        let out = RecordBatch::try_new_with_options(
            self.schema.clone(),
            cols,
            &RecordBatchOptions::new().with_row_count(Some(num_rows)),
        )?;
        Ok((out, malformed))
    }
}

impl Source for Decode {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn description(&self) -> String {
        self.inner
            .lock()
            .map(|s| s.description())
            .unwrap_or_else(|e| e.into_inner().description())
    }

    fn open(&mut self, ctx: &SourceContext) -> Result<()> {
        if let Some(e) = &self.error {
            return Err(self.err(e.clone()));
        }
        self.inner_mut().open(ctx)
    }

    fn use_clock(&mut self, clock: std::sync::Arc<dyn crate::clock::Clock>) {
        self.inner_mut().use_clock(clock)
    }

    fn open_on(&mut self, ctx: &SourceContext, storage: &super::SourceStorage) -> Result<()> {
        if let Some(e) = &self.error {
            return Err(self.err(e.clone()));
        }
        self.inner_mut().open_on(ctx, storage)
    }

    fn log_on_storage(&self) -> bool {
        self.inner
            .lock()
            .map(|s| s.log_on_storage())
            .unwrap_or_else(|e| e.into_inner().log_on_storage())
    }

    fn reads_ahead(&self) -> bool {
        self.inner
            .lock()
            .map(|s| s.reads_ahead())
            .unwrap_or_else(|e| e.into_inner().reads_ahead())
    }

    fn latest_offset(&mut self, start: Option<&Offset>) -> Result<Option<Offset>> {
        self.malformed_batch = 0;
        self.inner_mut().latest_offset(start)
    }

    fn get_batch(&mut self, start: Option<&Offset>, end: &Offset) -> Result<Vec<RecordBatch>> {
        self.malformed_batch = 0;
        let batches = self.inner_mut().get_batch(start, end)?;
        // Each batch read (a Kafka partition's records, say) is decoded as
        // its own task on the worker pool this runs in.
        use rayon::prelude::*;
        let this = &*self;
        let decoded: Vec<(RecordBatch, u64)> = if batches.len() > 1 {
            batches
                .par_iter()
                .map(|b| this.decode_batch(b))
                .collect::<Result<_>>()?
        } else {
            batches
                .iter()
                .map(|b| this.decode_batch(b))
                .collect::<Result<_>>()?
        };
        self.malformed_batch += decoded.iter().map(|(_, n)| n).sum::<u64>();
        self.malformed_waiting.read(end, self.malformed_batch);
        Ok(decoded.into_iter().map(|(b, _)| b).collect())
    }

    fn commit(&mut self, end: &Offset) -> Result<()> {
        let n = self.malformed_waiting.committed(end);
        self.malformed_total.fetch_add(n, Ordering::Relaxed);
        self.inner_mut().commit(end)
    }

    fn shared_input(&self) -> Result<super::SharedInput> {
        self.inner
            .lock()
            .map(|s| s.shared_input())
            .unwrap_or_else(|e| e.into_inner().shared_input())
    }

    fn for_partitions(&self, partitions: &[(String, i32)]) -> Result<BoxSource> {
        if let Some(e) = &self.error {
            return Err(self.err(e.clone()));
        }
        let inner = self
            .inner
            .lock()
            .map(|s| s.for_partitions(partitions))
            .unwrap_or_else(|e| e.into_inner().for_partitions(partitions))?;
        // The same decoding, a new counter: each task reports its own.
        let mut d = Decode {
            inner: std::sync::Mutex::new(inner),
            column: self.column.clone(),
            format: self.format,
            parse_schema: self.parse_schema.clone(),
            keep: self.keep.clone(),
            mode: self.mode,
            corrupt_column: self.corrupt_column.clone(),
            schema: self.schema.clone(),
            error: None,
            malformed_batch: 0,
            malformed_total: Arc::new(AtomicU64::new(0)),
            malformed_waiting: Default::default(),
            json: json_decoders::JsonDecoders::new(self.parse_schema.clone()),
        };
        d.rebuild();
        Ok(Box::new(d))
    }

    fn prepare_for_available_now(&mut self) -> Result<()> {
        self.inner_mut().prepare_for_available_now()
    }

    fn metrics(&self) -> BTreeMap<String, String> {
        let mut m = self
            .inner
            .lock()
            .map(|s| s.metrics())
            .unwrap_or_else(|e| e.into_inner().metrics());
        m.insert("malformedRecords".into(), self.malformed_batch.to_string());
        m
    }

    fn stop(&mut self) {
        self.inner_mut().stop()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::MemoryStream;
    use arrow::array::BinaryArray;
    use weir_plan::DataType as T;

    fn payloads(values: &[Option<&str>]) -> RecordBatch {
        let a = BinaryArray::from_iter(values.iter().map(|v| v.map(|s| s.as_bytes())));
        let schema = Arc::new(Schema::new(vec![
            ArrowField::new("value", DataType::Binary, true),
            ArrowField::new("offset", DataType::Int64, true),
        ]));
        let offs = arrow::array::Int64Array::from_iter_values(0..values.len() as i64);
        RecordBatch::try_new(schema, vec![Arc::new(a), Arc::new(offs)]).unwrap()
    }

    fn fields() -> Vec<Field> {
        vec![Field::new("page", T::String), Field::new("n", T::Int64)]
    }

    fn source() -> MemoryStream {
        MemoryStream::with_schema(payloads(&[]).schema())
    }

    #[test]
    fn malformed_json_becomes_nulls_with_the_raw_text() {
        let d = source().from_json("value", fields()).keep(&["offset"]);
        let b = payloads(&[
            Some(r#"{"page":"/a","n":1}"#),
            Some("{not json"),
            None,
            Some(r#"{"page":"/b","n":"x"}"#),
            Some("7"),
            Some(r#"{"page":"/c","extra":true}"#),
        ]);
        let (out, malformed) = d.decode_batch(&b).unwrap();
        let schema = out.schema();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["page", "n", "_corrupt_record", "offset"]);
        let page = out.column(0).as_string::<i32>();
        assert_eq!(page.value(0), "/a");
        assert!(page.is_null(1) && page.is_null(2) && page.is_null(3) && page.is_null(4));
        assert_eq!(page.value(5), "/c");
        let raw = out.column(2).as_string::<i32>();
        assert_eq!(raw.value(1), "{not json");
        assert!(raw.is_null(2), "a null payload is not malformed");
        assert_eq!(raw.value(4), "7");
        assert_eq!(malformed, 3);
        // (`malformedRecords` in progress sums the batches get_batch decodes:
        // tests/it/kafka.rs checks it through a real query.)
        let offs = out.column(3).as_primitive::<arrow::datatypes::Int64Type>();
        assert_eq!(offs.values().to_vec(), vec![0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn json_reads_numbers_as_spark_does() {
        // An integer timestamp is seconds since the epoch; a number in a
        // string field is its text; a fraction where a time belongs spoils
        // the record, which alone is malformed.
        let d = source().from_json(
            "value",
            vec![
                Field::new("page", T::String),
                Field::new("ts", T::Timestamp),
            ],
        );
        let b = payloads(&[
            Some(r#"{"page":"/a","ts":1700000000}"#),
            Some(r#"{"page":7,"ts":"2023-11-14T22:13:20.25Z"}"#),
            Some(r#"{"page":"/c","ts":1.5}"#),
        ]);
        let (out, malformed) = d.decode_batch(&b).unwrap();
        assert_eq!(malformed, 1);
        let page = out.column(0).as_string::<i32>();
        assert_eq!((page.value(0), page.value(1)), ("/a", "7"));
        assert!(page.is_null(2));
        let ts = out
            .column(1)
            .as_primitive::<arrow::datatypes::TimestampMicrosecondType>();
        assert_eq!(ts.value(0), 1_700_000_000_000_000);
        assert_eq!(ts.value(1), 1_700_000_000_250_000);
        assert!(ts.is_null(2));
        assert_eq!(
            out.schema().field(1).data_type(),
            &crate::row::timestamp_type()
        );
        assert_eq!(
            out.column(2).as_string::<i32>().value(2),
            r#"{"page":"/c","ts":1.5}"#
        );
    }

    #[test]
    fn malformed_records_count_in_total_once_per_committed_batch() {
        use crate::source::Source;
        let m = source();
        m.add_batch(payloads(&[Some("{bad"), Some(r#"{"page":"/a","n":1}"#)]))
            .unwrap();
        m.add_batch(payloads(&[Some("x"), Some("y")])).unwrap();
        let mut d = m.from_json("value", fields());
        let total = d.malformed_counter();
        let (b0, b1) = (Offset::from(0), Offset::from(1));
        d.get_batch(None, &b0).unwrap();
        // The next batch read ahead, then read again by the batch itself.
        d.get_batch(Some(&b0), &b1).unwrap();
        d.get_batch(Some(&b0), &b1).unwrap();
        assert_eq!(total.load(Ordering::Relaxed), 0, "nothing committed yet");
        d.commit(&b0).unwrap();
        assert_eq!(total.load(Ordering::Relaxed), 1);
        d.commit(&b1).unwrap();
        assert_eq!(total.load(Ordering::Relaxed), 3);
        // A batch committed again (a no-data batch) adds nothing.
        d.commit(&b1).unwrap();
        assert_eq!(total.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn clean_batches_around_a_malformed_one_decode_alone() {
        // One source decodes three batches in turn (its decoders are kept
        // between them): clean, one malformed record, clean.
        let d = source().from_json("value", fields()).keep(&["offset"]);
        let check_clean = |b: &RecordBatch, pages: &[&str]| {
            let (out, malformed) = d.decode_batch(b).unwrap();
            assert_eq!(malformed, 0);
            let page = out.column(0).as_string::<i32>();
            assert_eq!(page.iter().flatten().collect::<Vec<_>>(), pages);
            let n = out.column(1).as_primitive::<arrow::datatypes::Int64Type>();
            assert_eq!(n.values().len(), pages.len());
            assert_eq!(out.column(2).null_count(), pages.len(), "no corrupt record");
            let offs = out.column(3).as_primitive::<arrow::datatypes::Int64Type>();
            assert_eq!(
                offs.values().to_vec(),
                (0..pages.len() as i64).collect::<Vec<_>>()
            );
        };
        check_clean(
            &payloads(&[
                Some(r#"{"page":"/a","n":1}"#),
                Some(r#"{"page":"/b","n":2}"#),
            ]),
            &["/a", "/b"],
        );
        let (out, malformed) = d
            .decode_batch(&payloads(&[
                Some(r#"{"page":"/c","n":3}"#),
                Some(r#"{"page":"/d","n":"#),
            ]))
            .unwrap();
        assert_eq!(malformed, 1);
        assert_eq!(out.column(0).as_string::<i32>().value(0), "/c");
        check_clean(&payloads(&[Some(r#"{"page":"/e","n":5}"#)]), &["/e"]);
    }

    #[test]
    fn drop_and_failfast_modes() {
        let b = payloads(&[Some(r#"{"page":"/a","n":1}"#), Some("oops")]);
        let d = source()
            .from_json("value", fields())
            .mode(ParseMode::DropMalformed);
        let out = d.decode_batch(&b).unwrap().0;
        assert_eq!(out.num_rows(), 1);
        assert_eq!(out.num_columns(), 2);
        let d = source()
            .from_json("value", fields())
            .mode(ParseMode::FailFast);
        let e = d.decode_batch(&b).unwrap_err().to_string();
        assert!(e.contains("oops") && e.contains("FAILFAST"), "{e}");
    }

    #[test]
    fn csv_payloads() {
        let b = payloads(&[Some("/a,1"), Some("/b,2,3"), Some("/c,x")]);
        let d = source().from_csv("value", fields());
        let (out, malformed) = d.decode_batch(&b).unwrap();
        assert_eq!(out.column(0).as_string::<i32>().value(0), "/a");
        assert_eq!(malformed, 2);
    }

    #[test]
    fn a_json_record_is_malformed_on_its_own_not_by_its_neighbours() {
        // Two objects in one record next to an empty record: as many rows
        // as records when decoded together, but neither is one object.
        let b = payloads(&[
            Some(r#"{"page":"/x"} {"page":"/y"}"#),
            Some(""),
            Some(r#"{"page":"/z","n":3}"#),
        ]);
        let d = source().from_json("value", fields());
        let (out, malformed) = d.decode_batch(&b).unwrap();
        assert_eq!(out.num_rows(), 3);
        let raw = out.column(2).as_string::<i32>();
        assert_eq!(raw.value(0), r#"{"page":"/x"} {"page":"/y"}"#);
        assert!(raw.is_valid(1), "an empty record is malformed");
        assert!(raw.is_null(2));
        let page = out.column(0).as_string::<i32>();
        assert!(
            page.is_null(0) && page.is_null(1),
            "no value shifts to another record"
        );
        assert_eq!(page.value(2), "/z");
        assert_eq!(malformed, 2);
        let d = source()
            .from_json("value", fields())
            .mode(ParseMode::DropMalformed);
        let out = d.decode_batch(&b).unwrap().0;
        assert_eq!(out.num_rows(), 1);
        assert_eq!(out.column(0).as_string::<i32>().value(0), "/z");
    }

    #[test]
    fn a_json_record_serde_refuses_is_malformed_whatever_its_neighbours() {
        // A number out of range, a lone surrogate, commas missing or out of
        // place (Arrow's decoder takes commas as whitespace) and a raw tab
        // in a string: malformed alone, so malformed in a batch of good
        // records too.
        let odd = [
            r#"{"page":"/b","x":1e400}"#,
            r#"{"page":"\ud800"}"#,
            r#"{,"page":"/b"}"#,
            r#"{"page":"/b" "n":1}"#,
            r#"{"page":"/b","x":[1,,2]}"#,
            "{\"page\":\"/b\tc\"}",
        ];
        for rec in odd {
            let alone = payloads(&[Some(rec), Some("oops")]);
            let together = payloads(&[Some(r#"{"page":"/a","n":1}"#), Some(rec)]);
            let d = source().from_json("value", fields());
            let out = d.decode_batch(&alone).unwrap().0;
            assert!(
                out.column(2).is_valid(0),
                "{rec} is malformed next to a bad record"
            );
            let out = d.decode_batch(&together).unwrap().0;
            assert!(
                out.column(2).is_valid(1),
                "{rec} is malformed next to a good record"
            );
            assert_eq!(out.column(0).as_string::<i32>().value(0), "/a");
        }
    }

    #[test]
    fn a_csv_record_is_malformed_on_its_own_not_by_its_neighbours() {
        // An open quote closed by the next record, and a record of two
        // lines: three rows from three records when decoded together.
        let b = payloads(&[Some("\"/a"), Some("b\",1"), Some("/c,2\n/d,3")]);
        let d = source().from_csv("value", fields());
        let (out, malformed) = d.decode_batch(&b).unwrap();
        assert_eq!(out.num_rows(), 3);
        let raw = out.column(2).as_string::<i32>();
        assert_eq!(raw.value(0), "\"/a");
        assert!(raw.is_valid(2), "a record of two lines is malformed");
        let page = out.column(0).as_string::<i32>();
        assert_eq!(page.value(1), "b\"", "the second record, read alone");
        assert!(page.is_null(0) && page.is_null(2));
        assert_eq!(malformed, 2);
    }

    #[test]
    fn bad_columns_fail_at_open() {
        let mut d = source().from_json("nope", fields());
        let e = d
            .open(&SourceContext {
                metadata_dir: std::env::temp_dir(),
                sync: false,
                default_parallelism: 1,
            })
            .unwrap_err();
        assert!(e.to_string().contains("no column `nope`"), "{e}");
        let d = source().from_json("value", fields()).keep(&["page"]);
        assert!(d.error.unwrap().contains("clashes"));
    }
}
