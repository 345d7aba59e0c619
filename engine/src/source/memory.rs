//! A source tests push batches into (Spark's `MemoryStream`). Each
//! `add_*` call is one offset: an empty push is still a micro-batch.
//! Clones share the data, so the same stream survives a query restart.

use std::sync::{Arc, Mutex};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use weir_plan::Field;

use super::{Offset, Source};
use crate::error::{Result, WeirError};
use crate::row::{arrow_schema, Row};

/// A replayable in-memory stream.
#[derive(Clone)]
pub struct MemoryStream {
    schema: SchemaRef,
    data: Arc<Mutex<Vec<RecordBatch>>>,
}

impl MemoryStream {
    /// A stream of rows with these columns.
    pub fn new(fields: &[Field]) -> MemoryStream {
        MemoryStream::with_schema(arrow_schema(fields))
    }

    /// A stream of rows with this Arrow schema.
    pub fn with_schema(schema: SchemaRef) -> MemoryStream {
        MemoryStream {
            schema,
            data: Arc::default(),
        }
    }

    /// A stream of typed rows.
    pub fn of<R: Row>() -> MemoryStream {
        MemoryStream::new(&R::fields())
    }

    /// Adds one batch (one future offset); returns its offset.
    pub fn add_batch(&self, batch: RecordBatch) -> Result<i64> {
        let batch = if batch.schema() == self.schema {
            batch
        } else {
            let cols = self
                .schema
                .fields()
                .iter()
                .map(|f| {
                    let c = crate::row::column(&batch, f.name())?;
                    Ok(arrow::compute::cast(
                        &arrow::array::make_array(c.to_data()),
                        f.data_type(),
                    )?)
                })
                .collect::<Result<Vec<_>>>()?;
            RecordBatch::try_new_with_options(
                self.schema.clone(),
                cols,
                &arrow::record_batch::RecordBatchOptions::new()
                    .with_row_count(Some(batch.num_rows())),
            )?
        };
        let mut d = self.data.lock().unwrap();
        d.push(batch);
        Ok(d.len() as i64 - 1)
    }

    /// Adds typed rows as one batch.
    pub fn add_rows<R: Row>(&self, rows: &[R]) -> Result<i64> {
        self.add_batch(R::to_batch(rows)?)
    }

    /// Adds JSON objects (one per row) as one batch; timestamps as RFC 3339 strings.
    pub fn add_json(&self, rows: &[serde_json::Value]) -> Result<i64> {
        let mut dec = arrow::json::ReaderBuilder::new(self.schema.clone()).build_decoder()?;
        dec.serialize(rows)?;
        let batch = dec
            .flush()?
            .unwrap_or_else(|| RecordBatch::new_empty(self.schema.clone()));
        self.add_batch(batch)
    }

    /// Number of batches added.
    pub fn len(&self) -> usize {
        self.data.lock().unwrap().len()
    }

    /// True when nothing was added.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn as_index(o: &Offset) -> Result<i64> {
    o.as_i64().ok_or_else(|| WeirError::Source {
        source_name: "MemoryStream".into(),
        message: format!("bad offset {o}"),
    })
}

impl Source for MemoryStream {
    /// Yes: it keeps no log: its data lives in the process.
    fn log_on_storage(&self) -> bool {
        true
    }
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn description(&self) -> String {
        "MemoryStream".into()
    }
    /// Yes: it reads from memory and writes nothing.
    fn reads_ahead(&self) -> bool {
        true
    }
    fn latest_offset(&mut self, _start: Option<&Offset>) -> Result<Option<Offset>> {
        let n = self.len();
        Ok((n > 0).then(|| Offset::from(n as i64 - 1)))
    }
    fn get_batch(&mut self, start: Option<&Offset>, end: &Offset) -> Result<Vec<RecordBatch>> {
        let from = match start {
            Some(s) => as_index(s)? + 1,
            None => 0,
        };
        let to = as_index(end)?;
        let d = self.data.lock().unwrap();
        if to as usize >= d.len() {
            return Err(WeirError::Source {
                source_name: "MemoryStream".into(),
                message: format!("offset {to} was logged but the stream holds {} batches (a memory stream does not survive the process)", d.len()),
            });
        }
        Ok(d[from.max(0) as usize..=to as usize].to_vec())
    }
}

/// The memory source is not built from options: its rows are handed in at
/// run time ([`super::from_options`] says so).
pub(super) fn from_options(
    _o: &super::SourceOptions,
) -> std::result::Result<super::BoxSource, weir_plan::connectors::OptionError> {
    Err(weir_plan::connectors::OptionError {
        option: "memory".into(),
        message: "the memory source takes its rows at run time".into(),
        help: "build it with MemoryStream::new(fields) and add rows with add_rows or add_batch"
            .into(),
    })
}
