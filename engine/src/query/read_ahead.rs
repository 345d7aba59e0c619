//! The query's side of reading ahead (`weir.readAhead`, see
//! [`crate::ops::ahead`]): when it may, and the next batch's read, a task
//! of its own on the worker pool that holds the query's sources until the
//! next batch takes them back.
//!
//! The next batch is planned as the query would plan it once this batch
//! is done: each source's latest offset after this batch's end, its rows,
//! then the operator's stateless stage on them. Nothing of it is durable:
//! the batch's `offsets/N` is written when it runs, after this batch's
//! `commits/N`, and its watermarks are those this batch leaves. A read
//! that fails is dropped and left to the batch, which then reads again
//! (and reports the error if it fails again).

use std::collections::BTreeMap;
use std::sync::mpsc::{sync_channel, Receiver};
use std::time::Instant;

use arrow::record_batch::RecordBatch;

use super::Trigger;
use crate::ops::ahead::{Prepared, Preparer};
use crate::source::{BoxSource, Offset};

/// The next batch, planned and read while the last one ran.
pub(super) struct ReadAhead {
    /// The batch it was read for.
    pub(super) batch_id: i64,
    /// Where the batches before it ended, per source.
    pub(super) start: Vec<Option<Offset>>,
    /// Each source's latest offset: where the batch ends.
    pub(super) latest: Vec<Option<Offset>>,
    /// How long the latest offsets took, ms (`latestOffset`).
    pub(super) latest_ms: i64,
    /// Each source's rows.
    pub(super) inputs: Vec<Vec<RecordBatch>>,
    /// How long the reads took, ms (`getBatch`).
    pub(super) get_batch_ms: i64,
    /// Each source's description and metrics after its read (its progress
    /// report's).
    pub(super) metrics: Vec<(String, BTreeMap<String, String>)>,
    /// The first stateful operator's stage prepared on the rows.
    pub(super) prepared: Option<Prepared>,
}

/// Whether a query reads its batches ahead: `enabled` (`weir.readAhead`),
/// a trigger that runs the next batch as soon as the last is done (so the
/// next batch's offsets are what they would have been), one source that
/// reads ahead ([`crate::source::Source::reads_ahead`]), no late-rows side
/// output (read from the whole input) and not a scale-out task (whose
/// watermark is planned with the other tasks'). The pipeline must have a
/// first stage to run ahead too ([`crate::ops::Pipeline::preparer`]).
pub(super) fn allowed(
    enabled: bool,
    trigger: Trigger,
    sources: &[(String, BoxSource)],
    late_sink: bool,
    scale_out: bool,
) -> bool {
    let immediate = match trigger {
        Trigger::Default | Trigger::AvailableNow => true,
        Trigger::ProcessingTime(d) => d.is_zero(),
        Trigger::Once => false,
    };
    enabled
        && immediate
        && matches!(sources, [(_, s)] if s.reads_ahead())
        && !late_sink
        && !scale_out
}

/// The query's sources, and what the read ahead found with them.
pub(super) type Returned = (Vec<(String, BoxSource)>, Option<ReadAhead>);

/// Starts batch `batch_id`'s read, after batches that ended at `start`, as
/// a task of its own on the worker pool this is called in: the sources'
/// latest offsets, their rows, and `prepare` on them. The sources come
/// back through the receiver with the batch read (`None` when no source
/// has data past `start`: the batch is planned when it runs, no-data
/// batches included; or when a source failed: the batch then reads again
/// and reports what fails).
pub(super) fn spawn(
    batch_id: i64,
    mut sources: Vec<(String, BoxSource)>,
    start: Vec<Option<Offset>>,
    prepare: Preparer,
) -> Receiver<Returned> {
    let (tx, rx) = sync_channel(1);
    rayon::spawn(move || {
        let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            read(batch_id, &mut sources, start, &prepare)
        }));
        // A panic (a bug) leaves the batch to read again, as a failure does.
        let _ = tx.send((sources, read.ok().flatten()));
    });
    rx
}

fn read(
    batch_id: i64,
    sources: &mut [(String, BoxSource)],
    start: Vec<Option<Offset>>,
    prepare: &Preparer,
) -> Option<ReadAhead> {
    let t = Instant::now();
    let mut latest = Vec::with_capacity(sources.len());
    for ((_, s), from) in sources.iter_mut().zip(&start) {
        latest.push(s.latest_offset(from.as_ref()).ok()?);
    }
    let has_data = latest
        .iter()
        .zip(&start)
        .any(|(l, c)| l.is_some() && l != c);
    if !has_data {
        return None;
    }
    let latest_ms = t.elapsed().as_millis() as i64;
    let t = Instant::now();
    let mut inputs = Vec::with_capacity(sources.len());
    for (((_, s), from), end) in sources.iter_mut().zip(&start).zip(&latest) {
        inputs.push(match end {
            Some(e) if Some(e) != from.as_ref() => s.get_batch(from.as_ref(), e).ok()?,
            _ => vec![],
        });
    }
    let get_batch_ms = t.elapsed().as_millis() as i64;
    let metrics = sources
        .iter()
        .map(|(_, s)| (s.description(), s.metrics()))
        .collect();
    let prepared = inputs.first().and_then(|rows| prepare(rows).ok());
    Some(ReadAhead {
        batch_id,
        start,
        latest,
        latest_ms,
        inputs,
        get_batch_ms,
        metrics,
        prepared,
    })
}
