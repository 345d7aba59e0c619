//! Talking to the brokers for the Kafka source: listing partitions'
//! earliest and latest offsets, and reading a batch's offset ranges into
//! Arrow batches, the partitions in parallel (see [`super::reader`]).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use arrow::record_batch::RecordBatch;
use rdkafka::consumer::Consumer;
use rdkafka::{Offset as KafkaOffset, TopicPartitionList};

use rayon::prelude::*;

use super::reader::{PartitionReader, ReadEnd};
use super::retry::is_transient;
use super::rows::Cursor;
use super::{KafkaSource, PartitionOffsets, TopicPartition, META_TIMEOUT};
use crate::error::{Result, WeirError};
use crate::source::Source;

impl KafkaSource {
    /// The earliest ([`KafkaOffset::Beginning`]) or latest
    /// ([`KafkaOffset::End`]: the next offset to be written, or the last
    /// stable offset under read_committed) offset of each partition, listed
    /// in one request per broker. Transient errors (a new partition without
    /// a leader yet, a leader moving) and answers without an offset are
    /// retried for a while, so a data-loss decision never rests on a
    /// half-answered request.
    pub(super) fn list_offsets(
        &self,
        parts: &BTreeSet<TopicPartition>,
        which: KafkaOffset,
    ) -> Result<PartitionOffsets> {
        let what = if which == KafkaOffset::Beginning {
            "earliest"
        } else {
            "latest"
        };
        let deadline = Instant::now() + META_TIMEOUT;
        let mut wait = Duration::from_millis(20);
        let mut out = PartitionOffsets::new();
        loop {
            let mut tpl = TopicPartitionList::new();
            for (t, p) in parts.iter().filter(|tp| !out.contains_key(*tp)) {
                tpl.add_partition_offset(t, *p, which)
                    .map_err(|e| self.kerr("list offsets", e))?;
            }
            if tpl.count() == 0 {
                return Ok(out);
            }
            let mut last_err = None;
            match self.consumer()?.offsets_for_times(tpl, META_TIMEOUT) {
                Ok(got) => {
                    for e in got.elements() {
                        match (e.error(), e.offset()) {
                            (Ok(()), KafkaOffset::Offset(o)) if o >= 0 => {
                                out.insert((e.topic().to_string(), e.partition()), o);
                            }
                            (Err(err), _) => last_err = Some(err),
                            _ => {}
                        }
                    }
                }
                Err(e) => last_err = Some(e),
            }
            if out.len() == parts.len() {
                return Ok(out);
            }
            let fatal = last_err.as_ref().is_some_and(|e| !is_transient(e));
            if fatal || Instant::now() > deadline {
                let missing: Vec<String> = parts
                    .iter()
                    .filter(|tp| !out.contains_key(*tp))
                    .map(|(t, p)| format!("{t}-{p}"))
                    .collect();
                return Err(self.err(format!(
                    "cannot list the {what} offsets of {}: {}",
                    missing.join(", "),
                    last_err
                        .map(|e| e.to_string())
                        .unwrap_or_else(|| "no offset in the answer".into())
                )));
            }
            std::thread::sleep(wait);
            wait = (wait * 2).min(Duration::from_millis(500));
        }
    }

    /// One partition's earliest offset.
    pub(super) fn earliest(&self, tp: &TopicPartition) -> Result<i64> {
        let one = BTreeSet::from([tp.clone()]);
        Ok(self.list_offsets(&one, KafkaOffset::Beginning)?[tp])
    }

    /// One partition's latest offset.
    pub(super) fn latest(&self, tp: &TopicPartition) -> Result<i64> {
        let one = BTreeSet::from([tp.clone()]);
        Ok(self.list_offsets(&one, KafkaOffset::End)?[tp])
    }

    /// Reads `[from, to)` of each range, one record batch per partition
    /// chunk, in (topic, partition) order. The partitions are read in
    /// parallel (rayon), each by its own consumer kept across batches
    /// ([`PartitionReader`]): a range that starts where the partition's last
    /// range ended continues without a seek, and a read returns as soon as
    /// its partition reached the range's end.
    pub(super) fn read(
        &mut self,
        ranges: Vec<(TopicPartition, i64, i64)>,
    ) -> Result<Vec<RecordBatch>> {
        self.serve_events();
        let poll_timeout = self.options.poll_timeout;
        let include_headers = self.options.include_headers;
        let description = self.description();
        let source_err = |message: String| WeirError::Source {
            source_name: description.clone(),
            message,
        };
        let rt = self
            .rt
            .as_mut()
            .ok_or_else(|| source_err("used before open()".into()))?;
        // Each range with its partition's reader (taken out while reading).
        let mut work: Vec<(PartitionReader, Cursor)> = Vec::with_capacity(ranges.len());
        for (tp, from, to) in ranges {
            let mut r = match rt.readers.remove(&tp) {
                Some(r) => r,
                None => PartitionReader::new(tp.clone(), &rt.reader_conf)?,
            };
            // Repositions (before any read starts, so that every fetch starts
            // now) only the readers that do not continue where they stand.
            r.position_at(from).map_err(source_err)?;
            let hint = r.value_bytes;
            work.push((r, Cursor::new(tp, from, to, include_headers, hint)));
        }
        let mut resets = 0;
        loop {
            let ends: Vec<std::result::Result<ReadEnd, String>> = work
                .par_iter_mut()
                .map(|(r, c)| r.read(c, poll_timeout))
                .collect();
            let mut again = false;
            for (i, end) in ends.into_iter().enumerate() {
                match end.map_err(|m| self.err(m))? {
                    ReadEnd::Done => {}
                    ReadEnd::OutOfRange => {
                        // Records went away while reading (retention, deleted records).
                        resets += 1;
                        if resets > 10 {
                            return Err(self.err("offsets keep going out of range while reading"));
                        }
                        let c = &work[i].1;
                        let (tp, next, to) = (c.tp.clone(), c.next, c.to);
                        let lo = self.earliest(&tp)?;
                        if lo > next {
                            let skip_to = lo.min(to);
                            self.data_loss(
                                &tp,
                                next,
                                skip_to,
                                "records were deleted while this batch read them",
                            )?;
                            work[i].1.next = skip_to;
                        }
                        again = true;
                    }
                }
            }
            if !again {
                break;
            }
        }
        let mut out = Vec::new();
        for (mut r, c) in work {
            self.metrics.repaired.add(c.repaired);
            r.value_bytes = c.value_bytes_per_record();
            out.extend(c.finish()?);
            if let Some(rt) = self.rt.as_mut() {
                rt.readers.insert(r.tp().clone(), r);
            }
        }
        if self.metrics.repaired != Default::default() {
            tracing::warn!(
                source = %self.description(),
                "kept records with bad data: {} timestamps out of range (null), {} header keys not UTF-8 (decoded lossily)",
                self.metrics.repaired.timestamps,
                self.metrics.repaired.header_keys
            );
        }
        Ok(out)
    }

    /// Serves the events queued on the metadata consumer (it reads no
    /// records): errors are logged, not left to pile up.
    fn serve_events(&self) {
        let Ok(c) = self.consumer() else {
            return;
        };
        for _ in 0..1000 {
            match c.poll(Duration::ZERO) {
                None => return,
                Some(Err(e)) => {
                    tracing::debug!(source = %self.description(), "consumer event: {e}");
                }
                Some(Ok(_)) => {}
            }
        }
    }
}
