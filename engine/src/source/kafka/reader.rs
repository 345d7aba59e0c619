//! One consumer per partition, kept across batches: a batch's partitions
//! are read in parallel (rayon), each reader continuing where its last batch
//! ended without assigning or seeking again, and returning as soon as its
//! range's end offset is reached.
//!
//! Spark keeps one cached consumer per topic-partition on its executors for
//! the same reasons: a consumer's fetch session and prefetched records
//! survive from one batch to the next, and partitions do not wait on each
//! other. A reader only repositions (assigns its partition at the range's
//! start) when a batch does not continue where the last one ended: the
//! first batch, a replay after a restart, or offsets skipped as lost.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::{ClientConfig, Offset as KafkaOffset, TopicPartitionList};

use super::queue::RecordQueue;
use super::rows::Cursor;
use super::TopicPartition;
use crate::error::{Result, WeirError};

/// How long one poll waits before the reader looks at the consumer's
/// position (which moves past control records and aborted transactions
/// without a record to show for them).
const POLL_WAIT: Duration = Duration::from_millis(10);

/// How long a repositioned consumer may take to drop its old position.
const RESET_WAIT: Duration = Duration::from_secs(10);

/// How a read ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum ReadEnd {
    /// Every offset of the range was passed.
    Done,
    /// The offsets at the cursor are gone (retention, deleted records): the
    /// caller decides (data loss) and reads again.
    OutOfRange,
}

/// A consumer assigned to one partition, and where it stands.
pub(super) struct PartitionReader {
    tp: TopicPartition,
    /// The consumer's records, taken many at a time; a record read past
    /// the end of the last range is put back, the next one delivered.
    /// Declared before `consumer`, so dropped before it.
    records: RecordQueue,
    consumer: BaseConsumer,
    /// `Some((lo, hi))`: the next record this reader delivers is the first
    /// one at or after `hi`, and `[lo, hi)` holds no record to read. A
    /// range starting in `[lo, hi]` continues without a seek. `None`: not
    /// positioned (new, or after an error).
    at: Option<(i64, i64)>,
    /// Value bytes per record in the last range read (sizes the next
    /// range's builders).
    pub(super) value_bytes: usize,
}

impl PartitionReader {
    /// A new consumer for `tp` from `conf` (assigned by the first read).
    pub(super) fn new(tp: TopicPartition, conf: &ClientConfig) -> Result<PartitionReader> {
        let source_err = |message: String| WeirError::Source {
            source_name: format!("KafkaV2[{}-{}]", tp.0, tp.1),
            message,
        };
        let consumer: BaseConsumer = conf
            .create()
            .map_err(|e| source_err(format!("cannot create the Kafka consumer: {e}")))?;
        let records = RecordQueue::of(&consumer).map_err(source_err)?;
        Ok(PartitionReader {
            tp,
            records,
            consumer,
            at: None,
            value_bytes: 0,
        })
    }

    /// The partition read.
    pub(super) fn tp(&self) -> &TopicPartition {
        &self.tp
    }

    /// Whether a range starting at `from` continues where this reader stands.
    pub(super) fn continues_at(&self, from: i64) -> bool {
        matches!(self.at, Some((lo, hi)) if lo <= from && from <= hi)
    }

    /// Positions the consumer at `from` unless it already stands there, so
    /// that its first fetch starts before the parallel reads do.
    pub(super) fn position_at(&mut self, from: i64) -> std::result::Result<(), String> {
        if self.continues_at(from) {
            return Ok(());
        }
        self.records.clear();
        self.at = None;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.tp.0, self.tp.1, KafkaOffset::Offset(from))
            .map_err(|e| format!("assign: {e}"))?;
        self.consumer
            .assign(&tpl)
            .map_err(|e| format!("cannot assign {}-{}: {e}", self.tp.0, self.tp.1))?;
        self.await_reset()?;
        self.at = Some((from, from));
        Ok(())
    }

    /// Waits until the consumer's position no longer shows where it stood
    /// before its (re)assignment. The read takes a position past its cursor
    /// for offsets passed without a record (transaction markers), so a
    /// stale one would skip records. librdkafka drops the old position
    /// when the old assignment's fetch stops, on its own thread, after
    /// `assign` returns; nothing sets a new one until records are taken.
    /// A taken consumer error also moves it (past the errored offset),
    /// which is why an error repositions the reader.
    fn await_reset(&self) -> std::result::Result<(), String> {
        let deadline = Instant::now() + RESET_WAIT;
        while let Some(p) = self.position()? {
            if Instant::now() > deadline {
                return Err(format!(
                    "the Kafka consumer of {}-{} still stands at {p} {RESET_WAIT:?} after it was repositioned",
                    self.tp.0, self.tp.1
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    /// Reads `[c.next, c.to)` into `c`, returning as soon as every offset
    /// of it was passed. Records past the end stay for the next range.
    /// Fails when no progress is made for `poll_timeout`.
    pub(super) fn read(
        &mut self,
        c: &mut Cursor,
        poll_timeout: Duration,
    ) -> std::result::Result<ReadEnd, String> {
        if c.done() {
            return Ok(ReadEnd::Done);
        }
        self.position_at(c.next)?;
        if let Some((_, hi)) = self.at {
            // Offsets before `hi` hold nothing to read.
            c.next = c.next.max(hi.min(c.to));
        }
        let mut last_progress = Instant::now();
        // Whether a record came since `last_progress` (the clock is read
        // only when a poll comes back empty, not once per record).
        let mut polled = false;
        while !c.done() {
            let record = self.records.next(POLL_WAIT);
            match record.as_ref().map(|m| (m, m.error())) {
                Some((m, None)) => {
                    polled = true;
                    if m.partition() != self.tp.1 {
                        continue;
                    }
                    let o = m.offset();
                    if o < c.next {
                        continue;
                    }
                    if o < c.to {
                        c.push(m).map_err(|e| e.to_string())?;
                        c.next = o + 1;
                        if c.done() {
                            self.at = Some((c.to, c.to));
                        }
                    } else {
                        // Offsets [c.next, o) were gaps: this record is the next range's.
                        self.at = Some((c.to, o));
                        c.next = c.to;
                        if let Some(m) = record {
                            self.records.put_back(m);
                        }
                    }
                }
                // With `auto.offset.reset=error` librdkafka reports offsets
                // gone as `AutoOffsetReset` (since 1.6.1), not as the
                // broker's `OffsetOutOfRange`.
                Some((
                    _,
                    Some(RDKafkaErrorCode::OffsetOutOfRange | RDKafkaErrorCode::AutoOffsetReset),
                )) => {
                    self.at = None;
                    self.records.clear();
                    return Ok(ReadEnd::OutOfRange);
                }
                Some((m, Some(code))) => {
                    let e = KafkaError::MessageConsumption(code);
                    tracing::warn!(topic = %self.tp.0, partition = self.tp.1, "consumer error (retrying): {e}");
                    if m.offset() >= 0 {
                        // Taking an error at an offset moved the consumer's
                        // position past it: read again from the cursor,
                        // never past it (a corrupt record is not skipped).
                        self.at = None;
                        self.position_at(c.next)?;
                    }
                    if std::mem::take(&mut polled) {
                        last_progress = Instant::now();
                    }
                    if last_progress.elapsed() > poll_timeout {
                        self.at = None;
                        self.records.clear();
                        return Err(format!(
                            "no progress reading {}-{} at {} of [.., {}) for {:?} (kafkaConsumer.pollTimeoutMs): {e}",
                            self.tp.0, self.tp.1, c.next, c.to, poll_timeout
                        ));
                    }
                }
                None => {
                    // Control records (transaction markers), aborted records and
                    // compaction leave gaps: the consumer's position tells they
                    // were passed.
                    if std::mem::take(&mut polled) {
                        last_progress = Instant::now();
                    }
                    if let Some(p) = self.position()? {
                        if p > c.next {
                            last_progress = Instant::now();
                            if p >= c.to {
                                self.at = Some((c.to, p));
                                c.next = c.to;
                            } else {
                                c.next = p;
                                self.at = Some((p, p));
                            }
                        }
                    }
                    if !c.done() && last_progress.elapsed() > poll_timeout {
                        self.at = None;
                        self.records.clear();
                        return Err(format!(
                            "no progress reading {}-{} at {} of [.., {}) for {:?} (kafkaConsumer.pollTimeoutMs); is the broker up?",
                            self.tp.0, self.tp.1, c.next, c.to, poll_timeout
                        ));
                    }
                }
            }
        }
        Ok(ReadEnd::Done)
    }

    /// The consumer's position in its partition (the next offset it reads).
    fn position(&self) -> std::result::Result<Option<i64>, String> {
        let pos = self
            .consumer
            .position()
            .map_err(|e| format!("consumer position: {e}"))?;
        Ok(pos.elements().iter().find_map(|e| match e.offset() {
            KafkaOffset::Offset(p) if e.partition() == self.tp.1 && e.topic() == self.tp.0 => {
                Some(p)
            }
            _ => None,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::kafka::KafkaAdmin;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

    /// The test broker (`KAFKA_BOOTSTRAP`, as the integration tests use).
    fn bootstrap() -> String {
        std::env::var("KAFKA_BOOTSTRAP").unwrap_or_else(|_| {
            panic!(
                "KAFKA_BOOTSTRAP is not set: this test needs a real broker. Start one with \
                 `bash scripts/kafka.sh start` and export its address, or run `bash scripts/test.sh`"
            )
        })
    }

    /// Records deleted under a range before the reader fetches it (as
    /// between a batch's earliest-offset check and its fetch): the read
    /// ends as offsets gone, for its caller's `failOnDataLoss`, not as a
    /// timeout. librdkafka reports them as `AutoOffsetReset` with
    /// `auto.offset.reset=error`. The records go before the reader is
    /// positioned: positioned first, it may fetch them before they go
    /// (CI saw that once), and then reads them all.
    #[test]
    fn records_deleted_before_a_reader_fetches_them_end_its_read_as_offsets_gone() {
        let bootstrap = bootstrap();
        let admin = KafkaAdmin::new(&bootstrap).unwrap();
        let topic = format!("weir-unit-reader-{}", uuid::Uuid::new_v4().simple());
        admin.create_topic(&topic, 1).unwrap();
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .create()
            .unwrap();
        for i in 0..100 {
            let v = format!("v{i}");
            producer
                .send(BaseRecord::<(), _>::to(&topic).payload(&v))
                .unwrap();
        }
        producer.flush(Duration::from_secs(30)).unwrap();
        let mut conf = ClientConfig::new();
        conf.set("bootstrap.servers", &bootstrap)
            .set("group.id", format!("{topic}-g"))
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "error");
        let tp: TopicPartition = (topic.clone(), 0);
        admin.delete_records_before(&topic, 0, 60).unwrap();
        let mut reader = PartitionReader::new(tp.clone(), &conf).unwrap();
        reader.position_at(40).unwrap();
        let mut c = Cursor::new(tp, 40, 80, false, 0);
        let end = reader.read(&mut c, Duration::from_secs(20));
        assert_eq!(end, Ok(ReadEnd::OutOfRange));
        assert_eq!(c.next, 40, "nothing read");
        // Read again from the new start, as the caller does.
        c.next = 60;
        assert_eq!(
            reader.read(&mut c, Duration::from_secs(20)),
            Ok(ReadEnd::Done)
        );
        let offsets: Vec<i64> = c
            .finish()
            .unwrap()
            .iter()
            .flat_map(|b| {
                let o = b
                    .column(4)
                    .as_any()
                    .downcast_ref::<arrow::array::Int64Array>()
                    .unwrap();
                o.values().to_vec()
            })
            .collect();
        assert_eq!(offsets, (60..80).collect::<Vec<i64>>());
        let _ = admin.delete_topic(&topic);
    }
}
