//! A consumer's records taken from its queue many at a time.
//!
//! rdkafka's `BaseConsumer::poll` takes one record per call, and each call
//! reads the clock three times (rdkafka's own timeout, then librdkafka's
//! timeout and its `max.poll.interval.ms` bookkeeping), locks the queue and
//! allocates a reference-counted event: ~16% of the Kafka pipeline's CPU
//! time in a profile (with its callees), on the threads that also decode
//! the records.
//! librdkafka's `rd_kafka_consume_batch_queue` takes every record already
//! queued under those costs once; rdkafka does not wrap it, so this file
//! does, and nothing else in the source touches the native queue.
//!
//! A taken record ([`Record`]) is a native message the reader owns until it
//! drops it (`rd_kafka_message_destroy`), as rdkafka's `BorrowedMessage` is
//! one the consumer lends. Errors come as records too (`Record::error`):
//! librdkafka turns a consumer error (offsets gone, a corrupt record) into
//! a message with its error code set, as `poll` does. Serving the queue
//! this way, librdkafka asserts that every operation it returns is a record
//! or a consumer error: a reader's consumer must never commit offsets (no
//! `commit`, no `enable.auto.commit`, which the source refuses), since
//! commit results would be queued there too.

use std::collections::VecDeque;
use std::ffi::CStr;
use std::ptr::NonNull;
use std::time::Duration;

use rdkafka::bindings as rdsys;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::{BorrowedHeaders, Message, Timestamp};

/// The most records one call takes from the queue.
const TAKE: usize = 1024;

/// One native record (or consumer error) taken from a consumer's queue.
pub(super) struct Record(NonNull<rdsys::rd_kafka_message_t>);

// SAFETY: a taken message is owned by this value alone (librdkafka hands it
// over and only frees it on `rd_kafka_message_destroy`); librdkafka's
// messages may be used and destroyed from any thread.
unsafe impl Send for Record {}

impl Record {
    fn native(&self) -> &rdsys::rd_kafka_message_t {
        // SAFETY: the pointer is live until `drop`.
        unsafe { self.0.as_ref() }
    }

    /// The consumer error this record carries instead of data, if any.
    pub(super) fn error(&self) -> Option<RDKafkaErrorCode> {
        let err = self.native().err;
        (err != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR).then(|| err.into())
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        // SAFETY: taken from `rd_kafka_consume_batch_queue`, destroyed once.
        unsafe { rdsys::rd_kafka_message_destroy(self.0.as_ptr()) }
    }
}

/// `len` bytes at `p` (none when `p` is null).
///
/// # Safety
/// `p` must be null or point to `len` bytes living as long as `'a`.
unsafe fn bytes<'a>(p: *mut std::ffi::c_void, len: usize) -> Option<&'a [u8]> {
    // SAFETY: as the caller promises.
    (!p.is_null()).then(|| unsafe { std::slice::from_raw_parts(p as *const u8, len) })
}

impl Message for Record {
    type Headers = BorrowedHeaders;

    fn key(&self) -> Option<&[u8]> {
        let m = self.native();
        // SAFETY: librdkafka's key bytes live with the message.
        unsafe { bytes(m.key, m.key_len) }
    }

    fn payload(&self) -> Option<&[u8]> {
        let m = self.native();
        // SAFETY: librdkafka's payload bytes live with the message.
        unsafe { bytes(m.payload, m.len) }
    }

    unsafe fn payload_mut(&mut self) -> Option<&mut [u8]> {
        let m = self.native();
        // SAFETY: the caller takes librdkafka's lack of a promise (the trait's
        // contract); the bytes live with the message, which `&mut self` holds.
        (!m.payload.is_null())
            .then(|| unsafe { std::slice::from_raw_parts_mut(m.payload as *mut u8, m.len) })
    }

    fn topic(&self) -> &str {
        let rkt = self.native().rkt;
        if rkt.is_null() {
            // A consumer error of no partition.
            return "";
        }
        // SAFETY: a consumed message's topic handle lives with the message,
        // and its name is NUL-terminated.
        let name = unsafe { CStr::from_ptr(rdsys::rd_kafka_topic_name(rkt)) };
        // Kafka topic names are ASCII (the broker refuses others).
        name.to_str().unwrap_or("")
    }

    fn partition(&self) -> i32 {
        self.native().partition
    }

    fn offset(&self) -> i64 {
        self.native().offset
    }

    fn timestamp(&self) -> Timestamp {
        let mut kind = rdsys::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
        // SAFETY: a live message; librdkafka writes the type.
        let ms = unsafe { rdsys::rd_kafka_message_timestamp(self.0.as_ptr(), &mut kind) };
        match kind {
            _ if ms == -1 => Timestamp::NotAvailable,
            rdsys::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_CREATE_TIME => {
                Timestamp::CreateTime(ms)
            }
            rdsys::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME => {
                Timestamp::LogAppendTime(ms)
            }
            _ => Timestamp::NotAvailable,
        }
    }

    fn headers(&self) -> Option<&BorrowedHeaders> {
        let mut native = std::ptr::null_mut();
        // SAFETY: a live message; librdkafka sets `native` to its own list.
        let err = unsafe { rdsys::rd_kafka_message_headers(self.0.as_ptr(), &mut native) };
        if err != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || native.is_null() {
            return None;
        }
        // SAFETY: rdkafka's `BorrowedHeaders` is a zero-sized view whose
        // address is the native list (rdkafka casts the same way); the list
        // lives with the message, which `&self` borrows.
        Some(unsafe { &*(native as *const BorrowedHeaders) })
    }
}

/// A consumer's queue, and the records taken from it not yet delivered.
///
/// Drop it before its consumer: librdkafka's consumer must not be
/// destroyed while a queue handle or a message of it is alive.
pub(super) struct RecordQueue {
    queue: NonNull<rdsys::rd_kafka_queue_t>,
    /// Taken, in queue order, not yet delivered.
    taken: VecDeque<Record>,
    buf: Vec<*mut rdsys::rd_kafka_message_t>,
}

// SAFETY: librdkafka's queues are thread-safe; this value is the only user
// of its handle, and its records are `Send`.
unsafe impl Send for RecordQueue {}

impl RecordQueue {
    /// The queue `consumer` delivers its records to (its consumer group's
    /// queue: the consumer must have a `group.id`).
    pub(super) fn of(consumer: &BaseConsumer) -> Result<RecordQueue, String> {
        // SAFETY: a live client; librdkafka returns a new reference (or null
        // without a consumer group).
        let q = unsafe { rdsys::rd_kafka_queue_get_consumer(consumer.client().native_ptr()) };
        let queue = NonNull::new(q)
            .ok_or_else(|| "the Kafka consumer has no consumer queue (no group.id)".to_string())?;
        Ok(RecordQueue {
            queue,
            taken: VecDeque::new(),
            buf: Vec::with_capacity(TAKE),
        })
    }

    /// The next record, waiting up to `wait` when none is queued (`None`
    /// when none came). Takes every record already queued (up to
    /// [`TAKE`]) at once, and never waits while one is there.
    pub(super) fn next(&mut self, wait: Duration) -> Option<Record> {
        if self.taken.is_empty() && self.take(Duration::ZERO, TAKE) == 0 {
            // librdkafka's batch call waits for all `n` records: wait for
            // one, and take the rest without waiting on the next call.
            self.take(wait, 1);
        }
        self.taken.pop_front()
    }

    /// Puts `r` back in front, the next record delivered.
    pub(super) fn put_back(&mut self, r: Record) {
        self.taken.push_front(r);
    }

    /// Drops the records taken and not delivered (the consumer is
    /// repositioned: they are not the ones it reads next).
    pub(super) fn clear(&mut self) {
        self.taken.clear();
    }

    /// Takes up to `n` queued records, waiting up to `wait` for them.
    fn take(&mut self, wait: Duration, n: usize) -> usize {
        let n = n.min(self.buf.capacity());
        let ms = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: `buf` has room for `n` pointers; librdkafka writes the
        // first `got` of them and hands those messages over.
        let got = unsafe {
            rdsys::rd_kafka_consume_batch_queue(self.queue.as_ptr(), ms, self.buf.as_mut_ptr(), n)
        };
        let got = usize::try_from(got).unwrap_or(0).min(n);
        // SAFETY: librdkafka wrote `got` pointers.
        unsafe { self.buf.set_len(got) };
        self.taken
            .extend(self.buf.drain(..).filter_map(NonNull::new).map(Record));
        got
    }
}

impl Drop for RecordQueue {
    fn drop(&mut self) {
        self.taken.clear();
        // SAFETY: the reference `rd_kafka_queue_get_consumer` returned,
        // released once.
        unsafe { rdsys::rd_kafka_queue_destroy(self.queue.as_ptr()) }
    }
}
