//! The narrow steps of a node: filters, projections and watermarks, each
//! of which reads one slice of the batch at a time. A run of them is
//! pipelined into one task per slice (as Spark pipelines a stage's narrow
//! transformations into one task per partition), not one task per step:
//! each hand-over to the worker pool may find a worker asleep, and the
//! slice stays in one core's cache from the first step to the last. A
//! stateful operator may take the steps into its own tasks as well
//! ([`crate::ops::operator::StatefulOperator::run`]).

use arrow::record_batch::RecordBatch;

use super::stateless::{FilterOp, ProjectOp};
use super::watermark::{EventTimeSums, WatermarkOp};
use super::{BatchContext, OpExec};
use crate::error::Result;

/// One narrow step.
enum Step<'a> {
    Filter(&'a FilterOp),
    Project(&'a ProjectOp),
    Watermark(&'a WatermarkOp),
}

/// A run of narrow steps, applied to each slice in order.
pub struct Narrow<'a> {
    steps: Vec<Step<'a>>,
}

/// A run of narrow steps of its own (copies of the pipeline's), for a task
/// that outlives the batch (the next batch's read ahead).
pub struct NarrowSteps(Vec<OwnedStep>);

enum OwnedStep {
    Filter(FilterOp),
    Project(ProjectOp),
    Watermark(WatermarkOp),
}

impl NarrowSteps {
    /// The leading narrow operators of `ops`, copied.
    pub(super) fn of(ops: &[OpExec]) -> NarrowSteps {
        let steps = ops
            .iter()
            .map_while(|o| match o {
                OpExec::Filter(f) => Some(OwnedStep::Filter(f.clone())),
                OpExec::Project(p) => Some(OwnedStep::Project(p.clone())),
                OpExec::Watermark(w) => Some(OwnedStep::Watermark(w.clone())),
                _ => None,
            })
            .collect();
        NarrowSteps(steps)
    }

    /// The steps, to apply.
    pub fn narrow(&self) -> Narrow<'_> {
        let steps = self
            .0
            .iter()
            .map(|s| match s {
                OwnedStep::Filter(f) => Step::Filter(f),
                OwnedStep::Project(p) => Step::Project(p),
                OwnedStep::Watermark(w) => Step::Watermark(w),
            })
            .collect();
        Narrow { steps }
    }
}

/// What one slice's watermark steps saw: each step's event-time sums, in
/// step order, to be added over the batch's slices before one rounding.
#[derive(Default)]
pub struct SliceEventTimes(Vec<(usize, EventTimeSums)>);

impl SliceEventTimes {
    /// Adds what `other` saw (another part of the same slice), to be
    /// summed per watermark with the rest by [`Narrow::record`].
    pub fn extend(&mut self, other: SliceEventTimes) {
        self.0.extend(other.0);
    }
}

impl<'a> Narrow<'a> {
    /// No steps: slices pass through unchanged.
    pub fn none() -> Narrow<'static> {
        Narrow { steps: vec![] }
    }

    /// How many of the first operators of `ops` are narrow.
    pub(super) fn count(ops: &[OpExec]) -> usize {
        ops.iter()
            .take_while(|o| {
                matches!(
                    o,
                    OpExec::Filter(_) | OpExec::Project(_) | OpExec::Watermark(_)
                )
            })
            .count()
    }

    /// The leading narrow operators of `ops`.
    pub(super) fn of(ops: &'a [OpExec]) -> Narrow<'a> {
        let steps = ops
            .iter()
            .map_while(|o| match o {
                OpExec::Filter(f) => Some(Step::Filter(f)),
                OpExec::Project(p) => Some(Step::Project(p)),
                OpExec::Watermark(w) => Some(Step::Watermark(w)),
                _ => None,
            })
            .collect();
        Narrow { steps }
    }

    /// Whether the steps only watch event times (watermarks): a slice
    /// leaves them with all its rows, unchanged.
    pub fn observes_only(&self) -> bool {
        self.steps.iter().all(|s| matches!(s, Step::Watermark(_)))
    }

    /// True when there is no step.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// Applies the steps to one slice: the rows after them and what their
    /// watermarks saw.
    pub fn apply(&self, slice: &RecordBatch) -> Result<(RecordBatch, SliceEventTimes)> {
        let mut b = slice.clone();
        let mut seen = SliceEventTimes::default();
        for s in &self.steps {
            match s {
                Step::Filter(f) => b = f.apply(&b)?,
                Step::Project(p) => b = p.apply(&b)?,
                Step::Watermark(w) => seen.0.push((w.id, w.observe(&b)?)),
            }
        }
        Ok((b, seen))
    }

    /// Adds the event times the batch's slices saw (in any order: the
    /// sums are exact) into `ctx`'s statistics, rounding once.
    pub fn record<'s>(
        &self,
        slices: impl IntoIterator<Item = &'s SliceEventTimes>,
        ctx: &mut BatchContext,
    ) {
        let mut total = vec![EventTimeSums::default(); ctx.event_time.len()];
        for (id, sums) in slices.into_iter().flat_map(|s| &s.0) {
            // The batch's statistics are sized for every watermark.
            debug_assert!(*id < total.len(), "watermark {id} has no statistics");
            if let Some(t) = total.get_mut(*id) {
                *t = t.merged(*sums);
            }
        }
        for (stats, sums) in ctx.event_time.iter_mut().zip(total) {
            stats.merge(&sums.stats());
        }
    }

    /// Runs the steps and then `f` on each slice of `input`, as one task
    /// per slice on the worker pool it is called in
    /// ([`crate::ops::tasks::map_tasks`]): `f` gets the slice's rows after
    /// the steps. What the watermarks saw goes into `ctx`; the results
    /// keep the input's order.
    pub fn map_tasks<T: Send>(
        &self,
        input: &[RecordBatch],
        ctx: &mut BatchContext,
        f: impl Fn(RecordBatch) -> Result<T> + Sync + Send,
    ) -> Result<Vec<T>> {
        let done = crate::ops::tasks::map_tasks(input, |slice| {
            let (b, seen) = self.apply(slice)?;
            Ok((f(b)?, seen))
        })?;
        self.record(done.iter().map(|(_, s)| s), ctx);
        Ok(done.into_iter().map(|(t, _)| t).collect())
    }

    /// Runs the steps over `input` as one task per slice ([`Narrow::map_tasks`]);
    /// the output keeps the input's order (without the batches a filter
    /// emptied; watermarks alone pass the batches through as they came).
    pub fn run(&self, input: Vec<RecordBatch>, ctx: &mut BatchContext) -> Result<Vec<RecordBatch>> {
        if self.is_empty() {
            return Ok(input);
        }
        if self.observes_only() {
            // Watermarks only read: the batches pass as they came.
            self.map_tasks(&input, ctx, |_| Ok(()))?;
            return Ok(input);
        }
        let done = self.map_tasks(&input, ctx, Ok)?;
        // A filter leaves out the batches it emptied.
        let filters = self.steps.iter().any(|s| matches!(s, Step::Filter(_)));
        Ok(done
            .into_iter()
            .filter(|b| !filters || b.num_rows() > 0)
            .collect())
    }
}
