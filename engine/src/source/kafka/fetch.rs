//! Talking to the brokers for the Kafka source: listing partitions'
//! earliest and latest offsets, and reading offset ranges record by record
//! into Arrow batches (assign, seek, poll until each range's end).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use arrow::record_batch::RecordBatch;
use rdkafka::consumer::Consumer;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::{Offset as KafkaOffset, TopicPartitionList};

use super::rows::Cursor;
use super::{KafkaSource, PartitionOffsets, TopicPartition, META_TIMEOUT};
use crate::error::Result;
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
    /// chunk, in (topic, partition) order.
    pub(super) fn read(
        &mut self,
        ranges: Vec<(TopicPartition, i64, i64)>,
    ) -> Result<Vec<RecordBatch>> {
        let mut cursors: Vec<Cursor> = ranges
            .into_iter()
            .map(|(tp, from, to)| Cursor::new(tp, from, to, self.include_headers))
            .collect();
        let mut index: BTreeMap<String, BTreeMap<i32, usize>> = BTreeMap::new();
        for (i, c) in cursors.iter().enumerate() {
            index.entry(c.tp.0.clone()).or_default().insert(c.tp.1, i);
        }
        let mut pending: usize = cursors.iter().filter(|c| !c.done()).count();
        if pending > 0 {
            self.assign_cursors(&cursors)?;
        }
        let mut last_progress = Instant::now();
        let mut resets = 0;
        while pending > 0 {
            let polled = self.consumer()?.poll(Duration::from_millis(100));
            match polled {
                Some(Ok(m)) => {
                    let Some(&i) = index.get(m.topic()).and_then(|p| p.get(&m.partition())) else {
                        continue;
                    };
                    let c = &mut cursors[i];
                    if c.done() {
                        continue;
                    }
                    let o = m.offset();
                    if o >= c.next && o < c.to {
                        c.push(&m)?;
                    }
                    c.next = c.next.max(o + 1);
                    last_progress = Instant::now();
                    if c.done() {
                        pending -= 1;
                        self.pause(&c.tp);
                    }
                }
                Some(Err(KafkaError::MessageConsumption(RDKafkaErrorCode::OffsetOutOfRange))) => {
                    // Records went away while reading (retention, deleted records).
                    resets += 1;
                    if resets > 10 {
                        return Err(self.err("offsets keep going out of range while reading"));
                    }
                    for c in cursors.iter_mut().filter(|c| !c.done()) {
                        let lo = self.earliest(&c.tp)?;
                        if lo > c.next {
                            let to = lo.min(c.to);
                            self.data_loss(
                                &c.tp,
                                c.next,
                                to,
                                "records were deleted while this batch read them",
                            )?;
                            c.next = to;
                        }
                    }
                    pending = cursors.iter().filter(|c| !c.done()).count();
                    if pending > 0 {
                        self.assign_cursors(&cursors)?;
                    }
                }
                Some(Err(e)) => {
                    tracing::warn!(source = %self.description(), "consumer error (retrying): {e}");
                }
                None => {
                    // Control records (transaction markers) and compaction
                    // leave gaps: the consumer's position tells they were passed.
                    let pos = self
                        .consumer()?
                        .position()
                        .map_err(|e| self.kerr("consumer position", e))?;
                    for e in pos.elements() {
                        if let KafkaOffset::Offset(p) = e.offset() {
                            if let Some(&i) =
                                index.get(e.topic()).and_then(|m| m.get(&e.partition()))
                            {
                                let c = &mut cursors[i];
                                if !c.done() && p > c.next {
                                    c.next = p;
                                    last_progress = Instant::now();
                                    if c.done() {
                                        pending -= 1;
                                    }
                                }
                            }
                        }
                    }
                    if pending > 0 && last_progress.elapsed() > self.poll_timeout {
                        let stuck: Vec<String> = cursors
                            .iter()
                            .filter(|c| !c.done())
                            .map(|c| {
                                format!("{}-{} at {} of [.., {})", c.tp.0, c.tp.1, c.next, c.to)
                            })
                            .collect();
                        return Err(self.err(format!(
                            "no progress reading {} for {:?} (kafkaConsumer.pollTimeoutMs); is the broker up?",
                            stuck.join(", "),
                            self.poll_timeout
                        )));
                    }
                }
            }
        }
        let _ = self.consumer()?.unassign();
        let mut out = Vec::new();
        for c in cursors {
            self.metrics.repaired.add(c.repaired);
            out.extend(c.finish()?);
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

    pub(super) fn assign_cursors(&self, cursors: &[Cursor]) -> Result<()> {
        let mut tpl = TopicPartitionList::new();
        for c in cursors.iter().filter(|c| !c.done()) {
            tpl.add_partition_offset(&c.tp.0, c.tp.1, KafkaOffset::Offset(c.next))
                .map_err(|e| self.kerr("assign", e))?;
        }
        let c = self.consumer()?;
        c.assign(&tpl)
            .map_err(|e| self.kerr("cannot assign partitions", e))?;
        // A partition paused when it reached the end of an earlier batch stays
        // paused across assignments: resume it.
        c.resume(&tpl)
            .map_err(|e| self.kerr("cannot resume partitions", e))
    }

    pub(super) fn pause(&self, tp: &TopicPartition) {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&tp.0, tp.1);
        if let Ok(c) = self.consumer() {
            let _ = c.pause(&tpl);
        }
    }
}

/// Errors worth retrying: metadata not settled yet, leaders moving, timeouts.
pub(super) fn is_transient(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::NotLeaderForPartition
                | RDKafkaErrorCode::LeaderNotAvailable
                | RDKafkaErrorCode::UnknownTopicOrPartition
                | RDKafkaErrorCode::UnknownLeaderEpoch
                | RDKafkaErrorCode::FencedLeaderEpoch
                | RDKafkaErrorCode::OperationTimedOut
                | RDKafkaErrorCode::RequestTimedOut
                | RDKafkaErrorCode::BrokerTransportFailure
                | RDKafkaErrorCode::AllBrokersDown
                | RDKafkaErrorCode::NotCoordinator
                | RDKafkaErrorCode::CoordinatorLoadInProgress
                | RDKafkaErrorCode::OffsetNotAvailable
        )
    )
}
