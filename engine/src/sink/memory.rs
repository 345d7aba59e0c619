//! The memory sink (Spark's `memory` format): results kept in memory as a
//! table named after the query, readable with [`crate::Session::memory_table`].
//! Append and update modes add each batch's rows; complete mode replaces the
//! table. A re-run batch id replaces what that batch wrote.

use std::sync::{Arc, Mutex};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use weir_plan::OutputMode;

use super::{Sink, SinkContext};
use crate::error::Result;

#[derive(Default)]
struct Inner {
    schema: Option<SchemaRef>,
    mode: OutputMode,
    batches: Vec<(i64, Vec<RecordBatch>)>,
}

/// A memory table: every batch the sink received, by batch id.
#[derive(Clone, Default)]
pub struct MemoryTable {
    inner: Arc<Mutex<Inner>>,
}

impl std::fmt::Debug for MemoryTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryTable")
            .field("batches", &self.inner.lock().unwrap().batches.len())
            .finish()
    }
}

impl MemoryTable {
    /// Each batch's rows, by batch id (empty batches included).
    pub fn batches(&self) -> Vec<(i64, Vec<RecordBatch>)> {
        self.inner.lock().unwrap().batches.clone()
    }

    /// The table as a query sees it now: all rows in append/update mode, the
    /// last batch's rows in complete mode.
    pub fn rows(&self) -> Vec<RecordBatch> {
        let i = self.inner.lock().unwrap();
        match i.mode {
            OutputMode::Complete => i.batches.last().map(|b| b.1.clone()).unwrap_or_default(),
            _ => i.batches.iter().flat_map(|b| b.1.clone()).collect(),
        }
    }

    /// The schema, once the query has started.
    pub fn schema(&self) -> Option<SchemaRef> {
        self.inner.lock().unwrap().schema.clone()
    }

    /// Number of rows in [`MemoryTable::rows`].
    pub fn num_rows(&self) -> usize {
        self.rows().iter().map(|b| b.num_rows()).sum()
    }
}

/// Writes into a [`MemoryTable`].
pub struct MemorySink {
    name: Option<String>,
    table: MemoryTable,
}

impl MemorySink {
    /// A sink whose table is registered in the session under `name`
    /// (empty: the query name).
    pub fn new(name: &str) -> MemorySink {
        MemorySink {
            name: (!name.is_empty()).then(|| name.to_string()),
            table: MemoryTable::default(),
        }
    }

    /// The table this sink writes (readable while the query runs).
    pub fn table(&self) -> MemoryTable {
        self.table.clone()
    }
}

impl Sink for MemorySink {
    fn kind(&self) -> weir_plan::SinkKind {
        weir_plan::SinkKind::Memory
    }

    fn description(&self) -> String {
        format!("MemorySink[{}]", self.name.as_deref().unwrap_or(""))
    }

    fn open(&mut self, ctx: &SinkContext) -> Result<()> {
        {
            let mut i = self.table.inner.lock().unwrap();
            i.schema = Some(ctx.schema.clone());
            i.mode = ctx.output_mode;
        }
        let name = self.name.clone().or_else(|| ctx.query_name.clone());
        if let Some(n) = name {
            ctx.memory_tables
                .lock()
                .unwrap()
                .insert(n, self.table.clone());
        }
        Ok(())
    }

    fn add_batch(&mut self, batch_id: i64, batches: &[RecordBatch]) -> Result<()> {
        let mut i = self.table.inner.lock().unwrap();
        i.batches.retain(|(id, _)| *id != batch_id);
        i.batches.push((batch_id, batches.to_vec()));
        i.batches.sort_by_key(|b| b.0);
        Ok(())
    }
}
