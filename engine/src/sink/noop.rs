//! Spark's `noop` sink (`writeStream.format("noop")`): each batch is
//! computed and handed to it, and it writes nothing. For benchmarks: the
//! query runs as it would, its progress counts the rows, no output costs
//! time. Any output mode.

use arrow::record_batch::RecordBatch;
use weir_plan::connectors::OptionError;
use weir_plan::OutputMode;

use super::{BoxSink, Sink};
use crate::error::Result;

/// Consumes every batch and writes nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoopSink;

impl NoopSink {
    /// The sink.
    pub fn new() -> NoopSink {
        NoopSink
    }
}

impl Sink for NoopSink {
    fn kind(&self) -> weir_plan::SinkKind {
        weir_plan::SinkKind::Noop
    }

    fn description(&self) -> String {
        "org.apache.spark.sql.execution.datasources.noop.NoopTable$".into()
    }

    fn add_batch(&mut self, _batch_id: i64, _batches: &[RecordBatch]) -> Result<()> {
        Ok(())
    }

    fn for_task(&self, _task: &str, _mode: OutputMode) -> Result<BoxSink> {
        Ok(Box::new(NoopSink))
    }
}

/// `format("noop")`: no options.
pub(super) fn from_options(_: &super::SinkOptions) -> std::result::Result<BoxSink, OptionError> {
    Ok(Box::new(NoopSink))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    #[test]
    fn takes_any_batch_in_any_mode_and_divides() {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let batch =
            RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(vec![1, 2]))])
                .unwrap();
        for mode in [OutputMode::Append, OutputMode::Update, OutputMode::Complete] {
            let mut s = NoopSink::new();
            s.open(&super::super::SinkContext::for_tests(
                None,
                mode,
                schema.clone(),
            ))
            .unwrap();
            s.add_batch(0, std::slice::from_ref(&batch)).unwrap();
            s.add_batch(0, std::slice::from_ref(&batch)).unwrap();
            assert!(s.for_task("t0", mode).is_ok());
        }
        assert_eq!(NoopSink.kind(), weir_plan::SinkKind::Noop);
    }
}
