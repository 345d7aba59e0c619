//! `foreach`: a writer called once per row (Spark's `foreach` sink with a
//! `ForeachWriter`): `open(partition_id, epoch_id)` before a batch's rows
//! (return `false` to skip them, e.g. when that epoch was written before),
//! `process(row)` per row, typed, and `close(error)` after them, also when
//! `open` or `process` failed (Spark promises `close` after every `open`
//! that returns; weir also calls it after one that fails). weir runs a
//! micro-batch as one partition, 0, with one writer for every batch (Spark
//! copies the writer per task); the epoch id is the batch id, the same when
//! a batch is re-run after a crash.
//!
//! ```
//! use weir_engine::sink::ForeachWriter;
//!
//! /// Counts rows once each: an epoch written before (a batch re-run after
//! /// a crash) is skipped.
//! struct Counter { rows: usize, written: i64, current: i64 }
//!
//! impl<R> ForeachWriter<R> for Counter {
//!     fn open(&mut self, _partition: i64, epoch: i64) -> weir_engine::Result<bool> {
//!         self.current = epoch;
//!         Ok(epoch > self.written)
//!     }
//!     fn process(&mut self, _row: R) -> weir_engine::Result<()> {
//!         self.rows += 1;
//!         Ok(())
//!     }
//!     fn close(&mut self, error: Option<&weir_engine::WeirError>) {
//!         if error.is_none() {
//!             self.written = self.written.max(self.current);
//!         }
//!     }
//! }
//! ```
//!
//! With `stream_query!`: `sink: foreach(Counter { rows: 0, written: -1, current: 0 })`
//! (the rows are the query's result row struct), or a closure per row with
//! [`row_fn`].

use std::marker::PhantomData;

use arrow::record_batch::RecordBatch;

use super::Sink;
use crate::error::{Result, WeirError};
use crate::row::Row;

/// Spark's `ForeachWriter`, for rows of type `R`.
pub trait ForeachWriter<R>: Send {
    /// Before a batch's rows (Spark: per partition and epoch). `false`
    /// skips them; `close` is called either way.
    fn open(&mut self, partition_id: i64, epoch_id: i64) -> Result<bool> {
        let _ = (partition_id, epoch_id);
        Ok(true)
    }

    /// One row.
    fn process(&mut self, row: R) -> Result<()>;

    /// After the rows, with the error that ended them, if one did (the
    /// error then fails the query).
    fn close(&mut self, error: Option<&WeirError>) {
        let _ = error;
    }
}

/// A closure per row as a [`ForeachWriter`] (see [`row_fn`]).
pub struct RowFn<F>(F);

/// A [`ForeachWriter`] calling `f` for each row.
pub fn row_fn<R, F>(f: F) -> RowFn<F>
where
    F: FnMut(R) -> Result<()> + Send,
{
    RowFn(f)
}

impl<R, F> ForeachWriter<R> for RowFn<F>
where
    F: FnMut(R) -> Result<()> + Send,
{
    fn process(&mut self, row: R) -> Result<()> {
        (self.0)(row)
    }
}

/// The `foreach` sink: each row, as an `R`, to a [`ForeachWriter`].
pub struct ForeachSink<R, W> {
    writer: W,
    rows: PhantomData<fn() -> R>,
}

impl<R: Row, W: ForeachWriter<R>> ForeachSink<R, W> {
    /// A sink handing each row to `writer`.
    pub fn new(writer: W) -> ForeachSink<R, W> {
        ForeachSink {
            writer,
            rows: PhantomData,
        }
    }

    fn write(&mut self, batch_id: i64, batches: &[RecordBatch]) -> Result<()> {
        if !self.writer.open(0, batch_id)? {
            return Ok(());
        }
        for b in batches {
            for row in R::from_batch(b)? {
                self.writer.process(row)?;
            }
        }
        Ok(())
    }
}

impl<R: Row + 'static, W: ForeachWriter<R> + 'static> Sink for ForeachSink<R, W> {
    fn description(&self) -> String {
        "ForeachSink".into()
    }

    fn add_batch(&mut self, batch_id: i64, batches: &[RecordBatch]) -> Result<()> {
        let result = self.write(batch_id, batches);
        self.writer.close(result.as_ref().err());
        result
    }
}
