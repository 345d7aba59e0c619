//! Reading ahead: the next micro-batch's read and its first stateful
//! operator's stateless stage (narrow steps, partial aggregation, routing
//! to state partitions) run beside this batch's state stage, so that the
//! workers one batch leaves idle (at its tasks' joins, in its serial tail)
//! have the next batch's tasks to take.
//!
//! Nothing durable happens ahead: the next batch's offsets are still
//! logged when it starts, after this batch's commit; its prepared input is
//! held in memory only and dropped if this batch fails or the query stops.
//! The query decides when a batch may be read ahead (`query::read_ahead`);
//! an operator that can split its work implements
//! [`super::operator::StatefulOperator::process_ahead`] with [`Ahead`].

use std::any::Any;

use arrow::record_batch::RecordBatch;

use crate::error::Result;

/// An operator's first stage for one batch's input, prepared ahead.
pub type Prepared = Box<dyn Any + Send>;

/// An operator's first stage, as the next batch's read calls it on that
/// batch's rows: it reads no state, so it may run while this batch's
/// state stage does.
pub type Prepare<'p> = dyn Fn(&[RecordBatch]) -> Result<Prepared> + Sync + 'p;

/// The next batch's read: runs its sources' reads and `prepare` on the
/// rows, and returns what the query keeps for that batch (`None`: nothing
/// to read ahead, or a read that failed and is left to the batch itself).
pub type ReadNext<'a> = Box<dyn FnOnce(&Prepare<'_>) -> Option<Box<dyn Any + Send>> + Send + 'a>;

/// A batch's read-ahead, handed between the query and its first stateful
/// operator.
#[derive(Default)]
pub struct Ahead<'a> {
    /// This batch's input, prepared during the last batch (the operator
    /// then does not prepare the input it is given again).
    pub prepared: Option<Prepared>,
    /// The next batch's read, for the operator to run beside its state
    /// stage.
    pub next: Option<ReadNext<'a>>,
    /// What [`Ahead::next`] returned, once run.
    pub read: Option<Box<dyn Any + Send>>,
}

impl Ahead<'_> {
    /// Runs `state` (this batch's state stage) and, when a next batch is
    /// to be read, that read with `prepare` beside it on the pool (with
    /// one worker, after it).
    pub fn beside<T: Send>(
        &mut self,
        state: impl FnOnce() -> T + Send,
        prepare: &Prepare<'_>,
    ) -> T {
        match self.next.take() {
            Some(next) => {
                let (out, read) = rayon::join(state, || next(prepare));
                self.read = read;
                out
            }
            None => state(),
        }
    }

    /// This batch's prepared input, if there is one of type `T`.
    pub fn take_prepared<T: 'static>(&mut self) -> Option<T> {
        self.prepared.take()?.downcast::<T>().ok().map(|b| *b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_read_runs_beside_the_state_stage_and_its_result_is_kept() {
        let mut ahead = Ahead {
            next: Some(Box::new(|prepare: &Prepare<'_>| {
                let p = prepare(&[]).ok()?;
                Some(Box::new(*p.downcast::<usize>().ok()? + 1) as Box<dyn Any + Send>)
            })),
            ..Ahead::default()
        };
        let prepare = |_: &[RecordBatch]| -> Result<Prepared> { Ok(Box::new(41usize)) };
        assert_eq!(ahead.beside(|| "state", &prepare), "state");
        let read = ahead.read.take().unwrap().downcast::<usize>().unwrap();
        assert_eq!(*read, 42);
        // Without a next read, only the state stage runs.
        assert_eq!(ahead.beside(|| 7, &prepare), 7);
        assert!(ahead.read.is_none());
        // Prepared input of another type is not taken.
        ahead.prepared = Some(Box::new(1u8));
        assert_eq!(ahead.take_prepared::<usize>(), None);
        ahead.prepared = Some(Box::new(3usize));
        assert_eq!(ahead.take_prepared::<usize>(), Some(3));
    }
}
