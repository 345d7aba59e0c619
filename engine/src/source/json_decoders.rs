//! Arrow JSON decoders kept from batch to batch: a decoder's buffers (the
//! tape of each record's tokens and the bytes of its strings) grow to a
//! batch's size once and are reused, instead of being allocated, grown by
//! copying and faulted in page by page for every batch of every partition.
//!
//! A decoder goes back to the idle ones only after a batch decoded and
//! flushed in full; one left mid-record by an error is dropped.

use std::sync::{Mutex, PoisonError};

use arrow::datatypes::SchemaRef;
use arrow::json::reader::Decoder;

/// A decoder for more rows than this is not kept: one unusually large
/// batch (a backlog read without a per-trigger limit) must not hold its
/// buffers for the life of the query.
const MAX_KEPT_ROWS: usize = 1 << 17;

/// Idle decoders kept: one per task that can run at once (the worker
/// pool's threads), and at least this many (batches of different sizes).
const MIN_IDLE: usize = 4;

/// Decoders of one schema, idle between batches.
pub(crate) struct JsonDecoders {
    /// The rows' schema.
    schema: SchemaRef,
    /// Idle decoders, each with the batch size it was built for.
    idle: Mutex<Vec<(usize, Decoder)>>,
}

/// A decoder lent for one batch; it goes back when dropped after
/// [`Lease::flushed`], and is dropped with the lease otherwise.
pub(crate) struct Lease<'a> {
    /// Where the decoder goes back.
    pool: &'a JsonDecoders,
    /// The decoder's batch size.
    rows: usize,
    /// The decoder (taken out on drop).
    decoder: Option<Decoder>,
    /// Set by [`Lease::flushed`].
    reusable: bool,
}

impl JsonDecoders {
    /// No decoders yet, for rows of `schema`, read as Spark reads them
    /// ([`super::json_time`]: the caller turns the timestamps' text into
    /// times).
    pub(crate) fn new(schema: SchemaRef) -> JsonDecoders {
        JsonDecoders {
            schema,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// A decoder that takes at least `rows` rows before its flush: the
    /// smallest idle one large enough, or a new one (sized to the next power
    /// of two, so batches of similar sizes share decoders).
    pub(crate) fn lease(&self, rows: usize) -> Result<Lease<'_>, String> {
        let rows = rows.max(1);
        let found = {
            let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
            (0..idle.len())
                .filter(|i| idle[*i].0 >= rows)
                .min_by_key(|i| idle[*i].0)
                .map(|i| idle.swap_remove(i))
        };
        let (rows, decoder) = match found {
            Some(d) => d,
            None => {
                let rows = rows.next_power_of_two();
                let d = super::json_time::reader_builder(&self.schema)
                    .with_batch_size(rows)
                    .with_strict_mode(false)
                    .build_decoder()
                    .map_err(|e| e.to_string())?;
                (rows, d)
            }
        };
        Ok(Lease {
            pool: self,
            rows,
            decoder: Some(decoder),
            reusable: false,
        })
    }

    /// How many decoders are idle (for tests).
    #[cfg(test)]
    fn idle(&self) -> usize {
        self.idle.lock().unwrap().len()
    }
}

impl Lease<'_> {
    /// The decoder.
    pub(crate) fn decoder(&mut self) -> &mut Decoder {
        self.decoder
            .as_mut()
            .expect("a lease holds its decoder until dropped")
    }

    /// Marks the decoder flushed in full: empty, and fit to decode the next batch.
    pub(crate) fn flushed(&mut self) {
        self.reusable = true;
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        let Some(d) = self.decoder.take() else { return };
        if !self.reusable || d.has_partial_record() || !d.is_empty() || self.rows > MAX_KEPT_ROWS {
            return;
        }
        let mut idle = self
            .pool
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        idle.push((self.rows, d));
        if idle.len() > rayon::current_num_threads().max(MIN_IDLE) {
            // Keep the larger ones: they serve every smaller batch.
            if let Some(i) = (0..idle.len()).min_by_key(|i| idle[*i].0) {
                idle.swap_remove(i);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::AsArray;
    use arrow::datatypes::{DataType, Field, Int64Type, Schema};
    use std::sync::Arc;

    fn pool() -> JsonDecoders {
        JsonDecoders::new(Arc::new(Schema::new(vec![Field::new(
            "a",
            DataType::Int64,
            true,
        )])))
    }

    fn decode(pool: &JsonDecoders, records: &[&str]) -> Result<Vec<Option<i64>>, String> {
        let mut lease = pool.lease(records.len())?;
        for r in records {
            lease
                .decoder()
                .decode(r.as_bytes())
                .map_err(|e| e.to_string())?;
        }
        let b = lease.decoder().flush().map_err(|e| e.to_string())?;
        lease.flushed();
        Ok(
            b.map(|b| b.column(0).as_primitive::<Int64Type>().iter().collect())
                .unwrap_or_default(),
        )
    }

    #[test]
    fn a_flushed_decoder_is_reused_and_reads_the_next_batch_alone() {
        let p = pool();
        assert_eq!(
            decode(&p, &[r#"{"a":1}"#, r#"{"a":2}"#]).unwrap(),
            [Some(1), Some(2)]
        );
        assert_eq!(p.idle(), 1);
        // The same decoder: nothing of the first batch is left in it.
        assert_eq!(decode(&p, &[r#"{"a":3}"#]).unwrap(), [Some(3)]);
        assert_eq!(p.idle(), 1);
        // A larger batch than any idle decoder takes gets a new one, and
        // every row of it (a decoder stops at its batch size).
        let many: Vec<String> = (0..5).map(|i| format!(r#"{{"a":{i}}}"#)).collect();
        let many: Vec<&str> = many.iter().map(|s| s.as_str()).collect();
        let got = decode(&p, &many).unwrap();
        assert_eq!(got, (0..5).map(Some).collect::<Vec<_>>());
        assert_eq!(p.idle(), 2);
    }

    #[test]
    fn the_smallest_fitting_decoder_is_lent_and_a_huge_one_is_not_kept() {
        let p = pool();
        let small = p.lease(1).unwrap();
        let big = p.lease(1000).unwrap();
        for mut l in [small, big] {
            l.decoder().flush().unwrap();
            l.flushed();
        }
        assert_eq!(p.idle(), 2);
        // A one-record batch takes the small one; the large one stays idle.
        let l = p.lease(1).unwrap();
        assert_eq!(l.rows, 1);
        drop(l);
        // A decoder beyond the bound decodes its batch and is then dropped.
        let mut huge = p.lease(MAX_KEPT_ROWS + 1).unwrap();
        huge.decoder().flush().unwrap();
        huge.flushed();
        drop(huge);
        assert!(p
            .idle
            .lock()
            .unwrap()
            .iter()
            .all(|(r, _)| *r <= MAX_KEPT_ROWS));
    }

    #[test]
    fn a_decoder_left_by_an_error_is_not_reused() {
        let p = pool();
        // An unfinished record, then nothing: never flushed.
        {
            let mut lease = p.lease(2).unwrap();
            lease.decoder().decode(br#"{"a":1}{"a":"#).unwrap();
        }
        assert_eq!(p.idle(), 0);
        // A record of the wrong type: the flush fails.
        assert!(decode(&p, &[r#"{"a":"x"}"#]).is_err());
        assert_eq!(p.idle(), 0);
        // A good batch after them reads only its own rows.
        assert_eq!(decode(&p, &[r#"{"a":7}"#]).unwrap(), [Some(7)]);
        assert_eq!(p.idle(), 1);
    }
}
