//! A batch's reads of its sources, as the batch makes them and as the read
//! ahead makes them for the next batch (`read_ahead`): one way to ask for
//! the latest offsets, to tell whether there is data, and to read it.

use std::collections::BTreeMap;

use arrow::record_batch::RecordBatch;

use crate::error::Result;
use crate::source::{BoxSource, Offset};

/// Each source's latest offset after `start` (where the batches so far
/// ended).
pub(super) fn latest_offsets(
    sources: &mut [(String, BoxSource)],
    start: &[Option<Offset>],
) -> Result<Vec<Option<Offset>>> {
    sources
        .iter_mut()
        .zip(start)
        .map(|((_, s), from)| s.latest_offset(from.as_ref()))
        .collect()
}

/// Whether some source has data past `start`.
pub(super) fn has_data(latest: &[Option<Offset>], start: &[Option<Offset>]) -> bool {
    latest.iter().zip(start).any(|(l, c)| l.is_some() && l != c)
}

/// Each source's rows in `(start, end]` (none where they are equal).
pub(super) fn read(
    sources: &mut [(String, BoxSource)],
    start: &[Option<Offset>],
    end: &[Option<Offset>],
) -> Result<Vec<Vec<RecordBatch>>> {
    sources
        .iter_mut()
        .enumerate()
        .map(|(i, (_, s))| {
            let from = start.get(i).and_then(Option::as_ref);
            match end.get(i).and_then(Option::as_ref) {
                Some(e) if Some(e) != from => s.get_batch(from, e),
                _ => Ok(vec![]),
            }
        })
        .collect()
}

/// Each source's description and metrics, as its progress report gives
/// them: taken right after the batch's read (the next batch's read ahead
/// changes them, and holds the sources).
pub(super) fn described(
    sources: &[(String, BoxSource)],
) -> Vec<(String, BTreeMap<String, String>)> {
    sources
        .iter()
        .map(|(_, s)| (s.description(), s.metrics()))
        .collect()
}
