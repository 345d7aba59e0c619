//! The query's side of reading ahead (`weir.readAhead`, see
//! [`crate::ops::ahead`]): when it may, and the next batch's read, a task
//! of its own on the worker pool that holds the query's sources until the
//! next batch takes them back.
//!
//! The next batch is read as the query would read it once this batch is
//! done: each source's latest offset after this batch's end, its rows,
//! then the operator's stateless stage on them. When the batch starts, it
//! asks its sources for their latest offsets again, as it would without
//! reading ahead, and takes what was read ahead only if they still end
//! there (a source fed while the batch before ran now ends further, and
//! the batch reads in turn): the batches' boundaries are those of reading
//! in turn. Nothing of it is durable: the batch's `offsets/N` is written
//! when it runs, after this batch's `commits/N`, and its watermarks are
//! those this batch leaves. A read that fails is dropped and left to the
//! batch, which then reads again (and reports the error if it fails
//! again).

use std::collections::BTreeMap;
use std::sync::mpsc::{sync_channel, Receiver};

use arrow::record_batch::RecordBatch;

use super::{source_reads, Trigger};
use crate::error::{Result, WeirError};
use crate::ops::ahead::{Prepared, Preparer};
use crate::source::{BoxSource, Offset};

/// The next batch, planned and read while the last one ran.
pub(super) struct ReadAhead {
    /// The batch it was read for.
    pub(super) batch_id: i64,
    /// Where the batches before it ended, per source.
    pub(super) start: Vec<Option<Offset>>,
    /// Each source's latest offset then: where the batch ends, if the
    /// sources still say so when it starts.
    pub(super) latest: Vec<Option<Offset>>,
    /// Each source's rows.
    pub(super) inputs: Vec<Vec<RecordBatch>>,
    /// Each source's description and metrics after its read (its progress
    /// report's).
    pub(super) metrics: Vec<(String, BTreeMap<String, String>)>,
    /// The first stateful operator's stage prepared on the rows.
    pub(super) prepared: Option<Prepared>,
}

/// A batch of more rows than this does not read the next one ahead: its
/// own tasks already keep the workers busy (2 workers run 2M-row batches
/// of page views 1.7-1.8x faster than 1), and a second batch that large
/// in memory would cost more than it gives (page_views at 2M-row batches
/// peaked at 117-147 MB reading ahead, 102-115 MB not, at the same speed).
pub(super) const MAX_ROWS: i64 = 1 << 20;

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
pub(super) type Returned = (Vec<(String, BoxSource)>, Result<Option<ReadAhead>>);

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
        // The batch reads again and reports what fails; a panic (a bug) is
        // the query's error.
        let read = match read {
            Ok(Ok(read)) => Ok(read),
            Ok(Err(e)) => {
                tracing::debug!("batch {batch_id} read ahead failed, left to the batch: {e}");
                Ok(None)
            }
            Err(p) => Err(WeirError::Config(format!(
                "batch {batch_id}'s read ahead panicked: {}",
                crate::error::panic_message(p.as_ref())
            ))),
        };
        let _ = tx.send((sources, read));
    });
    rx
}

fn read(
    batch_id: i64,
    sources: &mut [(String, BoxSource)],
    start: Vec<Option<Offset>>,
    prepare: &Preparer,
) -> Result<Option<ReadAhead>> {
    let latest = source_reads::latest_offsets(sources, &start)?;
    if !source_reads::has_data(&latest, &start) {
        return Ok(None);
    }
    let inputs = source_reads::read(sources, &start, &latest)?;
    let metrics = source_reads::described(sources);
    let prepared = match inputs.first() {
        Some(rows) => Some(prepare(rows)?),
        None => None,
    };
    Ok(Some(ReadAhead {
        batch_id,
        start,
        latest,
        inputs,
        metrics,
        prepared,
    }))
}
