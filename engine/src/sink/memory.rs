//! The memory sink (Spark's `memory` format): results kept in memory as a
//! table named after the query, readable with [`crate::Session::memory_table`].
//! Append and update modes add each batch's rows; complete mode replaces the
//! table. A re-run batch id replaces what that batch wrote.

use std::collections::HashMap;
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

/// The memory tables of a session by name: a memory sink registers its
/// table here when its query starts; [`crate::Session::memory_table`] reads
/// it. Clones share the registry.
#[derive(Clone, Default)]
pub struct MemoryTables {
    tables: Arc<Mutex<HashMap<String, MemoryTable>>>,
}

impl std::fmt::Debug for MemoryTables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tables = self.tables.lock().unwrap();
        let mut names: Vec<&String> = tables.keys().collect();
        names.sort();
        f.debug_struct("MemoryTables")
            .field("names", &names)
            .finish()
    }
}

impl MemoryTables {
    /// Registers `table` under `name`, replacing a table of that name (a
    /// query restarted under the same name writes a new table).
    pub fn register(&self, name: String, table: MemoryTable) {
        self.tables.lock().unwrap().insert(name, table);
    }

    /// The table registered under `name`.
    pub fn get(&self, name: &str) -> Option<MemoryTable> {
        self.tables.lock().unwrap().get(name).cloned()
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

/// `format("memory")`: `queryName` (default: the query's name).
pub(super) fn from_options(
    o: &super::SinkOptions,
) -> std::result::Result<super::BoxSink, weir_plan::connectors::OptionError> {
    Ok(Box::new(MemorySink::new(o.get("queryName").unwrap_or(""))))
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
            ctx.memory_tables.register(n, self.table.clone());
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn rows(values: &[i64]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(values.to_vec()))]).unwrap()
    }

    fn context(query: Option<&str>, tables: &MemoryTables) -> SinkContext {
        let mut ctx = SinkContext::for_tests(query, OutputMode::Append, rows(&[]).schema());
        ctx.memory_tables = tables.clone();
        ctx
    }

    #[test]
    fn a_started_sink_registers_its_table_under_the_query_name() {
        let tables = MemoryTables::default();
        let mut sink = MemorySink::new("");
        sink.open(&context(Some("counts"), &tables)).unwrap();
        sink.add_batch(0, &[rows(&[1, 2])]).unwrap();
        let table = tables
            .get("counts")
            .expect("registered under the query name");
        assert_eq!(table.num_rows(), 2);
        assert!(tables.get("other").is_none());
    }

    #[test]
    fn the_sinks_own_name_wins_over_the_query_name() {
        let tables = MemoryTables::default();
        let mut sink = MemorySink::new("mine");
        sink.open(&context(Some("counts"), &tables)).unwrap();
        assert!(tables.get("mine").is_some());
        assert!(tables.get("counts").is_none());
    }

    #[test]
    fn a_restarted_query_replaces_the_table_of_its_name() {
        let tables = MemoryTables::default();
        let mut first = MemorySink::new("");
        first.open(&context(Some("counts"), &tables)).unwrap();
        first.add_batch(0, &[rows(&[1])]).unwrap();
        let mut second = MemorySink::new("");
        second.open(&context(Some("counts"), &tables)).unwrap();
        assert_eq!(tables.get("counts").unwrap().num_rows(), 0);
        second.add_batch(0, &[rows(&[1, 2, 3])]).unwrap();
        assert_eq!(tables.get("counts").unwrap().num_rows(), 3);
    }

    #[test]
    fn clones_of_the_registry_share_its_tables() {
        let tables = MemoryTables::default();
        let seen_by_session = tables.clone();
        tables.register("t".into(), MemoryTable::default());
        assert!(seen_by_session.get("t").is_some());
    }

    #[test]
    fn an_unnamed_sink_of_an_unnamed_query_registers_nothing() {
        let tables = MemoryTables::default();
        let mut sink = MemorySink::new("");
        sink.open(&context(None, &tables)).unwrap();
        assert_eq!(format!("{tables:?}"), "MemoryTables { names: [] }");
    }
}
