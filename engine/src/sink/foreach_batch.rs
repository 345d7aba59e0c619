//! `foreach_batch`: a closure receives each micro-batch's id and rows
//! (Spark's `foreachBatch`). The id lets the closure write idempotently: a
//! batch re-run after a crash arrives with the same id.

use arrow::record_batch::RecordBatch;

use super::Sink;
use crate::error::Result;

/// The closure type.
pub type BatchFn = Box<dyn FnMut(i64, &[RecordBatch]) -> Result<()> + Send>;

/// Calls a closure per batch.
pub struct ForeachBatchSink {
    f: BatchFn,
}

impl ForeachBatchSink {
    /// A sink calling `f(batch_id, rows)`.
    pub fn new(
        f: impl FnMut(i64, &[RecordBatch]) -> Result<()> + Send + 'static,
    ) -> ForeachBatchSink {
        ForeachBatchSink { f: Box::new(f) }
    }
}

impl Sink for ForeachBatchSink {
    fn kind(&self) -> weir_plan::SinkKind {
        weir_plan::SinkKind::ForeachBatch
    }

    fn description(&self) -> String {
        "ForeachBatchSink".into()
    }

    fn add_batch(&mut self, batch_id: i64, batches: &[RecordBatch]) -> Result<()> {
        (self.f)(batch_id, batches)
    }
}
