//! Reading ahead: the next micro-batch's read and its first stateful
//! operator's stateless stage (narrow steps, partial aggregation, routing
//! to state partitions) run as a task of their own on the worker pool,
//! beside this batch's state stage, output and commit, so that the workers
//! one batch leaves idle (at its tasks' joins, in its serial tail) have the
//! next batch's tasks to take.
//!
//! Nothing durable happens ahead: the next batch's offsets are still
//! logged when it starts, after this batch's commit; its prepared input is
//! held in memory only and dropped if this batch fails or the query stops.
//! The query decides when a batch may be read ahead (`query::read_ahead`);
//! an operator whose first stage reads no state gives a [`Preparer`]
//! ([`super::operator::StatefulOperator::preparer`]) and takes what it
//! prepared ([`super::operator::StatefulOperator::process_prepared`]).

use std::any::Any;
use std::sync::Arc;

use arrow::record_batch::RecordBatch;

use crate::error::Result;

/// An operator's first stage for one batch's input, prepared ahead.
pub type Prepared = Box<dyn Any + Send>;

/// An operator's first stage, owned (its settings and the narrow steps
/// before it), so that it can run on any worker while the operator runs
/// the batch before: it reads no state.
pub type Preparer = Arc<dyn Fn(&[RecordBatch]) -> Result<Prepared> + Send + Sync>;
